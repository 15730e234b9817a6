"""A second, unrelated oracle: pika's own frame codec talks to our state machine in memory.

pika is what most Python users connect with; its encoder and decoder share no code with pamqp, so
a session it can parse end to end (including our hand-written Deliver fast path) is a good sign
that real clients work unchanged.  Still no sockets.
"""

from __future__ import annotations

import pika.frame
import pika.spec
from hutch_broker.protocol import connection, events


def pika_frames(data: bytes) -> list[pika.frame.Frame]:
    decoded = []
    while data:
        consumed, frame = pika.frame.decode_frame(data)
        assert frame is not None
        decoded.append(frame)
        data = data[consumed:]
    return decoded


def method(channel: int, spec_method: object) -> bytes:
    return pika.frame.Method(channel, spec_method).marshal()


def test_a_pika_encoded_session_and_pika_decoded_replies():
    conn = connection.Connection(server_properties={"product": "Hutch"})
    props = pika.spec.BasicProperties(
        content_type="application/json",
        delivery_mode=2,
        headers={"retries": 3, "tags": ["a", "b"], "nested": {"x": True}},
        message_id="m-1",
    )
    body = b"{}" * 40_000  # several body frames at frame_max 16384
    client = [
        pika.frame.ProtocolHeader().marshal(),
        method(0, pika.spec.Connection.StartOk({"product": "pika"}, "PLAIN", b"\0guest\0guest")),
        method(0, pika.spec.Connection.TuneOk(2047, 16384, 60)),
        method(0, pika.spec.Connection.Open("/")),
        method(1, pika.spec.Channel.Open()),
        method(1, pika.spec.Basic.Publish(exchange="", routing_key="q", mandatory=True)),
        pika.frame.Header(1, len(body), props).marshal(),
    ]
    client += [
        pika.frame.Body(1, body[i : i + 16376]).marshal() for i in range(0, len(body), 16376)
    ]
    client.append(method(1, pika.spec.Basic.Ack(delivery_tag=1, multiple=False)))
    conn.receive_data(b"".join(client))
    seen = []
    while (event := conn.next_event()) is not connection.NEED_DATA:
        seen.append(event)
        if isinstance(event, events.StartOkReceived):
            conn.accept_login()
        elif isinstance(event, events.OpenReceived):
            conn.accept_open()
    published = next(e for e in seen if isinstance(e, events.PublishReceived))
    assert (published.routing_key, published.mandatory, published.body) == ("q", True, body)
    assert isinstance(seen[-1], events.MethodReceived)
    assert seen[-1].method.delivery_tag == 1

    conn.send_deliver(1, "ctag", 1, True, "", "q", published.raw_properties, published.body)
    replies = pika_frames(b"".join(conn.data_to_send()))
    names = [getattr(getattr(f, "method", None), "NAME", type(f).__name__) for f in replies]
    assert names[:5] == [
        "Connection.Start",
        "Connection.Tune",
        "Connection.OpenOk",
        "Channel.OpenOk",
        "Basic.Deliver",
    ]
    deliver, content_header, *bodies = replies[4:]
    assert (deliver.method.consumer_tag, deliver.method.redelivered) == ("ctag", True)
    assert content_header.properties.headers == props.headers
    assert content_header.properties.message_id == "m-1"
    assert all(len(frame.fragment) <= 16376 for frame in bodies)
    assert b"".join(frame.fragment for frame in bodies) == body
