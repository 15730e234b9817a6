"""Direct reply-to: RPC replies without a reply queue, as RabbitMQ's ``amq.rabbitmq.reply-to``.

A requester consumes from the pseudo-queue ``amq.rabbitmq.reply-to`` (no-ack only, one such
consumer per channel) and publishes its request with ``reply_to`` set to that name; the broker
rewrites ``reply_to`` to ``amq.rabbitmq.reply-to.<token>``.  A server that publishes to that name
through the default exchange reaches the requester's channel directly: no queue, no routing, no
store.  When the channel is gone the reply is unroutable (returned if mandatory, else dropped).

Why in dispatch: the pseudo-queue links two channels, possibly of two connections, and the
model knows nothing of channels.  The registry maps unguessable tokens to live channels; it
holds one entry per channel with a reply consumer, so it is bounded by the channel limit.
Error texts are RabbitMQ 3.10.8's, observed side by side.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Protocol

from pamqp import commands

from hutch_broker.protocol import errors, rewrite

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."


class ReplyChannel(Protocol):
    """What the registry needs of a requester's channel (a dispatch ``Channel``).

    Declared here so that this module sits below the channels it links: the channel owns
    its reply consumer and how a reply reaches its connection.
    """

    reply_consumer: tuple[str, str] | None  # (consumer tag, token)

    def deliver_reply(self, routing_key: str, raw_properties: bytes, body: bytes) -> None:
        """Hand a reply straight to the reply consumer (no-ack: nothing to track)."""


class ReplyConsumers:
    """Tokens of the channels consuming from the pseudo-queue, broker-wide."""

    def __init__(self) -> None:
        self._channels: dict[str, ReplyChannel] = {}

    def __len__(self) -> int:
        return len(self._channels)

    def consume(self, channel: ReplyChannel, tag: str, *, no_ack: bool) -> None:
        """basic.consume on the pseudo-queue: the channel's one reply consumer."""
        if not no_ack:
            raise errors.precondition_failed("reply consumer cannot acknowledge")
        if channel.reply_consumer is not None:
            raise errors.precondition_failed("reply consumer already set")
        token = secrets.token_urlsafe(18)
        channel.reply_consumer = (tag, token)
        self._channels[token] = channel

    def cancel(self, channel: ReplyChannel) -> None:
        """basic.cancel of the reply consumer, or its channel closed."""
        if channel.reply_consumer is not None:
            self._channels.pop(channel.reply_consumer[1], None)
            channel.reply_consumer = None

    def channel_for(self, name: str) -> ReplyChannel | None:
        """The live channel an ``amq.rabbitmq.reply-to.<token>`` name points at, if any."""
        return self._channels.get(name[len(PREFIX) :]) if name.startswith(PREFIX) else None


def stamp_reply_to(channel: ReplyChannel, raw_properties: bytes) -> bytes:
    """A request with ``reply_to`` = the pseudo-queue gets the channel's reply address."""
    if not raw_properties[:1] or not raw_properties[0] & 0x02:  # reply_to flag (0x0200)
        return raw_properties
    spans = rewrite.property_spans(raw_properties)
    if spans.get("reply_to") != _PSEUDO_SHORTSTR:
        return raw_properties
    if channel.reply_consumer is None:
        raise errors.precondition_failed("fast reply consumer does not exist")
    spans["reply_to"] = _shortstr(PREFIX + channel.reply_consumer[1])
    return rewrite.join_properties(spans)


def send_reply(
    replies: ReplyConsumers,
    routing_key: str,
    raw_properties: bytes,
    body: bytes,
    *,
    message_ids: Callable[[], str] | None = None,
) -> bool:
    """A publish to ``amq.rabbitmq.reply-to.<token>`` (AMQP or HTTP): False when nobody waits.

    ``message_ids`` stamps a ``message_id`` as on any other publish
    (docs/contracts/spark.md#schema).
    """
    requester = replies.channel_for(routing_key)
    if requester is None:
        return False
    if message_ids is not None and not rewrite.has_message_id(raw_properties):
        raw_properties = rewrite.with_message_id(raw_properties, message_ids())
    requester.deliver_reply(routing_key, raw_properties, body)
    return True


def declare_ok(name: str, vhost: str, replies: ReplyConsumers) -> commands.Queue.DeclareOk:
    """queue.declare of the pseudo-queue, or of a reply address whose channel is alive.

    RabbitMQ 3.10.8 answers with one consumer and no messages for both; a dead address is a
    missing queue.
    """
    if name != PSEUDO_QUEUE and replies.channel_for(name) is None:
        raise errors.not_found(f"no queue '{name}' in vhost '{vhost}'")
    return commands.Queue.DeclareOk(name, 0, 1)


def _shortstr(text: str) -> bytes:
    data = text.encode()
    return bytes((len(data),)) + data


_PSEUDO_SHORTSTR = _shortstr(PSEUDO_QUEUE)
