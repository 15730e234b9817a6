"""Handshake: protocol header, start/start-ok, SASL, tune/tune-ok, open (CN-1, CN-2, CN-3)."""

from __future__ import annotations

import pytest
from hutch_broker.protocol import connection, errors, events
from pamqp import commands, encode

HEADER = b"AMQP\x00\x00\x09\x01"


def test_cn_1_good_header_queues_connection_start(driver):
    start = driver.start()
    assert isinstance(start, commands.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "AMQPLAIN PLAIN"
    assert start.locales == "en_US"
    assert start.server_properties["product"] == "Hutch"
    assert start.server_properties["capabilities"]["publisher_confirms"] is True
    assert driver.conn.state is connection.ConnectionState.STARTING


def test_cn_1_header_may_arrive_in_pieces(driver):
    for byte in HEADER[:-1]:
        driver.feed(bytes([byte]))
        assert driver.conn.next_event() is connection.NEED_DATA
        assert driver.conn.data_to_send() == []
    driver.feed(HEADER[-1:])
    assert driver.conn.next_event() is connection.NEED_DATA
    assert driver.output_names() == ["Connection.Start"]


@pytest.mark.parametrize(
    "received",
    [
        b"AMQP\x00\x00\x09\x00",  # 0-9-0
        b"AMQP\x01\x01\x00\x09",  # the old 0-9 header
        b"AMQP\x00\x01\x00\x00",  # AMQP 1.0
        b"GET / HTTP/1.1\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01",  # TLS client hello
        b"X",  # rejected at the first wrong byte, without waiting for 8
    ],
)
def test_cn_1_bad_header_sends_ours_and_closes(driver, received):
    driver.feed(received)
    with pytest.raises(errors.BadProtocolHeaderError) as caught:
        driver.conn.next_event()
    assert isinstance(caught.value, errors.HardError)
    assert driver.conn.data_to_send() == [HEADER]
    assert driver.conn.closed
    driver.conn.close(caught.value)  # what dispatch does with any HardError: nothing is sent
    assert driver.conn.data_to_send() == []
    driver.feed(b"more")
    assert driver.conn.next_event() is connection.NEED_DATA


def test_cn_2_plain_login(driver):
    driver.start()
    event = driver.login("PLAIN", "\0alice\0s3cr\u00e9t", product="pika")
    assert event == events.StartOkReceived(
        mechanism="PLAIN",
        username="alice",
        password="s3cr\u00e9t",
        client_properties={"product": "pika"},
        locale="en_US",
    )
    assert driver.conn.username == "alice"
    assert driver.conn.mechanism == "PLAIN"


def test_cn_2_plain_with_authzid_and_non_utf8_password(driver):
    driver.start()
    event = driver.login("PLAIN", b"admin\0bob\0\xff\xfe")
    assert isinstance(event, events.StartOkReceived)
    assert event.username == "bob"
    assert event.password == "\ufffd\ufffd"  # can never match a stored password


def test_cn_2_amqplain_login_without_table_length_prefix(driver):
    driver.start()
    table = encode.field_table({"LOGIN": "carol", "PASSWORD": "pw"})[4:]
    event = driver.login("AMQPLAIN", table)
    assert isinstance(event, events.StartOkReceived)
    assert (event.mechanism, event.username, event.password) == ("AMQPLAIN", "carol", "pw")


@pytest.mark.parametrize(
    ("mechanism", "response", "code", "text"),
    [
        ("EXTERNAL", "", 503, "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"),
        ("PLAIN", "guest", 502, "SYNTAX_ERROR - PLAIN response invalid"),
        ("PLAIN", "\0a\0b\0c", 502, "SYNTAX_ERROR - PLAIN response invalid"),
        ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01x", 502, "SYNTAX_ERROR - AMQPLAIN"),
        ("AMQPLAIN", b"\x05LOGINZ", 502, "SYNTAX_ERROR - AMQPLAIN response invalid"),
    ],
)
def test_cn_2_bad_start_ok_is_a_connection_error(driver, mechanism, response, code, text):
    driver.start()
    with pytest.raises(errors.HardError) as caught:
        driver.login(mechanism, response)
    assert caught.value.reply_code == code
    assert caught.value.reply_text.startswith(text)
    assert (caught.value.class_id, caught.value.method_id) == (10, 11)


def test_cn_2_decision_pending_pauses_parsing(driver):
    driver.start()
    tune_ok = commands.Connection.TuneOk(2047, 131072, 60)
    start_ok = commands.Connection.StartOk(mechanism="PLAIN", response="\0u\0p")
    driver.send(0, start_ok)
    driver.send(0, tune_ok)  # an eager client: must wait for the login decision
    assert isinstance(driver.conn.next_event(), events.StartOkReceived)
    assert driver.conn.next_event() is connection.NEED_DATA
    assert driver.conn.state is connection.ConnectionState.SECURING
    driver.conn.accept_login()
    assert driver.event() == events.TuneOkReceived(channel_max=2047, frame_max=131072, heartbeat=60)


def test_cn_2_login_refused_then_close_handshake(driver):
    driver.start()
    event = driver.login()
    assert isinstance(event, events.StartOkReceived)
    refusal = errors.login_refused(event.mechanism)
    driver.conn.close(refusal)
    ((channel, close),) = driver.output()
    assert channel == 0
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 403
    assert close.reply_text == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )
    driver.send(0, commands.Connection.CloseOk())
    assert driver.event() == events.ConnectionCloseConfirmed()
    assert driver.conn.closed


