"""A publish's per-message expiration flag, read once by its ``Message``: checked, then seen
by every queue it reaches.

Why: ``properties.has_expiration`` ran twice per AMQP publish, in the TTL-2 check and again in
each queue's publish, three Python calls per message with the check's own; the ``Message``
now reads the flag inline when it is made (``Message.expires``) and the check runs only when
it is set (test_publish_calls.py). These pin that every queue the message reaches still sees
its expiration, through a direct reply-to rewrite of the content header and through
message-id stamping (each a new ``Message``), in a transaction too, that a malformed one is
still refused before anything is enqueued, and that the flag says what the parse finds.
"""

from __future__ import annotations

import pytest
from hutch_broker.model.messages import Message
from hutch_broker.protocol import properties
from hutch_testing import inmemory
from hutch_testing.storesession import StoreSession
from pamqp import body, commands, frame, header

NOW = 1_000  # the session's clock


class Client(StoreSession):
    """Queues "a" and "b" bound to fanout exchange "f"; channel 1 publishes."""

    def __init__(self, *, stamp_message_id: bool = False) -> None:
        super().__init__(data_dir=None)
        self.context.stamp_message_id = stamp_message_id
        self.send(commands.Exchange.Declare(exchange="f", exchange_type="fanout"))
        for name in ("a", "b"):
            self.send(commands.Queue.Declare(queue=name))
            self.send(commands.Queue.Bind(queue=name, exchange="f"))
        self.proto.data_to_send()

    def publish(self, channel: int = 1, **props: object) -> None:
        properties = commands.Basic.Properties(**props)
        self.session.handle_data(
            frame.marshal(commands.Basic.Publish(exchange="f", routing_key=""), channel)
            + frame.marshal(header.ContentHeader(0, 4, properties), channel)
            + frame.marshal(body.ContentBody(b"body"), channel)
        )

    def expiries(self) -> dict[str, list[int]]:
        queues = self.context.broker.vhosts["/"].queues
        return {name: [e.expire_at for e in queues[name].ready_entries()] for name in "ab"}

    def replies(self) -> list[object]:
        return inmemory.decode_frames(b"".join(self.proto.data_to_send()))


@pytest.mark.parametrize("stamp_message_id", [False, True])
def test_every_queue_a_message_reaches_sees_its_expiration(stamp_message_id: bool) -> None:
    client = Client(stamp_message_id=stamp_message_id)
    client.publish(expiration="60000")
    client.publish()
    client.publish(expiration="0")  # TTL-4: nobody could take it at once, so it is dropped

    assert client.expiries() == {"a": [NOW + 60000, 0], "b": [NOW + 60000, 0]}


def test_the_expiration_survives_a_direct_reply_to_rewrite() -> None:
    """The reply-to rewrite makes a new content header after the expiration was read."""
    client = Client()
    client.send(
        commands.Basic.Consume(queue="amq.rabbitmq.reply-to", consumer_tag="r", no_ack=True)
    )
    client.publish(reply_to="amq.rabbitmq.reply-to", expiration="5000")

    assert client.expiries() == {"a": [NOW + 5000], "b": [NOW + 5000]}
    (entry,) = client.context.broker.vhosts["/"].queues["a"].ready_entries()
    assert entry.message.expiration() == "5000"
    assert b"amq.rabbitmq.reply-to." in entry.message.raw_properties, "rewritten"


def test_a_transactional_publish_keeps_its_expiration() -> None:
    client = Client()
    client.send(commands.Tx.Select())
    client.publish(expiration="7000")
    assert client.expiries() == {"a": [], "b": []}
    client.send(commands.Tx.Commit())

    assert client.expiries() == {"a": [NOW + 7000], "b": [NOW + 7000]}


def test_a_malformed_expiration_is_refused_and_nothing_is_enqueued() -> None:
    client = Client()
    client.publish(expiration="12x")

    closes = [r for r in client.replies() if isinstance(r, commands.Channel.Close)]
    assert [(c.reply_code, c.reply_text) for c in closes] == [
        (406, "PRECONDITION_FAILED - invalid expiration '12x': {leftover_string,\"x\"}")
    ]
    assert client.expiries() == {"a": [], "b": []}


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        properties.encode_properties(),
        properties.encode_properties(expiration="10"),
        properties.encode_properties(expiration="", delivery_mode=2, reply_to="r"),
        properties.encode_properties(content_type="t", priority=3, correlation_id="c"),
    ],
)
def test_the_flag_says_whether_the_content_header_has_an_expiration(raw: bytes) -> None:
    """``expires`` is the flag alone, ``expiration()`` the parse: they agree for any content
    header (an empty expiration included), and a new content header is read anew."""
    message = Message("x", "k", raw, b"body")
    assert message.expires == (properties.expiration(raw) is not None)
    assert message.expiration() == properties.expiration(raw)
    stripped = message.with_properties(properties.encode_properties(content_type="t"))
    assert not stripped.expires and stripped.expiration() is None
    assert message.with_body(b"").expires == message.expires
