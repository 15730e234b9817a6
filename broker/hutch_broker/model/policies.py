"""Policies and operator policies: validation, matching, application (POL-1..POL-4, POL-7, POL-8).

Validation returns RabbitMQ's "Validation failed" details, written with
Erlang-style values, because management clients and the Hutch operator show
them to users verbatim.  Matching is pure: given the policies of a vhost and
an entity, pick the one that applies.  Patterns are searched by ``patterns``,
in time bounded by the pattern and name sizes, because a policymaker's regex
is evaluated against every declared name.  Application writes the match and
the settings it makes effective onto a queue or exchange; the vhost applies
them to a new entity and to all of its entities after a policy change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from hutch_broker.model import patterns, streamargs
from hutch_broker.model import settings as settings_mod
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.queues import Queue

APPLY_TO: Final = ("all", "queues", "classic_queues", "quorum_queues", "streams", "exchanges")

USER_KEYS: Final = frozenset(
    {
        "message-ttl",
        "expires",
        "max-length",
        "max-length-bytes",
        "overflow",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "alternate-exchange",
        "ring-size",
        # accepted, no effect on a single-node classic broker
        "queue-mode",
        "queue-version",
        "delivery-limit",
        "ha-mode",
        "ha-params",
        "ha-sync-mode",
        "ha-promote-on-shutdown",
        "ha-promote-on-failure",
        "ha-sync-batch-size",
        "queue-master-locator",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "federation-upstream",
        "federation-upstream-set",
        "dead-letter-strategy",
        "initial-cluster-size",
        "max-age",
        "stream-max-segment-size-bytes",
        "queue-leader-locator",
        "consumer-timeout",
        "single-active-consumer",
    }
)
# RabbitMQ 3.10.8's operator-policy keys (observed: it refuses ha-mode, ha-params,
# ha-sync-mode and target-group-size there as not recognised), and Hutch's ring-size (RING-1).
OPERATOR_KEYS: Final = frozenset(
    {
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "ring-size",
        "delivery-limit",
        "max-in-memory-length",
        "max-in-memory-bytes",
    }
)
_NON_NEGATIVE: Final = {
    "max-length": "maximum length",
    "max-length-bytes": "maximum length in bytes",
    "message-ttl": "message TTL",
    "max-in-memory-length": "maximum in-memory length",
    "max-in-memory-bytes": "maximum in-memory bytes",
    "delivery-limit": "delivery limit",
}
_POSITIVE: Final = {"expires": "queue expiry", "ring-size": "ring size"}
_STRINGS: Final = {
    "dead-letter-exchange": "dead letter exchange name",
    "dead-letter-routing-key": "dead letter routing key",
    "alternate-exchange": "alternate exchange name",
}
_APPLIES: Final = {
    "queue": frozenset({"all", "queues", "classic_queues"}),
    "quorum_queue": frozenset({"all", "queues", "quorum_queues"}),
    "stream": frozenset({"all", "queues", "streams"}),
    "exchange": frozenset({"all", "exchanges"}),
}
_OVERFLOW: Final = ("drop-head", "reject-publish", "reject-publish-dlx")
_QUEUE_MODES: Final = ("default", "lazy")


@dataclass(slots=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"
    _matcher: patterns.Matcher = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._matcher = patterns.compile_pattern(self.pattern)

    def matches(self, name: str, kind: str) -> bool:
        """``kind`` is "queue" (classic), "quorum_queue" or "exchange" (``queue_kind``)."""
        return self.applies_to(kind) and self._matcher.search(name)

    def applies_to(self, kind: str) -> bool:
        """Whether ``apply-to`` lets this policy apply to entities of ``kind`` at all."""
        return self.apply_to in _APPLIES[kind]

    def begin_search(self, name: str) -> patterns.Searching:
        """A search of ``name`` that can be advanced in slices (``model/policychanges``)."""
        return self._matcher.begin(name)

    def outranks(self, other: Policy | None) -> bool:
        """POL-2: a higher priority wins; at equal priority, the lower name."""
        if other is None:
            return True
        return (self.priority, _neg(self.name)) > (other.priority, _neg(other.name))

    def as_json(self) -> dict[str, Any]:
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": self.definition,
            "priority": self.priority,
        }


def erlang_term(value: Any) -> str:
    """Write a JSON value the way RabbitMQ's validation messages do."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'<<"{value}">>' if value else "<<>>"  # Erlang writes "" as <<>>
    if isinstance(value, list):
        return "[" + ",".join(erlang_term(item) for item in value) + "]"
    if value is None:
        return "null"
    return str(value)


def validate(body: Any, *, operator: bool) -> tuple[Policy | None, str | None]:
    """Check a PUT body; returns (fields, None) or (None, detail)."""
    if not isinstance(body, dict):
        return None, "body must be a JSON object"
    definition = body.get("definition")
    if not isinstance(definition, dict) or not definition:
        return None, "no policy provided"
    pattern = body.get("pattern")
    if not isinstance(pattern, str):
        return None, "pattern should be a string"
    detail = _pattern_problem(pattern)
    if detail is not None:
        return None, detail
    apply_to = body.get("apply-to", "all")
    if apply_to not in APPLY_TO:
        return None, (
            f"apply-to '{apply_to}' unrecognised; should be one of: 'queues', "
            "'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'"
        )
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        return None, f"priority should be a number, actually was {erlang_term(priority)}"
    detail = validate_definition(definition, operator=operator)
    if detail is not None:
        return None, detail
    policy = Policy("", "", pattern, dict(definition), priority, apply_to)
    return policy, None


