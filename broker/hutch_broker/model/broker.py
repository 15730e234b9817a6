"""The broker's root object: vhosts, users, permissions and definitions.

Definitions use RabbitMQ's export format (the 3.10.8 shape of
``GET /api/definitions``) both on disk and over HTTP, so one encoder serves
persistence (P-1), export and import (API-12), and a definitions file from a
real RabbitMQ imports into Hutch unchanged.
"""

from __future__ import annotations

import datetime
import decimal
import logging
from collections.abc import Callable
from typing import Any, Final

from hutch_broker.model import access, paging
from hutch_broker.model import policies as policies_mod
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors

log = logging.getLogger(__name__)

COMPAT_VERSION: Final = "4.0.0"
FULL_ACCESS: Final = (".*", ".*", ".*")


class Broker:
    def __init__(
        self, *, cluster_name: str = "hutch@localhost", clock: Callable[[], int] | None = None
    ) -> None:
        self.cluster_name = cluster_name
        self.clock = clock
        self.pager = paging.Pager()
        self.vhosts: dict[str, VirtualHost] = {}
        self.users: dict[str, access.User] = {}
        self.permissions: dict[tuple[str, str], access.Permission] = {}
        self.loopback_users: list[str] = ["guest"]
        # Wired by the server: persistence of definitions and durable queues.
        self.on_definitions_changed: Callable[[], None] = lambda: None
        self.on_queue_created: Callable[[Queue], None] = lambda queue: None
        self.on_queue_deleted: Callable[[Queue], None] = lambda queue: None

    # -- bootstrap ----------------------------------------------------

    def create_defaults(self, *, user: str = "guest", password: str = "guest") -> None:  # noqa: S107
        """First boot only, as RabbitMQ: vhost "/" and an administrator."""
        self.add_vhost("/")
        self.put_user(user, access.hash_password(password), ["administrator"])
        self.set_permission("/", user, *FULL_ACCESS)

    # -- vhosts -------------------------------------------------------

    def add_vhost(
        self,
        name: str,
        *,
        description: str = "",
        tags: list[str] | None = None,
        default_queue_type: str = "classic",
    ) -> tuple[VirtualHost, bool]:
        existing = self.vhosts.get(name)
        if existing is not None:
            existing.description = description or existing.description
            if tags is not None:
                existing.tags = tags
            return existing, False
        vhost = VirtualHost(
            name, description=description, tags=tags or [], default_queue_type=default_queue_type
        )
        vhost.on_definitions_changed = self._definitions_changed
        vhost.on_queue_created = self._queue_created
        vhost.on_queue_deleted = self._queue_deleted
        if self.clock is not None:
            vhost.clock = self.clock
        vhost.pager = self.pager
        self.vhosts[name] = vhost
        self._definitions_changed()
        return vhost, True

    def get_vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise errors.not_allowed(f"vhost {name} not found")
        return vhost

    def delete_vhost(self, name: str) -> bool:
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        for queue in list(vhost.queues.values()):
            vhost.remove_queue(queue)
        for key in [key for key in self.permissions if key[0] == name]:
            del self.permissions[key]
        self._definitions_changed()
        return True

    # -- users and permissions ---------------------------------------

    def put_user(self, name: str, password_hash: str, tags: list[str]) -> bool:
        created = name not in self.users
        self.users[name] = access.User(name, password_hash, tags)
        self._definitions_changed()
        return created

    def delete_user(self, name: str) -> bool:
        if self.users.pop(name, None) is None:
            return False
        for key in [key for key in self.permissions if key[1] == name]:
            del self.permissions[key]
        self._definitions_changed()
        return True

    def authenticate(self, username: str, password: str) -> access.User | None:
        user = self.users.get(username)
        if user is None or not access.check_password(user.password_hash, password):
            return None
        return user

    def set_permission(self, vhost: str, user: str, configure: str, write: str, read: str) -> bool:
        key = (vhost, user)
        created = key not in self.permissions
        self.permissions[key] = access.Permission(configure, write, read)
        self._definitions_changed()
        return created

    def permission(self, vhost: str, user: str) -> access.Permission | None:
        return self.permissions.get((vhost, user))

    def set_paging(self, active: bool) -> None:
        """Memory pressure began or ended (model/paging.py)."""
        if active == self.pager.active:
            return
        self.pager.active = active
        if active:
            paged = sum(
                queue.page_out_excess()
                for vhost in self.vhosts.values()
                for queue in vhost.queues.values()
            )
            log.warning("memory pressure: paging message bodies out (%d paged now)", paged)
        else:
            log.info("memory pressure over: paging stopped")

    def tick(self, now_ms: int) -> None:
        for vhost in list(self.vhosts.values()):
            vhost.tick(now_ms)

    # -- hooks --------------------------------------------------------

    def _definitions_changed(self) -> None:
        self.on_definitions_changed()

    def _queue_created(self, queue: Queue) -> None:
        self.on_queue_created(queue)

    def _queue_deleted(self, queue: Queue) -> None:
        self.on_queue_deleted(queue)

    # -- definitions --------------------------------------------------

    def export_definitions(self, *, durable_only: bool = False) -> dict[str, Any]:
        """The 3.10.8 export shape (API-12); ``durable_only`` for the on-disk copy."""
        definitions: dict[str, Any] = {
            "rabbit_version": COMPAT_VERSION,
            "rabbitmq_version": COMPAT_VERSION,
            "product_name": "Hutch",
            "product_version": COMPAT_VERSION,
            "users": [
                {
                    "name": user.name,
                    "password_hash": user.password_hash,
                    "hashing_algorithm": access.HASHING_ALGORITHM,
                    "tags": list(user.tags),
                    "limits": {},
                }
                for user in self.users.values()
            ],
            "vhosts": [_vhost_json(vhost) for vhost in self.vhosts.values()],
            "permissions": [
                {
                    "user": user,
                    "vhost": vhost,
                    "configure": perm.configure,
                    "write": perm.write,
                    "read": perm.read,
                }
                for (vhost, user), perm in self.permissions.items()
            ],
            "topic_permissions": [],
            "parameters": [],
            "global_parameters": [],
            "policies": [],
            "queues": [],
            "exchanges": [],
            "bindings": [],
        }
        for vhost in self.vhosts.values():
            _export_vhost(vhost, definitions, durable_only=durable_only)
        return definitions

    def import_definitions(self, definitions: dict[str, Any], *, source: str = "http") -> None:
        """Idempotent import; raises ValueError with a reason on a bad document."""
        if not isinstance(definitions, dict):
            raise ValueError("definitions must be a JSON object")
        _import(self, definitions, source)


