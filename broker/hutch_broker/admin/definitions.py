"""``GET/POST /api/definitions[/{vh}]`` (API-12): export, and all-or-nothing import.

The model's importer applies items one by one, so a bad item half-way would
leave a half-imported broker.  An HTTP import therefore validates everything
before it changes anything: first every item's shape, names and keys
(``check``: strings where names go, shortstr lengths as model/names.py says),
then a rehearsal into a scratch ``Broker`` holding a copy of the current
state, including what the export leaves out but an import can collide with:
exclusive queues and server-named ``amq.*`` queues.  Any error in either pass
is a 400 and the real broker is untouched; only then is it imported for real.
Every pass is a generator of short steps (an item each) run a slice per loop turn
(``slicing.run_steps``), and imports run one at a time; a change another client makes
while the import applies is handled item by item (``_Refusals``; docs/isolation/definitions.md).
Policies are matched once per entity, after the import, a slice per loop turn (the
rehearsal never matches them: no refusal depends on which policy applies), and their
patterns are compiled once, ahead, in a worker thread.
The per-vhost forms use RabbitMQ's vhost export shape: only the vhost's
objects, without ``vhost`` fields, imported into the vhost named in the URL.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Generator
from typing import Any, Final

from hutch_broker.admin import bodies, errors, slicing
from hutch_broker.model import limits, patterns, policychanges
from hutch_broker.model.broker import Broker, import_steps
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors

VHOST_SECTIONS: Final = ("parameters", "policies", "queues", "exchanges", "bindings")
_HEADER_KEYS: Final = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")
IMPORT_ERRORS: Final = (ValueError, KeyError, TypeError, AttributeError, re.error)
_PER_STEP: Final = 50  # items looked at per step where a step is a filter, not an import


async def export(broker: Broker, vhost: str | None = None) -> dict[str, Any]:
    """The full export (or the per-vhost one), built a slice of items per loop turn."""
    full = await slicing.run_steps(broker.export_steps(vhost=vhost))
    if vhost is None:
        return full
    return await slicing.run_steps(_vhost_export_steps(full, vhost))


def _vhost_export_steps(full: dict[str, Any], vhost: str) -> Generator[None, None, dict[str, Any]]:
    result: dict[str, Any] = {key: full[key] for key in _HEADER_KEYS if key in full}
    for section in VHOST_SECTIONS:
        result[section] = []
        for item in full.get(section, []):
            if item.get("vhost") == vhost:
                result[section].append(
                    {key: value for key, value in item.items() if key != "vhost"}
                )
            yield
    return result


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


def scoped_steps(body: dict[str, Any], vhost: str) -> Generator[None, None, dict[str, Any]]:
    """``scoped_to_vhost`` as steps of one item each."""
    scoped: dict[str, Any] = {}
    for section in VHOST_SECTIONS:
        items = body.get(section, [])
        if not isinstance(items, list):
            raise errors.bad_request(f"'{section}' must be a list of objects")
        scoped[section] = []
        for item in items:
            if not isinstance(item, dict):
                raise errors.bad_request(f"'{section}' must be a list of objects")
            scoped[section].append({**item, "vhost": vhost})
            yield
    return scoped


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc}"
    return str(exc)


# -- the shape pass --------------------------------------------------------------------------

# section -> (fields that must be strings when present, fields that must be present)
_STRINGS: Final = {
    "vhosts": (("name",), ("name",)),
    "users": (("name", "password_hash"), ("name", "password_hash")),
    "permissions": (
        ("vhost", "user", "configure", "write", "read"),
        ("vhost", "user", "configure", "write", "read"),
    ),
    "topic_permissions": (
        ("vhost", "user", "exchange", "write", "read"),
        ("vhost", "user", "exchange", "write", "read"),
    ),
    "policies": (("vhost", "name"), ("vhost", "name")),
    "parameters": (("vhost", "name", "component"), ()),
    "exchanges": (("vhost", "name", "type"), ("vhost", "name")),
    "queues": (("vhost", "name"), ("vhost", "name")),
    "bindings": (
        ("vhost", "source", "destination", "destination_type", "routing_key"),
        ("vhost", "source", "destination"),
    ),
}
# section -> the string fields that travel as AMQP shortstrs, with their kind of name.
_SHORTSTRS: Final = {
    "policies": (("name", "policy"),),
    "parameters": (("name", "policy"),),
    "exchanges": (("name", "exchange"),),
    "queues": (("name", "queue"),),
    "bindings": (
        ("source", "exchange"),
        ("destination", "destination"),
        ("routing_key", "routing_key"),
    ),
}


def _check_item(section: str, item: dict[str, Any]) -> None:
    strings, required = _STRINGS[section]
    for key in required:
        if key not in item:
            raise errors.bad_request(f"{section}: missing key '{key}'")
    for key in strings:
        if key in item and not isinstance(item[key], str):
            raise errors.bad_request(f"{section}: '{key}' must be a string")
    for key, kind in _SHORTSTRS.get(section, ()):
        if key in item:
            bodies.name(kind, item[key])
    for key in ("arguments", "value", "definition"):
        value = item.get(key)
        if key == "value" and value == [] and item.get("component") == limits.VHOST_COMPONENT:
            continue  # RabbitMQ exports a vhost's cleared limits as its empty proplist, `[]`
        if value is not None and not isinstance(value, dict):
            raise errors.bad_request(f"{section}: '{key}' must be an object")
    if isinstance(item.get("arguments"), dict):
        bodies.named_values(bodies.name_table("arguments", item["arguments"]))
    definition = item.get("definition")
    if isinstance(item.get("value"), dict):
        definition = item["value"].get("definition")
    if isinstance(definition, dict):
        bodies.named_values(definition)


def check(definitions: dict[str, Any]) -> None:
    """Every item's shape, names and keys; a 400 before anything is applied."""
    for _ in check_steps(definitions):
        pass