def _pattern_problem(pattern: str) -> str | None:
    """RabbitMQ's text for a non-regex; Hutch's own for one it will not search (POL-2)."""
    try:
        patterns.compile_pattern(pattern)
    except patterns.InvalidPatternError as exc:
        return f"pattern should be regular expression but is invalid: {exc}"
    except patterns.UnsupportedPatternError as exc:
        return f"pattern {exc}"
    return None


def validate_definition(definition: dict[str, Any], *, operator: bool) -> str | None:
    allowed = OPERATOR_KEYS if operator else USER_KEYS
    unknown = [(key, value) for key, value in definition.items() if key not in allowed]
    if unknown:
        listed = ",".join(f"{{{erlang_term(key)},{erlang_term(val)}}}" for key, val in unknown)
        return f"[{listed}] are not recognised policy settings"
    for key, value in definition.items():
        detail = _validate_value(key, value)
        if detail is not None:
            return detail
    return None


def _validate_value(key: str, value: Any) -> str | None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if key in _NON_NEGATIVE and (not is_int or value < 0):
        return f"{erlang_term(value)} is not a valid {_NON_NEGATIVE[key]}"
    if key in _POSITIVE and (not is_int or value < 1):
        return f"{erlang_term(value)} is not a valid {_POSITIVE[key]}"
    if key in _STRINGS and not isinstance(value, str):
        return f"{erlang_term(value)} is not a valid {_STRINGS[key]}"
    if key == "overflow" and value not in _OVERFLOW:
        return f"{erlang_term(value)} is not a valid overflow value"
    if key == "queue-mode" and value not in _QUEUE_MODES:
        return f"{erlang_term(value)} is not a valid queue-mode value"
    if key == "max-age" and not _valid_max_age(value):
        return f"{erlang_term(value)} is not a valid max age"
    if key == "stream-max-segment-size-bytes" and (not is_int or value < 0):
        return f"{erlang_term(value)} is not a valid segment size"
    return None


def _valid_max_age(value: Any) -> bool:
    """A stream's ``max-age``: a string such as ``7D``, as its ``x-max-age`` argument is.

    RabbitMQ 3.10.8 answers 400 for ``0D``, ``7`` or ``1d`` but crashes with 500 on ``x``,
    ``""``, ``-1D`` or a number, and stores a list of strings; Hutch refuses them all with
    its 400 (docs/broker-differences.md), so a stored policy always has an age streams use.
    """
    return isinstance(value, str) and streamargs.parse_age(value) not in (None, 0)


def queue_kind(quorum: bool, stream: bool = False) -> str:
    """The ``kind`` a queue matches policies as: ``apply-to`` tells queue types apart."""
    if stream:
        return "stream"
    return "quorum_queue" if quorum else "queue"


def best_match(policies: Iterable[Policy], name: str, kind: str) -> Policy | None:
    """POL-2: the highest priority match; ties go to the lowest name."""
    best: Policy | None = None
    for policy in policies:
        if policy.outranks(best) and policy.matches(name, kind):
            best = policy
    return best


def ranked(policies: Iterable[Policy]) -> list[Policy]:
    """Best first (POL-2): the first that matches a name is the one that applies to it."""
    return sorted(policies, key=lambda policy: (-policy.priority, policy.name))


def _neg(name: str) -> tuple[int, ...]:
    """Sort key that makes the lexicographically lowest name compare highest."""
    return (*(-ord(char) for char in name), 0)


# -- application (POL-7) -------------------------------------------------------------------


def apply_to_queue(
    queue: Queue,
    *,
    policies: Iterable[Policy],
    operator_policies: Iterable[Policy],
    clock: Callable[[], int],
) -> None:
    """Give ``queue`` its policy, operator policy and the settings they make effective.

    The clock is read after the settings applied, as the lease and the head expiry use it.
    """
    kind = queue_kind(queue.quorum, streamargs.is_stream(queue.arguments))
    queue.policy = best_match(policies, queue.name, kind)
    queue.operator_policy = best_match(operator_policies, queue.name, kind)
    settle_queue(queue, clock=clock)


def settle_queue(queue: Queue, *, clock: Callable[[], int]) -> None:
    """Make the settings of ``queue.policy`` and ``queue.operator_policy`` effective."""
    old_expires = queue.settings.expires
    queue.apply_settings(
        settings_mod.effective(
            queue.arguments,
            queue.policy.definition if queue.policy else None,
            queue.operator_policy.definition if queue.operator_policy else None,
        )
    )
    now_ms = clock()
    if queue.settings.expires != old_expires:
        queue.last_used_ms = now_ms  # POL-7: a new expires restarts the lease
    queue.expire_head(now_ms)


def apply_to_exchange(exchange: Exchange, *, policies: Iterable[Policy]) -> None:
    """Give ``exchange`` its policy's name and alternate exchange (operator policies have none)."""
    if exchange.name == "":
        return  # the default exchange never uses an AE (EX-2); amq.* ones may
    install_on_exchange(exchange, best_match(policies, exchange.name, "exchange"))


def install_on_exchange(exchange: Exchange, policy: Policy | None) -> None:
    exchange.policy_name = policy.name if policy else None
    value = policy.definition.get("alternate-exchange") if policy else None
    exchange.policy_alternate_exchange = value if isinstance(value, str) else None
