"""HTTP publish, get and the aliveness test (API-6, API-8, API-9): messages via JSON.

These are the only management calls that create or consume messages, so
they follow the AMQP path's rules: a publish is routed like ``basic.publish``
(CC/BCC included, TTL-2 expiration check) and then handed to waiting
consumers; a get is ``basic.get`` followed by ack, requeue or reject, and
requeued messages go back to their original places (Q-4).  JSON bodies are
parsed into small frozen requests first, so a bad body changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from hutch_broker.admin import bodies, errors
from hutch_broker.admin.views import formatting
from hutch_broker.model import access, budgets, publishes
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Queue
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors as amqp_errors
from hutch_broker.protocol import properties

ACK_MODES: Final = (
    "ack_requeue_true",
    "ack_requeue_false",
    "reject_requeue_true",
    "reject_requeue_false",
)
ENCODINGS: Final = ("auto", "base64")
ALIVENESS_QUEUE: Final = "aliveness-test"
ALIVENESS_PAYLOAD: Final = b"test_message"
# JSON property name -> pamqp keyword (AMQP's ``type`` is pamqp's ``message_type``).
PROPERTY_NAMES: Final = {
    "content_type": "content_type",
    "content_encoding": "content_encoding",
    "headers": "headers",
    "delivery_mode": "delivery_mode",
    "priority": "priority",
    "correlation_id": "correlation_id",
    "reply_to": "reply_to",
    "expiration": "expiration",
    "message_id": "message_id",
    "timestamp": "timestamp",
    "type": "message_type",
    "user_id": "user_id",
    "app_id": "app_id",
    "cluster_id": "cluster_id",
}
_JSON_NAMES: Final = {pamqp: name for name, pamqp in PROPERTY_NAMES.items()}


# -- publish ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PublishRequest:
    routing_key: str
    raw_properties: bytes
    body: bytes


def _timestamp(value: Any) -> int:
    """Any value the 64-bit wire field can carry, as over AMQP (RabbitMQ takes any integer over
    HTTP, even ones it then cannot deliver: those are refused here)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= properties.MAX_TIMESTAMP
    ):
        raise errors.bad_request(f"invalid property 'timestamp': {value!r}")
    return value


def _property_value(name: str, value: Any) -> Any:
    if name == "timestamp":
        return _timestamp(value)
    if name == "delivery_mode" and value not in (1, 2):
        raise errors.bad_request(f"invalid property 'delivery_mode': {value!r}")
    if name == "headers":
        if not isinstance(value, dict):
            raise errors.bad_request("invalid property 'headers': must be an object")
        bodies.name_table("headers", value)  # a key longer than a shortstr is refused, not cut
    return value


def encode_json_properties(props: dict[str, Any]) -> bytes:
    """The ``properties`` object of a publish as raw AMQP properties."""
    kwargs: dict[str, Any] = {}
    for name, value in props.items():
        keyword = PROPERTY_NAMES.get(name)
        if keyword is None:
            raise errors.bad_request(f"invalid property '{name}'")
        if value is not None:
            kwargs[keyword] = _property_value(name, value)
    try:
        return properties.encode_properties(**kwargs)
    except (TypeError, ValueError, OverflowError, struct.error) as exc:
        raise errors.bad_request(f"invalid properties: {exc}") from None


def decode_payload(payload: str, encoding: str) -> bytes:
    if encoding == "string":
        return payload.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise errors.bad_request("payload is not valid base64") from None
    raise errors.bad_request(f"unknown payload_encoding '{encoding}'")


def parse_publish(body: bodies.Body) -> PublishRequest:
    routing_key = bodies.name("routing_key", bodies.string(body, "routing_key"))
    props = bodies.required(body, "properties")
    if not isinstance(props, dict):
        raise errors.bad_request("properties must be an object")
    payload = bodies.string(body, "payload")
    encoding = bodies.string(body, "payload_encoding")
    raw_properties = encode_json_properties(props)
    try:
        publishes.check_expiration(raw_properties)  # TTL-2, same texts as AMQP
    except amqp_errors.AMQPError as exc:
        raise errors.from_amqp(exc) from None
    return PublishRequest(routing_key, raw_properties, decode_payload(payload, encoding))