def check_steps(definitions: dict[str, Any]) -> Generator[None, None, None]:
    """``check``, one item per step."""
    if not isinstance(definitions, dict):
        raise errors.bad_request("definitions must be a JSON object")
    for section in _STRINGS:
        items = definitions.get(section, [])
        if not isinstance(items, list):
            raise errors.bad_request(f"'{section}' must be a list of objects")
        for item in items:
            if not isinstance(item, dict):
                raise errors.bad_request(f"'{section}' must be a list of objects")
            _check_item(section, item)
            yield


# -- the rehearsal ------------------------------------------------------------------------


def _hidden_queues(broker: Broker) -> Generator[None, None, list[tuple[str, Queue]]]:
    """Queues the export leaves out or the importer refuses: exclusive and ``amq.*`` ones."""
    hidden: list[tuple[str, Queue]] = []
    for vhost in list(broker.vhosts.values()):
        queues = list(vhost.queues.values())
        for start in range(0, len(queues), _PER_STEP):
            hidden.extend(
                (vhost.name, queue)
                for queue in queues[start : start + _PER_STEP]
                if queue.exclusive_owner is not None or queue.name.startswith("amq.")
            )
            yield
    return hidden


def _kept(items: list[dict[str, Any]], drop: Any) -> Generator[None, None, list[dict[str, Any]]]:
    kept: list[dict[str, Any]] = []
    for start in range(0, len(items), _PER_STEP):
        kept.extend(item for item in items[start : start + _PER_STEP] if not drop(item))
        yield
    return kept


def _scratch_copy(broker: Broker) -> Generator[None, None, Broker]:
    """A broker with ``broker``'s definitions, loaded as an import would see them.

    The walk spans loop turns, so what it copies is the broker as it was while it ran, not at
    one instant: an item that cannot be loaded (its queue went meanwhile) is left out.
    """
    scratch = Broker(cluster_name=broker.cluster_name)
    scratch.loopback_users = list(broker.loopback_users)
    current = yield from broker.export_steps()
    hidden = yield from _hidden_queues(broker)
    hidden_names = {(vhost, queue.name) for vhost, queue in hidden}
    yield
    current["queues"] = yield from _kept(
        current["queues"], lambda item: (item["vhost"], item["name"]) in hidden_names
    )

    def hidden_binding(item: dict[str, Any]) -> bool:
        return (
            item["destination_type"] == "queue"
            and (item["vhost"], item["destination"]) in hidden_names
        )

    hidden_bindings = [item for item in current["bindings"] if hidden_binding(item)]
    current["bindings"] = yield from _kept(current["bindings"], hidden_binding)
    yield from import_steps(scratch, current, "http", _ignore, paused=[])
    for vhost_name, queue in hidden:
        if vhost_name not in scratch.vhosts:
            continue
        stand_in = Queue(
            queue.name,
            vhost=vhost_name,
            durable=queue.durable,
            exclusive_owner=queue.exclusive_owner,
            auto_delete=queue.auto_delete,
            arguments=queue.arguments,
        )
        stand_in.declared_via = queue.declared_via
        scratch.vhosts[vhost_name].queues[queue.name] = stand_in
        yield
    yield from import_steps(scratch, {"bindings": hidden_bindings}, "http", _ignore, paused=[])
    return scratch


def _ignore(kind: str, item: dict[str, Any], reason: str) -> None:
    """The scratch copy's items that no longer load: gone or changed while it was walked."""


def rehearse_steps(broker: Broker, definitions: dict[str, Any]) -> Generator[None, None, None]:
    """Import into a scratch copy of ``broker``; raises a 400 if anything fails.

    The scratch vhosts' policies stay paused: they are never matched (no refusal depends on it).
    """
    scratch = yield from _scratch_copy(broker)
    failure: errors.ApiError | None = None
    try:
        yield from import_steps(scratch, definitions, "http", None, paused=[])
    except errors.ApiError as exc:
        failure = exc
    except amqp_errors.AMQPError as exc:
        failure = errors.bad_request(errors.detail_of(exc))
    except Exception as exc:  # noqa: BLE001 - any refusal here must leave the broker untouched
        failure = errors.bad_request(_reason(exc) or type(exc).__name__)
    yield from _dismantle(scratch)  # not when closed (GeneratorExit): the collector frees it
    if failure is not None:
        raise failure


