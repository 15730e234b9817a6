"""The broker's root object: vhosts, users, permissions and definitions.

Definitions use RabbitMQ's export format (the 3.10.8 shape of
``GET /api/definitions``) both on disk and over HTTP, so one encoder serves
persistence (P-1), export and import (API-12), and a definitions file from a
real RabbitMQ imports into Hutch unchanged.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, Final

from hutch_broker.model import access, budgets, changes, limits, paging, streams
from hutch_broker.model import policies as policies_mod
from hutch_broker.model.changes import Change
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors, identity

if TYPE_CHECKING:
    from hutch_broker.model.storage import LogStore

log = logging.getLogger(__name__)

COMPAT_VERSION: Final = "4.0.0"
FULL_ACCESS: Final = (".*", ".*", ".*")

# Told about each item a recovery import could not apply: (kind, item, reason).
SetAside = Callable[[str, dict[str, Any], str], None]
# What applying one stored item can raise when this version no longer accepts it: a policy
# pattern now refused (PatternError is a ValueError), an argument now validated (AMQPError), a
# field missing from a hand-edited file (KeyError, TypeError).
_UNAPPLIABLE: Final = (ValueError, KeyError, TypeError, errors.AMQPError)


class Broker:
    def __init__(
        self,
        *,
        cluster_name: str = "hutch@localhost",
        clock: Callable[[], int] | None = None,
        paging_store: LogStore | None = None,
        message_logs: LogStore | None = None,
        loopback_users: Iterable[str] = ("guest",),
    ) -> None:
        """``paging_store`` is where bodies go under memory pressure (none: never paged);
        ``message_logs`` where durable queues keep their messages (none: in memory only);
        ``loopback_users`` may connect only from localhost, as RabbitMQ's setting says."""
        self.cluster_name = cluster_name
        self.clock = clock
        self.pager = paging.Pager(paging_store)
        self.message_logs = message_logs
        # Where vhosts defer routing that does not fit in a loop turn: wired by dispatch.
        self.scheduler = budgets.Scheduler()
        # What stream queues borrow from dispatch: its group commit and this scheduler.
        self.streams = streams.StreamHooks(self.scheduler)
        self.vhosts: dict[str, VirtualHost] = {}
        self.users: dict[str, access.User] = {}
        self.permissions: dict[tuple[str, str], access.Permission] = {}
        # (vhost, user, exchange) → the user's routing-key regexes on that topic exchange
        self.topic_permissions: dict[tuple[str, str, str], access.TopicPermission] = {}
        # Runtime parameters outside any vhost (``/api/global-parameters``), JSON values.
        self.global_parameters: dict[str, Any] = {}
        self.loopback_users = list(loopback_users)
        # Set by the server once recovery has imported what is on disk: from then on every
        # durable definition change is journalled (recovery's own import must not be).
        self.on_definitions_changed: changes.ChangeListener = changes.ignore

    # -- bootstrap ----------------------------------------------------

    def create_defaults(self, *, user: str = "guest", password: str = "guest") -> None:  # noqa: S107
        """First boot only, as RabbitMQ: vhost "/" and an administrator."""
        self.add_vhost("/")
        self.put_user(user, access.hash_password(password), ["administrator"])
        self.set_permission("/", user, *FULL_ACCESS)
        token = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        self.set_global_parameter("internal_cluster_id", f"rabbitmq-cluster-id-{token}")

    # -- vhosts -------------------------------------------------------

    def add_vhost(
        self,
        name: str,
        *,
        description: str = "",
        tags: list[str] | None = None,
        default_queue_type: str | None = None,
        replace_metadata: bool = False,
    ) -> tuple[VirtualHost, bool]:
        """``replace_metadata``: description and tags become exactly these, as a management
        PUT does on RabbitMQ 3.10.8 (a definitions import keeps what it does not name). A
        default queue type is changed only when named (None keeps it; classic for a new one)."""
        existing = self.vhosts.get(name)
        if existing is not None:
            existing.description = description or ("" if replace_metadata else existing.description)
            if tags is not None:
                existing.tags = tags
            if default_queue_type is not None:
                existing.default_queue_type = default_queue_type
            self._definitions_changed(Change("vhosts", changes.vhost_item(existing)))
            return existing, False
        vhost = VirtualHost(
            name,
            description=description,
            tags=tags or [],
            default_queue_type=default_queue_type or "classic",
            on_definitions_changed=self._definitions_changed,
            pager=self.pager,
            message_logs=self.message_logs,
            backlog=budgets.Backlog(self.scheduler),
            streams_hooks=self.streams,
            clock=self.clock,
        )
        self.vhosts[name] = vhost
        self._definitions_changed(Change("vhosts", changes.vhost_item(vhost)))
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
        for topic_key in [key for key in self.topic_permissions if key[0] == name]:
            del self.topic_permissions[topic_key]
        # Deleting a vhost deletes everything in it: the journal applies the same rule.
        self._definitions_changed(Change("vhosts", changes.vhost_item(vhost), deleted=True))
        return True

    # -- users and permissions ---------------------------------------

    def put_user(
        self,
        name: str,
        password_hash: str,
        tags: list[str],
        user_limits: dict[str, int] | None = None,
    ) -> bool:
        """Create or replace a user; its limits stay unless ``user_limits`` is given."""
        existing = self.users.get(name)
        kept = dict(existing.limits) if existing is not None else {}
        user = access.User(name, password_hash, tags, kept if user_limits is None else user_limits)
        self.users[name] = user
        self._definitions_changed(Change("users", changes.user_item(user)))
        return existing is None

    # -- global parameters ---------------------------------------------

    def set_global_parameter(self, name: str, value: Any) -> bool:
        """Create or replace; True when created. ``cluster_name`` renames the cluster."""
        created = name not in self.global_parameters
        self.global_parameters[name] = value
        self._definitions_changed(Change("global_parameters", {"name": name, "value": value}))
        return created

    def delete_global_parameter(self, name: str) -> bool:
        if name not in self.global_parameters:
            return False
        value = self.global_parameters.pop(name)
        item = {"name": name, "value": value}
        self._definitions_changed(Change("global_parameters", item, deleted=True))
        return True

    @property
    def display_cluster_name(self) -> str:
        """The ``cluster_name`` global parameter when set to a string, else the configured one.

        A stored name longer than a connection.start can carry (one imported from a definitions
        file; the management API refuses them) is not used: every new connection would fail.
        """
        chosen = self.global_parameters.get("cluster_name")
        if isinstance(chosen, str) and chosen and cluster_name_fits(chosen):
            return chosen
        return self.cluster_name

    # -- limits (model/limits.py) ----------------------------------------

    def set_vhost_limit(self, vhost_name: str, name: str, value: int) -> None:
        vhost = self.get_vhost(vhost_name)
        vhost.limits[name] = value
        self._definitions_changed(Change("parameters", changes.vhost_limits_item(vhost)))

    def replace_vhost_limits(self, vhost_name: str, values: dict[str, int]) -> bool:
        """All of a vhost's limits at once (the ``vhost-limits`` parameter); True if new."""
        vhost = self.get_vhost(vhost_name)
        created = not vhost.limits
        vhost.limits = dict(values)
        self._definitions_changed(
            Change("parameters", changes.vhost_limits_item(vhost), deleted=not values)
        )
        return created

    def clear_vhost_limit(self, vhost_name: str, name: str) -> None:
        """Idempotent, as RabbitMQ's DELETE (204 for a limit that was never set)."""
        vhost = self.get_vhost(vhost_name)
        if vhost.limits.pop(name, None) is None:
            return
        item = changes.vhost_limits_item(vhost)
        self._definitions_changed(Change("parameters", item, deleted=not vhost.limits))

    def set_user_limit(self, user_name: str, name: str, value: int) -> None:
        user = self.users[user_name]
        user.limits[name] = value
        self._definitions_changed(Change("users", changes.user_item(user)))

    def clear_user_limit(self, user_name: str, name: str) -> None:
        user = self.users[user_name]
        if user.limits.pop(name, None) is not None:
            self._definitions_changed(Change("users", changes.user_item(user)))

    def delete_user(self, name: str) -> bool:
        user = self.users.pop(name, None)
        if user is None:
            return False
        for key in [key for key in self.permissions if key[1] == name]:
            del self.permissions[key]
        for topic_key in [key for key in self.topic_permissions if key[1] == name]:
            del self.topic_permissions[topic_key]
        # The user's permissions go with it: the journal applies the same rule.
        self._definitions_changed(Change("users", changes.user_item(user), deleted=True))
        return True

    def authenticate(self, username: str, password: str) -> access.User | None:
        user = self.users.get(username)
        if user is None or not access.check_password(user.password_hash, password):
            return None
        return user

    def set_permission(self, vhost: str, user: str, configure: str, write: str, read: str) -> bool:
        key = (vhost, user)
        created = key not in self.permissions
        permission = self.permissions[key] = access.Permission(configure, write, read)
        self._definitions_changed(
            Change("permissions", changes.permission_item(vhost, user, permission))
        )
        return created

    def delete_permission(self, vhost: str, user: str) -> bool:
        permission = self.permissions.pop((vhost, user), None)
        if permission is None:
            return False
        item = changes.permission_item(vhost, user, permission)
        self._definitions_changed(Change("permissions", item, deleted=True))
        return True

    def permission(self, vhost: str, user: str) -> access.Permission | None:
        return self.permissions.get((vhost, user))

    def set_topic_permission(
        self, vhost: str, user: str, exchange: str, write: str, read: str
    ) -> bool:
        """Sets one exchange's topic permission; True when the user had none in this vhost
        (RabbitMQ answers 201 then, and 204 for every further exchange)."""
        created = not self.topic_permissions_of(vhost, user)
        permission = access.TopicPermission(exchange, write, read)
        self.topic_permissions[(vhost, user, exchange)] = permission
        item = changes.topic_permission_item(vhost, user, permission)
        self._definitions_changed(Change("topic_permissions", item))
        return created

    def clear_topic_permissions(self, vhost: str, user: str) -> bool:
        """Deletes all of the user's topic permissions in the vhost, as RabbitMQ 3.10.8's
        ``DELETE /api/topic-permissions/{vhost}/{user}`` does (it has no per-exchange form)."""
        doomed = self.topic_permissions_of(vhost, user)
        for permission in doomed:
            del self.topic_permissions[(vhost, user, permission.exchange)]
            item = changes.topic_permission_item(vhost, user, permission)
            self._definitions_changed(Change("topic_permissions", item, deleted=True))
        return bool(doomed)

    def topic_permissions_of(self, vhost: str, user: str) -> list[access.TopicPermission]:
        return [
            p for (vh, name, _), p in self.topic_permissions.items() if (vh, name) == (vhost, user)
        ]

    def topic_permission(
        self, vhost: str, user: str, exchange: str
    ) -> access.TopicPermission | None:
        return self.topic_permissions.get((vhost, user, exchange))

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

    def _definitions_changed(self, change: Change | None = None, /) -> None:
        self.on_definitions_changed(change)

    # -- definitions --------------------------------------------------

    def export_definitions(self, *, durable_only: bool = False) -> dict[str, Any]:
        """The 3.10.8 export shape (API-12); ``durable_only`` for the on-disk copy."""
        definitions = self._export_globals()
        for vhost in self.vhosts.values():
            _export_vhost(vhost, definitions, durable_only=durable_only)
        return definitions

    def export_steps(
        self, *, vhost: str | None = None, per_step: int = 50, durable_only: bool = False
    ) -> Generator[None, None, dict[str, Any]]:
        """``export_definitions()`` (of one vhost only, when named) as a generator that yields
        after about ``per_step`` items and returns the export.

        Why: the HTTP export of a broker with many objects must not walk it all in one loop
        turn. Each vhost's queues, exchanges and bindings are listed at one instant, in one
        step (list copies), then encoded ``per_step`` at a time, so the export never holds a
        binding whose queue was declared after the queues were listed.
        """
        definitions = self._export_globals()
        chosen = list(self.vhosts.values()) if vhost is None else [self.vhosts[vhost]]
        for host in chosen:
            yield from _export_vhost_steps(host, definitions, per_step, durable_only=durable_only)
        return definitions

    def _export_globals(self) -> dict[str, Any]:
        """The header and the sections outside vhosts; the vhost sections empty."""
        return {
            "rabbit_version": COMPAT_VERSION,
            "rabbitmq_version": COMPAT_VERSION,
            "product_name": "Hutch",
            "product_version": COMPAT_VERSION,
            "users": [changes.user_item(user) for user in self.users.values()],
            "vhosts": [changes.vhost_item(vhost) for vhost in self.vhosts.values()],
            "permissions": [
                changes.permission_item(vhost, user, permission)
                for (vhost, user), permission in self.permissions.items()
            ],
            "topic_permissions": [
                changes.topic_permission_item(vhost, user, permission)
                for (vhost, user, _), permission in self.topic_permissions.items()
            ],
            "parameters": [],
            "global_parameters": [
                {"name": name, "value": value} for name, value in self.global_parameters.items()
            ],
            "policies": [],
            "queues": [],
            "exchanges": [],
            "bindings": [],
        }

    def import_definitions(
        self,
        definitions: dict[str, Any],
        *,
        source: str = "http",
        set_aside: SetAside | None = None,
        defer_policies: bool = False,
    ) -> list[VirtualHost]:
        """Idempotent import; raises ValueError with a reason on a bad document.

        With ``defer_policies``, the vhosts the document touches store its policies without
        matching them and declare its entities without policies; the caller gets those vhosts
        back and must ``resume_policies()`` on each, then run the change that returns (in
        slices, from the management API): every entity is matched once, not once per policy.

        With ``set_aside`` (recovery), an item this version cannot apply is handed to it and
        skipped instead: definitions a previous version accepted and stored must never stop the
        broker from starting (a refused policy pattern used to brick the restart). Everything
        else in the document is still applied.
        """
        if not isinstance(definitions, dict):
            raise ValueError("definitions must be a JSON object")
        if not defer_policies:
            _import(self, definitions, source, set_aside, paused=None)
            return []
        paused: list[VirtualHost] = []
        try:
            _import(self, definitions, source, set_aside, paused=paused)
        except BaseException:
            for vhost in paused:
                vhost.resume_policies().run()  # a failed import still leaves every entity right
            raise
        return paused


