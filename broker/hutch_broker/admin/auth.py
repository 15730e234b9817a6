"""Who is calling, and what they may see or change.

Authentication is HTTP Basic against the broker's users, with RabbitMQ's
loopback rule (``guest`` only from 127.0.0.0/8 or ::1) and its management
tags: a user needs ``management``, ``policymaker``, ``monitoring`` or
``administrator`` to use the API at all.  Authorisation mirrors
``rabbit_mgmt_util``:

- administrators see and manage everything;
- monitoring users see every vhost, connection and node, but change nothing
  outside vhosts they hold permissions in;
- policymakers manage policies in their vhosts;
- everyone else sees only the vhosts they hold permissions in.

On top of that, object operations (declare, delete, bind, publish, get)
check the same configure/write/read permissions an AMQP client would face
(CN-6), administrators included, as RabbitMQ does.  Every refusal is a 401.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from hutch_broker.admin import errors
from hutch_broker.model import access
from hutch_broker.model.broker import Broker
from hutch_broker.model.vhosts import VirtualHost

ADMINISTRATOR: Final = "administrator"
MONITORING: Final = "monitoring"
POLICYMAKER: Final = "policymaker"
MANAGEMENT_TAGS: Final = frozenset({ADMINISTRATOR, MONITORING, POLICYMAKER, "management"})
REALM: Final = 'Basic realm="RabbitMQ Management"'


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Basic dXNlcjpwYXNz`` -> ("user", "pass"); None when absent or malformed."""
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    username, separator, password = decoded.partition(":")
    return (username, password) if separator else None


def authenticate(broker: Broker, header: str | None, remote: str | None) -> access.User:
    credentials = parse_basic(header)
    if credentials is None:
        raise errors.not_authorized()
    user = broker.authenticate(*credentials)
    if user is None:
        raise errors.not_authorized()
    if user.name in broker.loopback_users and not access.is_loopback(remote):
        raise errors.not_authorized("User can only log in via localhost")
    if not MANAGEMENT_TAGS.intersection(user.tags):
        raise errors.not_authorized("Not management user")
    return user


# -- tags ---------------------------------------------------------------------------------


def is_admin(user: access.User) -> bool:
    return ADMINISTRATOR in user.tags


def is_monitor(user: access.User) -> bool:
    return is_admin(user) or MONITORING in user.tags


def is_policymaker(user: access.User) -> bool:
    return is_admin(user) or POLICYMAKER in user.tags


def require_admin(user: access.User) -> None:
    if not is_admin(user):
        raise errors.not_authorized("Not administrator user")


def require_monitor(user: access.User) -> None:
    if not is_monitor(user):
        raise errors.not_authorized("Not monitor user")


# -- vhosts -------------------------------------------------------------------------------


def can_log_in(broker: Broker, user: access.User, vhost: str) -> bool:
    return broker.permission(vhost, user.name) is not None


def can_see(broker: Broker, user: access.User, vhost: str) -> bool:
    return is_monitor(user) or can_log_in(broker, user, vhost)


def visible_vhosts(broker: Broker, user: access.User) -> list[VirtualHost]:
    return [vhost for vhost in broker.vhosts.values() if can_see(broker, user, vhost.name)]


def vhost_for_reading(broker: Broker, user: access.User, name: str) -> VirtualHost:
    """A vhost the user may list things in; 404 when missing, 401 when hidden."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        raise errors.not_found()
    if not can_see(broker, user, name):
        raise errors.not_authorized("User not authorised to access virtual host")
    return vhost


def vhost_for_writing(
    broker: Broker, user: access.User, name: str, *, creating: bool = False
) -> VirtualHost:
    """A vhost the user may change things in (administrators, or a permission holder).

    ``creating``: the write would make something in it, and a missing vhost is then
    ``vhost_not_found`` as RabbitMQ answers (errors.vhost_not_found)."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        raise errors.vhost_not_found() if creating else errors.not_found()
    if not (is_admin(user) or can_log_in(broker, user, name)):
        raise errors.not_authorized("User not authorised to access virtual host")
    return vhost


def vhost_for_policies(
    broker: Broker, user: access.User, name: str, *, creating: bool = False
) -> VirtualHost:
    if not is_policymaker(user):
        raise errors.not_authorized("User not authorised to access object")
    return vhost_for_writing(broker, user, name, creating=creating)


# -- AMQP permissions (CN-6) ------------------------------------------------------------


def check(
    broker: Broker, user: access.User, vhost: str, kind: str, resource_kind: str, name: str
) -> None:
    """``kind`` is configure/write/read; ``resource_kind`` is queue/exchange."""
    permission = broker.permission(vhost, user.name)
    resource = name or "amq.default"
    if permission is None or not permission.allows(kind, resource):
        raise errors.not_authorized(
            f"access to {resource_kind} '{resource}' in vhost '{vhost}' "
            f"refused for user '{user.name}'"
        )