def test_cn_3_tune_offers_the_configured_limits(make_driver):
    driver = make_driver(channel_max=100, frame_max=8192, heartbeat=30)
    driver.start()
    driver.login()
    driver.conn.accept_login()
    ((_, tune),) = driver.output()
    assert isinstance(tune, commands.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (100, 8192, 30)


def test_cn_3_tune_ok_negotiates_client_values(driver):
    driver.start()
    driver.login()
    driver.conn.accept_login()
    assert driver.tune(channel_max=10, frame_max=4096, heartbeat=0) == events.TuneOkReceived(
        channel_max=10, frame_max=4096, heartbeat=0
    )
    assert (driver.conn.channel_max, driver.conn.frame_max, driver.conn.heartbeat) == (10, 4096, 0)
    assert driver.conn.state is connection.ConnectionState.OPENING


@pytest.mark.parametrize(
    ("channel_max", "frame_max", "text"),
    [
        (
            0,
            131072,
            "negotiated channel_max = 0 (no limit) is higher than the maximum allowed value (2047)",
        ),
        (
            2048,
            131072,
            "negotiated channel_max = 2048 is higher than the maximum allowed value (2047)",
        ),
        (2047, 0, "negotiated frame_max = 0 is higher than the maximum allowed value (131072)"),
        (
            2047,
            131073,
            "negotiated frame_max = 131073 is higher than the maximum allowed value (131072)",
        ),
        (2047, 4095, "negotiated frame_max = 4095 is lower than the minimum allowed value (4096)"),
        (0, 0, "negotiated frame_max = 0"),  # frame_max is checked first, as in RabbitMQ
    ],
)
def test_cn_3_bad_tune_ok_is_530(driver, channel_max, frame_max, text):
    driver.start()
    driver.login()
    driver.conn.accept_login()
    with pytest.raises(errors.HardError) as caught:
        driver.tune(channel_max=channel_max, frame_max=frame_max)
    assert caught.value.reply_code == 530
    assert caught.value.reply_text.startswith("NOT_ALLOWED - " + text)
    assert (caught.value.class_id, caught.value.method_id) == (10, 30)


def test_cn_1_full_handshake_and_properties(driver):
    driver.handshake()
    conn = driver.conn
    assert conn.state is connection.ConnectionState.RUNNING
    assert conn.vhost == "/"
    assert conn.capabilities == {"authentication_failure_close": True}
    assert conn.client_properties == {"capabilities": {"authentication_failure_close": True}}


def test_capabilities_is_empty_when_not_a_table(driver):
    driver.start()
    driver.login(capabilities="nope")
    assert driver.conn.capabilities == {}


@pytest.mark.parametrize(
    ("step", "method", "state"),
    [
        (0, commands.Connection.TuneOk(2047, 131072, 60), "starting"),
        (0, commands.Connection.Open("/"), "starting"),
        (1, commands.Connection.StartOk(mechanism="PLAIN", response="\0a\0b"), "tuning"),
        (2, commands.Connection.TuneOk(2047, 131072, 60), "opening"),
        (3, commands.Connection.Open("/"), "running"),
        (3, commands.Connection.CloseOk(), "running"),
        (3, commands.Channel.Open(), "running"),  # a channel method on channel 0
    ],
)
def test_unexpected_method_for_the_connection_state_is_504(driver, step, method, state):
    driver.start()
    if step >= 1:
        driver.login()
        driver.conn.accept_login()
    if step >= 2:
        driver.tune()
    if step >= 3:
        driver.send(0, commands.Connection.Open("/"))
        driver.event()
        driver.conn.accept_open()
    driver.send(0, method)
    with pytest.raises(errors.HardError) as caught:
        driver.events()
    assert caught.value.reply_code == 504
    assert (
        caught.value.reply_text == f"CHANNEL_ERROR - unexpected method in connection state {state}"
    )


def test_frames_on_other_channels_before_open_are_505(driver):
    driver.start()
    driver.send(1, commands.Channel.Open())
    with pytest.raises(errors.HardError) as caught:
        driver.events()
    assert caught.value.reply_code == 505
    assert caught.value.reply_text.startswith("UNEXPECTED_FRAME - type 1, all octets = <<")


def test_client_may_close_during_the_handshake(driver):
    driver.start()
    driver.send(0, commands.Connection.Close(200, "bye", 0, 0))
    assert driver.event() == events.ConnectionCloseRequested(200, "bye", 0, 0)
    assert driver.output_names() == ["Connection.CloseOk"]
    assert driver.conn.closed


@pytest.mark.parametrize("call", ["accept_login", "accept_open"])
def test_accepting_out_of_turn_is_our_bug(driver, call):
    driver.start()
    with pytest.raises(errors.LocalProtocolError):
        getattr(driver.conn, call)()


def test_open_event_then_accept_open(driver):
    driver.start()
    driver.login()
    driver.conn.accept_login()
    driver.tune()
    driver.output()
    driver.send(0, commands.Connection.Open("prod"))
    assert driver.event() == events.OpenReceived(virtual_host="prod")
    assert driver.conn.state is connection.ConnectionState.OPEN_PENDING
    driver.send(1, commands.Channel.Open())  # arrives before the decision: not parsed yet
    assert driver.events() == []
    driver.conn.accept_open()
    assert driver.output_names() == ["Connection.OpenOk"]
    # Parsed only now, in RUNNING: before it, a channel-1 frame would have been a 505.
    assert driver.event() == events.ChannelOpened(channel=1)


def test_vhost_refusal_helpers_have_rabbitmq_texts():
    assert errors.vhost_not_found("v").reply_text == "NOT_ALLOWED - vhost v not found"
    refused = errors.vhost_access_refused("v", "u")
    assert refused.reply_text == "NOT_ALLOWED - access to vhost 'v' refused for user 'u'"
    assert (refused.reply_code, refused.class_id, refused.method_id) == (530, 10, 40)