def cluster_name_fits(name: str) -> bool:
    """Whether a cluster name fits in connection.start (protocol/identity.py says why)."""
    return len(name.encode("utf-8", "surrogatepass")) <= identity.MAX_CLUSTER_NAME_BYTES


def cluster_name_problem(name: str) -> str | None:
    """Why the management API refuses ``name`` as the cluster's name, or None."""
    if cluster_name_fits(name):
        return None
    return (
        f"cluster name is longer than {identity.MAX_CLUSTER_NAME_BYTES} bytes: every "
        "connection.start carries it"
    )


def _export_vhost(vhost: VirtualHost, out: dict[str, Any], *, durable_only: bool) -> None:
    name = vhost.name
    out["policies"].extend(policy.as_json() for policy in vhost.policies.values())
    out["parameters"].extend(
        changes.operator_policy_item(name, policy) for policy in vhost.operator_policies.values()
    )
    if vhost.limits:
        out["parameters"].append(changes.vhost_limits_item(vhost))
    out["queues"].extend(
        changes.queue_item(name, queue)
        for queue in vhost.queues.values()
        if changes.queue_exported(queue, durable_only=durable_only)
    )
    out["exchanges"].extend(
        changes.exchange_item(name, exchange)
        for exchange in vhost.exchanges.values()
        if changes.exchange_exported(exchange, durable_only=durable_only)
    )
    out["bindings"].extend(
        changes.binding_item(name, binding)
        for binding in vhost.bindings()
        if changes.binding_exported(binding, durable_only=durable_only)
    )