def _vhost_json(vhost: VirtualHost) -> dict[str, Any]:
    item: dict[str, Any] = {"name": vhost.name}
    if vhost.description or vhost.tags:
        item["description"] = vhost.description
        item["tags"] = list(vhost.tags)
    if vhost.default_queue_type != "classic":
        item["default_queue_type"] = vhost.default_queue_type
    return item


def json_safe(value: Any) -> Any:
    """Field-table values (bytes, decimals, timestamps) as JSON values."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def _export_vhost(vhost: VirtualHost, out: dict[str, Any], *, durable_only: bool) -> None:
    name = vhost.name
    out["policies"].extend(policy.as_json() for policy in vhost.policies.values())
    for policy in vhost.operator_policies.values():
        out["parameters"].append(
            {
                "value": {
                    "pattern": policy.pattern,
                    "definition": policy.definition,
                    "priority": policy.priority,
                    "apply-to": policy.apply_to,
                },
                "vhost": name,
                "component": "operator_policy",
                "name": policy.name,
            }
        )
    for queue in vhost.queues.values():
        if queue.exclusive_owner is not None or (durable_only and not queue.durable):
            continue
        out["queues"].append(
            {
                "name": queue.name,
                "vhost": name,
                "durable": queue.durable,
                "auto_delete": queue.auto_delete,
                "arguments": json_safe(queue.arguments),
            }
        )
    for exchange in vhost.exchanges.values():
        if exchange.name == "" or exchange.name.startswith("amq."):
            continue
        if durable_only and not exchange.durable:
            continue
        out["exchanges"].append(
            {
                "name": exchange.name,
                "vhost": name,
                "type": exchange.kind,
                "durable": exchange.durable,
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
                "arguments": json_safe(exchange.arguments),
            }
        )
    for binding in vhost.bindings():
        if durable_only and not binding.durable:
            continue
        if getattr(binding.destination, "exclusive_owner", None) is not None:
            continue
        out["bindings"].append(
            {
                "source": binding.source.name,
                "vhost": name,
                "destination": binding.destination.name,
                "destination_type": binding.destination_type,
                "routing_key": binding.routing_key,
                "arguments": json_safe(binding.arguments),
            }
        )


def _items(definitions: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = definitions.get(key, [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"'{key}' must be a list of objects")
    return items


def _import(broker: Broker, definitions: dict[str, Any], source: str) -> None:
    for item in _items(definitions, "vhosts"):
        broker.add_vhost(
            str(item["name"]),
            description=str(item.get("description", "")),
            tags=_tags(item.get("tags")),
            default_queue_type=str(item.get("default_queue_type", "classic")),
        )
    for item in _items(definitions, "users"):
        broker.put_user(str(item["name"]), str(item["password_hash"]), _tags(item.get("tags")))
    for item in _items(definitions, "permissions"):
        broker.set_permission(
            str(item["vhost"]),
            str(item["user"]),
            str(item["configure"]),
            str(item["write"]),
            str(item["read"]),
        )
    for item in _items(definitions, "policies"):
        _import_policy(broker, item, operator=False)
    for item in _items(definitions, "parameters"):
        if item.get("component") == "operator_policy":
            value = dict(item.get("value", {}))
            value.update(vhost=item["vhost"], name=item["name"])
            _import_policy(broker, value, operator=True)
    for item in _items(definitions, "exchanges"):
        vhost = broker.get_vhost(str(item["vhost"]))
        vhost.declare_exchange(
            str(item["name"]),
            str(item.get("type", "direct")),
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            internal=bool(item.get("internal", False)),
            arguments=item.get("arguments") or {},
        )
    for item in _items(definitions, "queues"):
        vhost = broker.get_vhost(str(item["vhost"]))
        vhost.declare_queue(
            str(item["name"]),
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            arguments=item.get("arguments") or {},
            source=source,
        )
    for item in _items(definitions, "bindings"):
        vhost = broker.get_vhost(str(item["vhost"]))
        kind = "exchange" if item.get("destination_type") == "exchange" else "queue"
        destination = vhost.destination(kind, str(item["destination"]))
        vhost.bind(
            str(item["source"]),
            destination,
            str(item.get("routing_key", "")),
            item.get("arguments") or {},
        )


def _tags(value: Any) -> list[str]:
    if isinstance(value, str):
        return [tag for tag in value.split(",") if tag]
    if isinstance(value, list):
        return [str(tag) for tag in value]
    return []


def _import_policy(broker: Broker, item: dict[str, Any], *, operator: bool) -> None:
    parsed, detail = policies_mod.validate(item, operator=operator)
    if parsed is None:
        raise ValueError(f"policy '{item.get('name')}': {detail}")
    vhost = broker.get_vhost(str(item["vhost"]))
    parsed.vhost = vhost.name
    parsed.name = str(item["name"])
    vhost.set_policy(parsed, operator=operator)
