"""The publish path's cost in Python calls per message, against the code before isolation.

Why: isolation added layers to ``basic.publish`` (metered routing, parking, held-body
accounting) and each layer is a few function calls per message, which on one core is
throughput (docs/isolation/README.md, "What it cost in throughput").  Calls are counted, not
timed, so this holds on any machine: a publish to the default exchange, handed to a waiting
consumer, may make no more Python calls than it made at 1b98ff0, the code before the isolation
work (46 without confirms, 49 with; 50 and 53 before the publish path was folded back).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

MESSAGES = 200
PAYLOAD = b"x" * 1024


def calls_per_message(*, confirms: bool) -> float:
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    proto = proto_connection.Connection(server_properties={"product": "Hutch"})
    session = Session(context, proto, peer_host="127.0.0.1")
    session.handle_data(inmemory.handshake_frames())

    def send(method: object, channel: int = 1) -> None:
        session.handle_data(frame.marshal(method, channel))

    send(commands.Channel.Open())
    send(commands.Channel.Open(), 2)
    if confirms:
        send(commands.Confirm.Select())
    send(commands.Queue.Declare(queue="q"))
    send(commands.Basic.Qos(prefetch_count=1000), 2)
    send(commands.Basic.Consume(queue="q", consumer_tag="c"), 2)
    properties = commands.Basic.Properties(delivery_mode=1, message_id="m")
    one = (
        frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        + frame.marshal(header.ContentHeader(0, len(PAYLOAD), properties), 1)
        + frame.marshal(body.ContentBody(PAYLOAD), 1)
    )
    session.handle_data(one)  # warm: first-use paths (caches, lazily built objects)
    proto.data_to_send()
    counted = 0

    def profile(_frame: FrameType, event: str, _arg: Any) -> None:
        nonlocal counted
        if event == "call":
            counted += 1

    previous: Callable[..., Any] | None = sys.getprofile()
    sys.setprofile(profile)
    try:
        session.handle_data(one * MESSAGES)
    finally:
        sys.setprofile(previous)
    context.commits.release()  # the server's end of turn: the confirms go out
    delivered = inmemory.decode_frames(b"".join(proto.data_to_send()))
    deliveries = [reply for reply in delivered if isinstance(reply, commands.Basic.Deliver)]
    assert len(deliveries) == MESSAGES, "each message was handed to the consumer"
    if confirms:
        assert any(isinstance(reply, commands.Basic.Ack) for reply in delivered)
    return counted / MESSAGES


@pytest.mark.parametrize(("confirms", "before_isolation"), [(False, 46), (True, 49)])
def test_a_publish_makes_no_more_calls_than_before_isolation(
    confirms: bool, before_isolation: int
) -> None:
    assert calls_per_message(confirms=confirms) <= before_isolation + 0.1