def publish(
    vhost: VirtualHost,
    exchange: Exchange,
    request: PublishRequest,
    now_ms: int,
    *,
    meter: budgets.Meter,
    message_ids: Callable[[], str] | None = None,
) -> publishes.Published | publishes.PendingPublish:
    """Route and enqueue through the model's one publish operation (as basic.publish), or
    the publish still to be routed when routing does not fit in ``meter``."""
    message = Message(exchange.name, request.routing_key, request.raw_properties, request.body)
    return publishes.publish_within(
        vhost, exchange, message, now_ms, meter=meter, message_ids=message_ids
    )


# -- get ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetRequest:
    count: int
    ackmode: str
    encoding: str
    truncate: int | None = None


def parse_get(body: bodies.Body) -> GetRequest:
    count = bodies.integer(body, "count", minimum=1)
    ackmode = bodies.string(body, "ackmode")
    if ackmode not in ACK_MODES:
        raise errors.bad_request(f"Unsupported ackmode '{ackmode}'")
    encoding = bodies.string(body, "encoding")
    if encoding not in ENCODINGS:
        raise errors.bad_request(f"Unsupported encoding '{encoding}'")
    truncate = bodies.integer(body, "truncate", minimum=0) if "truncate" in body else None
    return GetRequest(count, ackmode, encoding, truncate)


def properties_json(raw: bytes) -> dict[str, Any]:
    try:
        decoded = properties.decode_properties(raw)
    except properties.MalformedPropertiesError:
        return {}
    return {
        _JSON_NAMES.get(name, name): formatting.jsonable(value) for name, value in decoded.items()
    }


def payload_json(body: bytes, encoding: str) -> tuple[str, str]:
    """(payload, payload_encoding): text when it is UTF-8 and ``auto`` allows it."""
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), "base64"


def message_json(entry: Entry, *, message_count: int, request: GetRequest) -> dict[str, Any]:
    message = entry.message
    body = message.body if request.truncate is None else message.body[: request.truncate]
    payload, payload_encoding = payload_json(body, request.encoding)
    return {
        "payload_bytes": len(message.body),
        "redelivered": entry.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": message_count,
        # RabbitMQ renders no properties as an empty Erlang list, so JSON `[]`, not `{}`;
        # rabbitmqadmin's `get` prints a `properties` column only for that form.
        "properties": properties_json(message.raw_properties) or [],
        "payload": payload,
        "payload_encoding": payload_encoding,
    }


def get(queue: Queue, request: GetRequest, now_ms: int) -> list[dict[str, Any]]:
    """Fetch up to ``count`` messages, then settle them as ``ackmode`` says."""
    no_ack = request.ackmode == "ack_requeue_false"
    taken: list[Entry] = []
    results: list[dict[str, Any]] = []
    for _ in range(request.count):
        entry = queue.get(now_ms, no_ack=no_ack)
        if entry is None:
            break
        taken.append(entry)
        results.append(message_json(entry, message_count=queue.ready_count, request=request))
    _settle(queue, taken, request.ackmode)
    queue.drain(now_ms)
    return results


def _settle(queue: Queue, taken: list[Entry], ackmode: str) -> None:
    if ackmode.endswith("requeue_true"):
        for entry in taken:
            queue.requeue(entry)
        if taken:
            queue.after_requeue()
    elif ackmode == "reject_requeue_false":
        for entry in taken:
            queue.reject(entry)


# -- aliveness ----------------------------------------------------------------------------


def aliveness(vhost: VirtualHost, now_ms: int) -> bool:
    """RabbitMQ's check: declare ``aliveness-test``, publish to it, get the message back."""
    queue, _ = vhost.declare_queue(ALIVENESS_QUEUE, now_ms=now_ms, source="http")
    queue.purge()
    message = Message("", ALIVENESS_QUEUE, properties.encode_properties(), ALIVENESS_PAYLOAD)
    queue.publish(message, now_ms)
    entry = queue.get(now_ms, no_ack=True)
    return entry is not None and entry.message.body == ALIVENESS_PAYLOAD


def check_user_id(request: PublishRequest, user: access.User) -> None:
    """The AMQP publish's user_id check for an HTTP publish, as the HTTP user: RabbitMQ's
    management API publishes on a channel of that user and answers the channel's error as a
    400 with its code in front."""
    try:
        publishes.check_user_id(request.raw_properties, user.name, user.tags)
    except amqp_errors.AMQPError as exc:
        raise errors.bad_request(f"{exc.reply_code} {exc.reply_text}") from None
