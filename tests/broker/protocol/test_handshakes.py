"""The handshake record a listener hands to a vhost worker, and a Connection adopted from it.

In memory: a listener-side ``Connection`` runs the handshake from pamqp-encoded client frames,
its ``handshake_record`` goes through ``encode``/``decode``, and a worker-side ``Connection``
built from it must replay the same events, send only open-ok, and go on with the leftover bytes.
"""

from __future__ import annotations

import base64
import json

import pytest
from hutch_broker.protocol import connection, errors, events, handshakes
from pamqp import commands

CLIENT_PROPERTIES = {
    "product": "pika",
    "capabilities": {"authentication_failure_close": True, "publisher_confirms": True},
    "count": 7,
}


def listener_record(make_driver, frames, *, after_open: bytes = b"", vhost: str = "tenant-a"):
    """The listener's side: a handshake up to connection.open, then its record."""
    driver = make_driver()
    driver.start()
    driver.login("PLAIN", "\0alice\0s3cret", **CLIENT_PROPERTIES)
    driver.conn.accept_login()
    driver.output()
    driver.tune(channel_max=100, frame_max=65536, heartbeat=30)
    driver.feed(frames.method(0, commands.Connection.Open(vhost)) + after_open)
    assert driver.event() == events.OpenReceived(virtual_host=vhost)
    return driver.conn.handshake_record()


def adopted(make_driver, record: handshakes.Handshake):
    driver = make_driver()
    driver.conn = connection.Connection(
        server_properties={"product": "Hutch"},
        handshake=handshakes.decode(handshakes.encode(record)),
    )
    return driver


def test_the_record_holds_what_the_listener_negotiated(make_driver, frames):
    record = listener_record(make_driver, frames)
    assert (record.channel_max, record.frame_max, record.heartbeat) == (100, 65536, 30)
    assert record.vhost == "tenant-a"
    assert record.leftover == b""
    start_ok = record.start_ok_method()
    assert start_ok.mechanism == "PLAIN"
    assert start_ok.client_properties["capabilities"]["publisher_confirms"] is True
    assert handshakes.decode(handshakes.encode(record)) == record


def test_an_adopted_connection_replays_the_handshake_and_sends_only_open_ok(make_driver, frames):
    record = listener_record(make_driver, frames)
    worker = adopted(make_driver, record)
    conn = worker.conn
    login = conn.next_event()
    assert login == events.StartOkReceived(
        mechanism="PLAIN",
        username="alice",
        password="s3cret",
        client_properties=login.client_properties,
        locale="en_US",
    )
    assert login.client_properties["count"] == 7
    assert conn.next_event() is connection.NEED_DATA  # nothing overtakes the login decision
    conn.accept_login()
    assert worker.events() == [
        events.TuneOkReceived(channel_max=100, frame_max=65536, heartbeat=30),
        events.OpenReceived(virtual_host="tenant-a"),
    ]
    assert conn.data_to_send() == []  # no second start or tune: the client has them
    conn.accept_open()
    assert worker.output_names() == ["Connection.OpenOk"]
    assert conn.state is connection.ConnectionState.RUNNING
    assert (conn.channel_max, conn.frame_max, conn.heartbeat) == (100, 65536, 30)
    assert conn.username == "alice"
    assert conn.vhost == "tenant-a"


def test_leftover_bytes_are_parsed_after_open_ok(make_driver, frames):
    pipelined = frames.method(1, commands.Channel.Open())
    record = listener_record(make_driver, frames, after_open=pipelined[:5])
    assert record.leftover == pipelined[:5]
    worker = adopted(make_driver, record)
    worker.conn.next_event()
    worker.conn.accept_login()
    assert len(worker.events()) == 2
    worker.conn.accept_open()
    worker.feed(pipelined[5:])  # the rest comes from the socket
    assert worker.events() == [events.ChannelOpened(channel=1)]
    assert worker.output_names() == ["Connection.OpenOk", "Channel.OpenOk"]


def test_a_refused_login_closes_before_the_rest_is_replayed(make_driver, frames):
    worker = adopted(make_driver, listener_record(make_driver, frames))
    event = worker.conn.next_event()
    worker.conn.close(errors.login_refused(event.mechanism))
    assert worker.events() == []
    ((channel, close),) = worker.output()
    assert (channel, close.reply_code) == (0, 403)


def test_negotiated_values_above_the_workers_offer_are_refused(make_driver, frames):
    record = listener_record(make_driver, frames)
    conn = connection.Connection(server_properties={}, frame_max=32768, handshake=record)
    conn.next_event()
    conn.accept_login()
    with pytest.raises(errors.HardError, match="negotiated frame_max = 65536 is higher"):
        conn.next_event()


def test_handshake_record_only_at_connection_open(driver):
    driver.start()
    with pytest.raises(errors.LocalProtocolError, match="handshake_record"):
        driver.conn.handshake_record()


def _document(make_driver, frames) -> dict:
    return json.loads(handshakes.encode(listener_record(make_driver, frames)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "unknown record version 2"),
        ({"version": True}, "unknown record version True"),
        ({"extra": 1}, "unknown \\['extra'\\]"),
        ({"channel_max": 0}, "channel_max must be an integer from 1 to 65535"),
        ({"frame_max": 4095}, "frame_max must be an integer from 4096"),
        ({"heartbeat": "30"}, "heartbeat must be an integer"),
        ({"heartbeat": 70000}, "heartbeat must be an integer from 0 to 65535"),
        ({"vhost": "v" * 256}, "vhost must be a string of at most 255 bytes"),
        ({"vhost": None}, "vhost must be a string"),
        ({"leftover": "not base64!"}, "leftover is not base64"),
        ({"leftover": 5}, "leftover must be a base64 string"),
        ({"start_ok": ""}, "start_ok: .*shorter than a method id"),
        (
            {"start_ok": base64.b64encode(b"\x00\x0a\x00\x33").decode()},  # close-ok
            "start_ok: .*not connection.start-ok",
        ),
        ({"start_ok": base64.b64encode(b"\x00\x0a\x00\x0b\xff").decode()}, "start_ok: "),
    ],
)
def test_decode_refuses_a_malformed_record(make_driver, frames, change, message):
    document = _document(make_driver, frames) | change
    with pytest.raises(handshakes.HandshakeRecordError, match=message):
        handshakes.decode(json.dumps(document).encode())


def test_decode_refuses_a_missing_key(make_driver, frames):
    document = _document(make_driver, frames)
    del document["vhost"]
    with pytest.raises(handshakes.HandshakeRecordError, match="keys missing \\['vhost'\\]"):
        handshakes.decode(json.dumps(document).encode())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "not a JSON document"),
        (b"[1, 2]", "not a JSON object"),
        (b"{", "not a JSON document"),
        (b" " * (handshakes.MAX_RECORD_SIZE + 1), "above"),
    ],
)
def test_decode_refuses_what_is_not_a_record(data, message):
    with pytest.raises(handshakes.HandshakeRecordError, match=message):
        handshakes.decode(data)


def test_the_encoding_is_exact():
    record = handshakes.Handshake(
        start_ok=b"\x00\x0a\x00\x0b", channel_max=1, frame_max=4096, heartbeat=0, vhost="/"
    )
    assert handshakes.encode(record) == (
        b'{"channel_max":1,"frame_max":4096,"heartbeat":0,"leftover":"",'
        b'"start_ok":"AAoACw==","version":1,"vhost":"/"}'
    )