def _export_vhost_steps(
    vhost: VirtualHost, out: dict[str, Any], per_step: int, *, durable_only: bool = False
) -> Generator[None, None, None]:
    name = vhost.name
    out["policies"].extend(policy.as_json() for policy in vhost.policies.values())
    out["parameters"].extend(
        changes.operator_policy_item(name, policy) for policy in vhost.operator_policies.values()
    )
    if vhost.limits:
        out["parameters"].append(changes.vhost_limits_item(vhost))
    kinds: list[tuple[str, list[Any], Callable[..., bool], Callable[..., dict[str, Any]]]] = [
        ("queues", list(vhost.queues.values()), changes.queue_exported, changes.queue_item),
        (
            "exchanges",
            list(vhost.exchanges.values()),
            changes.exchange_exported,
            changes.exchange_item,
        ),
        ("bindings", vhost.bindings(), changes.binding_exported, changes.binding_item),
    ]  # each listed at this instant, rendered over the steps below
    yield
    for key, items, exported, render in kinds:
        for start in range(0, len(items), per_step):
            out[key].extend(
                render(name, item)
                for item in items[start : start + per_step]
                if exported(item, durable_only=durable_only)
            )
            yield


def _items(definitions: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = definitions.get(key, [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"'{key}' must be a list of objects")
    return items


def _import(
    broker: Broker,
    definitions: dict[str, Any],
    source: str,
    set_aside: SetAside | None,
    *,
    paused: list[VirtualHost] | None,
) -> None:
    for _ in import_steps(broker, definitions, source, set_aside, paused=paused):
        pass


def import_steps(
    broker: Broker,
    definitions: dict[str, Any],
    source: str,
    set_aside: SetAside | None,
    *,
    paused: list[VirtualHost] | None,
) -> Generator[None, None, None]:
    """The import, one item per step: the management API advances it a slice per loop turn.

    With ``paused`` (a list), policy matching is paused in the vhosts the document touches and
    they are appended to it; the caller resumes them (``Broker.import_definitions`` explains).
    """

    def each(
        key: str, kind: str, apply: Callable[[dict[str, Any]], object]
    ) -> Generator[None, None, None]:
        for item in _items(definitions, key):
            if set_aside is None:
                apply(item)
            else:
                try:
                    apply(item)
                except _UNAPPLIABLE as exc:
                    set_aside(kind, item, str(exc) or type(exc).__name__)
            yield

    yield from each("vhosts", "vhost", lambda item: _import_vhost(broker, item))
    if paused is not None:
        paused.extend(_pause_policies(broker, definitions))
    yield from each("users", "user", lambda item: _import_user(broker, item))
    yield from each("permissions", "permission", lambda item: _import_permission(broker, item))
    yield from each(
        "topic_permissions",
        "topic-permission",
        lambda item: _import_topic_permission(broker, item),
    )
    yield from each("policies", "policy", lambda item: _import_policy(broker, item, operator=False))
    yield from each("parameters", "parameter", lambda item: _import_parameter(broker, item))
    yield from each(
        "global_parameters",
        "global-parameter",
        lambda item: broker.set_global_parameter(str(item["name"]), item["value"]),
    )
    yield from each("exchanges", "exchange", lambda item: _import_exchange(broker, item))
    yield from each("queues", "queue", lambda item: _import_queue(broker, item, source))
    yield from each("bindings", "binding", lambda item: _import_binding(broker, item))


_POLICY_SECTIONS: Final = ("policies", "parameters", "queues", "exchanges")


def _pause_policies(broker: Broker, definitions: dict[str, Any]) -> list[VirtualHost]:
    """Pause policy matching in the existing vhosts the document's entities or policies name."""
    names = {
        item["vhost"]
        for section in _POLICY_SECTIONS
        for item in _items(definitions, section)
        if isinstance(item.get("vhost"), str)
    }
    touched = [broker.vhosts[name] for name in names if name in broker.vhosts]
    for vhost in touched:
        vhost.pause_policies()
    return touched


def _import_vhost(broker: Broker, item: dict[str, Any]) -> None:
    broker.add_vhost(
        str(item["name"]),
        description=str(item.get("description", "")),
        tags=_tags(item.get("tags")),
        default_queue_type=_queue_type(item.get("default_queue_type")),
    )


def _queue_type(value: Any) -> str | None:
    """A definitions file's vhost ``default_queue_type``: 3.10.8 exports ``undefined``."""
    return None if value in (None, "", "undefined") else str(value)


def _import_user(broker: Broker, item: dict[str, Any]) -> None:
    broker.put_user(
        str(item["name"]),
        str(item["password_hash"]),
        _tags(item.get("tags")),
        limits.validate_all("user", item.get("limits") or {}),
    )


def _import_permission(broker: Broker, item: dict[str, Any]) -> None:
    broker.set_permission(
        str(item["vhost"]),
        str(item["user"]),
        str(item["configure"]),
        str(item["write"]),
        str(item["read"]),
    )


def _import_topic_permission(broker: Broker, item: dict[str, Any]) -> None:
    broker.set_topic_permission(
        str(item["vhost"]),
        str(item["user"]),
        str(item["exchange"]),
        str(item["write"]),
        str(item["read"]),
    )


def _import_parameter(broker: Broker, item: dict[str, Any]) -> None:
    if item.get("component") == limits.VHOST_COMPONENT:
        # The parameter is the vhost's whole set of limits, as in RabbitMQ: an import replaces
        # them, and `[]` (how RabbitMQ exports cleared limits) clears them.
        values = limits.validate_all("vhost", item.get("value") or {})
        if values != broker.get_vhost(str(item["vhost"])).limits:
            broker.replace_vhost_limits(str(item["vhost"]), values)
        return
    if item.get("component") == "operator_policy":
        value = dict(item.get("value", {}))
        value.update(vhost=item["vhost"], name=item["name"])
        _import_policy(broker, value, operator=True)


def _import_exchange(broker: Broker, item: dict[str, Any]) -> None:
    vhost = broker.get_vhost(str(item["vhost"]))
    vhost.declare_exchange(
        str(item["name"]),
        str(item.get("type", "direct")),
        durable=bool(item.get("durable", True)),
        auto_delete=bool(item.get("auto_delete", False)),
        internal=bool(item.get("internal", False)),
        arguments=item.get("arguments") or {},
    )


def _import_queue(broker: Broker, item: dict[str, Any], source: str) -> None:
    vhost = broker.get_vhost(str(item["vhost"]))
    vhost.declare_queue(
        str(item["name"]),
        durable=bool(item.get("durable", True)),
        auto_delete=bool(item.get("auto_delete", False)),
        arguments=item.get("arguments") or {},
        source=source,
        check_limits=False,
    )


def _import_binding(broker: Broker, item: dict[str, Any]) -> None:
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