def _dismantle(scratch: Broker) -> Generator[None, None, None]:
    """Take the scratch copy apart a slice at a time. Left whole, its queues, exchanges and
    bindings are one cyclic heap (about 60,000 objects for 5,000 queues) that the collector
    would free in one pause of 40-60 ms."""
    for vhost in list(scratch.vhosts.values()):
        queues = list(vhost.queues.values())
        for start in range(0, len(queues), _PER_STEP):
            for queue in queues[start : start + _PER_STEP]:
                vhost.remove_queue(queue)
            yield
        names = list(vhost.exchanges)
        for start in range(0, len(names), _PER_STEP):
            for name in names[start : start + _PER_STEP]:
                vhost.delete_exchange(name)
            yield
    scratch.vhosts.clear()


def rehearse(broker: Broker, definitions: dict[str, Any]) -> None:
    for _ in rehearse_steps(broker, definitions):
        pass


# -- the import ----------------------------------------------------------------------------


class _Refusals:
    """What the real broker refused after a rehearsal that passed: another client's change
    made while the import ran.  An item whose vhost, exchange or queue is gone is skipped, as
    if that delete had come right after the import.  Anything else (say, the same queue
    declared meanwhile with other arguments) is skipped and named in a 409 at the end."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.conflicts: list[str] = []

    def __call__(self, kind: str, item: dict[str, Any], reason: str) -> None:
        if not self._gone(kind, item):
            self.conflicts.append(f"{kind} {item.get('name', '')!r}: {reason}".replace(" ''", ""))

    def _gone(self, kind: str, item: dict[str, Any]) -> bool:
        vhost = self.broker.vhosts.get(str(item.get("vhost")))
        if vhost is None:
            return "vhost" in item
        if kind != "binding":
            return False
        table = vhost.exchanges if item.get("destination_type") == "exchange" else vhost.queues
        source = str(item.get("source"))
        return (source != "" and source not in vhost.exchanges) or str(
            item.get("destination")
        ) not in table

    def raise_any(self) -> None:
        if self.conflicts:
            shown = "; ".join(self.conflicts[:10])
            more = f" (and {len(self.conflicts) - 10} more)" if len(self.conflicts) > 10 else ""
            reason = f"imported, except what changed meanwhile: {shown}{more}"
            raise errors.ApiError(409, {"error": "conflict", "reason": reason})


def _apply_steps(broker: Broker, definitions: dict[str, Any]) -> Generator[None, None, None]:
    """The real import; policy matching paused in the vhosts it touches, then one sliced pass."""
    paused: list[VirtualHost] = []
    refusals = _Refusals(broker)
    failure: errors.ApiError | None = None
    try:
        yield from import_steps(broker, definitions, "http", refusals, paused=paused)
    except IMPORT_ERRORS as exc:  # not expected after a rehearsal; still a clear answer
        failure = errors.bad_request(_reason(exc))
    except BaseException:
        for vhost in paused:
            vhost.resume_policies().run()  # every entity still ends with its policy
        raise
    for vhost in paused:
        change = vhost.resume_policies()
        while not change.run(policychanges.SLICE_UNITS):
            yield
    if failure is not None:
        raise failure
    refusals.raise_any()


_imports: weakref.WeakKeyDictionary[Broker, asyncio.Lock] = weakref.WeakKeyDictionary()


async def import_definitions(broker: Broker, definitions: dict[str, Any]) -> None:
    """Check, rehearse, then apply: each in slices, one import at a time per broker."""
    lock = _imports.setdefault(broker, asyncio.Lock())
    async with lock:
        await slicing.run_steps(check_steps(definitions))
        wanted = _policy_patterns(definitions) + _current_patterns(broker)  # the rehearsal's too
        compiled = await asyncio.to_thread(patterns.compile_ahead, wanted)
        with patterns.precompiled(compiled):
            await slicing.run_steps(rehearse_steps(broker, definitions))
            await slicing.run_steps_to_the_end(_apply_steps(broker, definitions))


async def import_vhost_definitions(broker: Broker, body: dict[str, Any], vhost: str) -> None:
    """The per-vhost form: every item placed in ``vhost``."""
    if not isinstance(body, dict):
        raise errors.bad_request("definitions must be a JSON object")
    scoped = await slicing.run_steps(scoped_steps(body, vhost))
    await import_definitions(broker, scoped)


def _current_patterns(broker: Broker) -> list[str]:
    return [
        policy.pattern
        for vhost in broker.vhosts.values()
        for table in (vhost.policies, vhost.operator_policies)
        for policy in table.values()
    ]


def _policy_patterns(definitions: dict[str, Any]) -> list[str]:
    """The document's policy and operator-policy patterns (``check`` has vetted the shapes)."""
    found = [item.get("pattern") for item in definitions.get("policies", [])]
    for item in definitions.get("parameters", []):
        value = item.get("value")
        if item.get("component") == "operator_policy" and isinstance(value, dict):
            found.append(value.get("pattern"))
    return [pattern for pattern in found if isinstance(pattern, str)]
