"""``GET/POST /api/definitions[/{vh}]`` (API-12): export, and all-or-nothing import.

The model's importer applies items one by one, so a bad item half-way would
leave a half-imported broker.  An HTTP import therefore runs twice: first
into a scratch ``Broker`` loaded with a copy of the current definitions
(any error there is a 400 and the real broker is untouched), then for real.
The per-vhost forms use RabbitMQ's vhost export shape: only the vhost's
objects, without ``vhost`` fields, imported into the vhost named in the URL.
"""

from __future__ import annotations

import re
from typing import Any, Final

from hutch_broker.admin import errors
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import errors as amqp_errors

VHOST_SECTIONS: Final = ("parameters", "policies", "queues", "exchanges", "bindings")
_HEADER_KEYS: Final = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")
IMPORT_ERRORS: Final = (ValueError, KeyError, TypeError, AttributeError, re.error)


def vhost_export(full: dict[str, Any], vhost: str) -> dict[str, Any]:
    """The per-vhost export: header keys plus the vhost's sections, ``vhost`` keys removed."""
    result: dict[str, Any] = {key: full[key] for key in _HEADER_KEYS if key in full}
    for section in VHOST_SECTIONS:
        result[section] = [
            {key: value for key, value in item.items() if key != "vhost"}
            for item in full.get(section, [])
            if item.get("vhost") == vhost
        ]
    return result


def scoped_to_vhost(body: dict[str, Any], vhost: str) -> dict[str, Any]:
    """A per-vhost import body as a full one: every item placed in ``vhost``."""
    scoped: dict[str, Any] = {}
    for section in VHOST_SECTIONS:
        items = body.get(section, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise errors.bad_request(f"'{section}' must be a list of objects")
        scoped[section] = [{**item, "vhost": vhost} for item in items]
    return scoped


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc}"
    return str(exc)


def _apply(broker: Broker, definitions: dict[str, Any]) -> None:
    try:
        broker.import_definitions(definitions, source="http")
    except amqp_errors.AMQPError as exc:
        raise errors.bad_request(errors.detail_of(exc)) from None
    except IMPORT_ERRORS as exc:
        raise errors.bad_request(_reason(exc)) from None


def rehearse(broker: Broker, definitions: dict[str, Any]) -> None:
    """Import into a scratch copy of ``broker``; raises a 400 if anything fails."""
    scratch = Broker(cluster_name=broker.cluster_name)
    scratch.loopback_users = list(broker.loopback_users)
    _apply(scratch, broker.export_definitions())
    _apply(scratch, definitions)


def import_definitions(broker: Broker, definitions: dict[str, Any]) -> None:
    rehearse(broker, definitions)
    _apply(broker, definitions)
