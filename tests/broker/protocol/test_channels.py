"""Channel life cycle and the server's close handshakes (CN-4; rules 3 and 5 of connection.py)."""

from __future__ import annotations

import pytest
from hutch_broker.protocol import connection, errors, events
from pamqp import commands


def test_cn_4_channel_open_is_answered_at_once(running):
    running.send(2, commands.Channel.Open())
    assert running.event() == events.ChannelOpened(channel=2)
    ((channel, open_ok),) = running.output()
    assert (channel, open_ok.name) == (2, "Channel.OpenOk")
    assert running.conn.open_channels == frozenset({1, 2})


def test_cn_4_second_open_is_504(running):
    running.send(1, commands.Channel.Open())
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 504
    assert caught.value.reply_text == "CHANNEL_ERROR - second 'channel.open' seen"
    assert (caught.value.class_id, caught.value.method_id) == (20, 10)


def test_cn_4_method_on_a_channel_never_opened_is_504(running):
    running.send(5, commands.Queue.Declare(queue="q"))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 504
    assert caught.value.reply_text == "CHANNEL_ERROR - expected 'channel.open'"
    assert (caught.value.class_id, caught.value.method_id) == (50, 10)


def test_content_on_a_channel_never_opened_is_505(running, frames):
    running.feed(frames.content(5, b"abc"))
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == (
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    )


def test_channel_number_above_channel_max_is_530(make_driver):
    driver = make_driver().handshake(channel_max=10)
    driver.send(11, commands.Channel.Open())
    with pytest.raises(errors.HardError) as caught:
        driver.events()
    assert caught.value.reply_code == 530
    assert caught.value.reply_text == (
        "NOT_ALLOWED - channel number 11 is higher than the negotiated channel_max (10)"
    )


def test_a_closing_channel_number_is_reused_only_after_close_ok(running):
    running.conn.close_channel(1, errors.precondition_failed("x", channel=1))
    running.output()
    running.send(1, commands.Channel.Open())  # discarded: channel 1 is still closing
    assert running.events() == []
    assert running.output() == []
    running.send(1, commands.Channel.CloseOk())
    assert running.event() == events.ChannelCloseConfirmed(channel=1)
    running.open_channel(1)


def test_cn_4_client_close_is_answered_and_frees_the_number(running):
    running.send(1, commands.Channel.Close(200, "done", 0, 0))
    assert running.event() == events.ChannelCloseRequested(1, 200, "done", 0, 0)
    assert [(channel, frame.name) for channel, frame in running.output()] == [
        (1, "Channel.CloseOk")
    ]
    assert running.conn.open_channels == frozenset()
    running.open_channel(1)  # the number is free again


def test_server_close_discards_until_close_ok(running, frames):
    running.conn.close_channel(1, errors.not_found("no queue 'q' in vhost '/'", channel=1))
    ((channel, close),) = running.output()
    assert channel == 1
    assert (close.reply_code, close.reply_text) == (404, "NOT_FOUND - no queue 'q' in vhost '/'")
    # Whatever the client had in flight is dropped, content included, without any error.
    running.send(1, commands.Queue.Declare(queue="q"))
    running.feed(frames.publish(1, b"x" * 10))
    running.feed(frames.content(1, b"stray"))
    running.send(1, commands.Channel.Open())
    assert running.events() == []
    assert running.output() == []
    running.send(1, commands.Channel.CloseOk())
    assert running.event() == events.ChannelCloseConfirmed(channel=1)
    running.open_channel(1)


def test_crossing_channel_close_is_answered_while_closing(running):
    running.conn.close_channel(1, errors.precondition_failed("boom", channel=1))
    running.output()
    running.send(1, commands.Channel.Close(200, "client", 0, 0))
    assert running.events() == []
    assert running.output_names() == ["Channel.CloseOk"]
    running.send(1, commands.Channel.CloseOk())
    assert running.event() == events.ChannelCloseConfirmed(channel=1)


def test_close_channel_is_idempotent_and_ignores_free_channels(running):
    error = errors.precondition_failed("x", channel=1)
    running.conn.close_channel(1, error)
    running.conn.close_channel(1, error)
    running.conn.close_channel(7, error)
    assert running.output_names() == ["Channel.Close"]


def test_stray_close_ok_on_an_open_channel_is_503(running):
    running.send(1, commands.Channel.CloseOk())
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_text == "COMMAND_INVALID - unimplemented method"


@pytest.mark.parametrize(
    "method",
    [
        commands.Basic.Deliver("ctag", 1, False, "", "rk"),
        commands.Basic.ConsumeOk("ctag"),
        commands.Queue.DeclareOk("q", 0, 0),
        commands.Connection.Open("/"),
    ],
)
def test_server_only_methods_from_the_client_are_503(running, method):
    running.send(1, method)
    with pytest.raises(errors.HardError) as caught:
        running.events()
    assert caught.value.reply_code == 503
    assert (caught.value.class_id << 16 | caught.value.method_id) == method.index


@pytest.mark.parametrize(
    "method",
    [
        commands.Queue.Declare(queue="q", durable=True, arguments={"x-max-length": 10}),
        commands.Exchange.Declare(exchange="e", exchange_type="topic"),
        commands.Queue.Bind(queue="q", exchange="e", routing_key="a.*"),
        commands.Basic.Qos(prefetch_count=10),
        commands.Basic.Consume(queue="q", consumer_tag="c1"),
        commands.Basic.Cancel("c1"),
        commands.Basic.Get(queue="q", no_ack=True),
        commands.Basic.Ack(7, multiple=True),
        commands.Basic.Nack(8, multiple=False, requeue=True),
        commands.Basic.Nack(9, multiple=True, requeue=False),
        commands.Basic.Reject(10, requeue=False),
        commands.Basic.Recover(requeue=True),
        commands.Confirm.Select(),
        commands.Tx.Select(),
        commands.Tx.Commit(),
        commands.Channel.Flow(active=False),
    ],
)
def test_client_methods_become_method_events(running, method):
    running.send(1, method)
    event = running.event()
    assert isinstance(event, events.MethodReceived)
    assert event.channel == 1
    assert type(event.method) is type(method)
    assert dict(event.method) == dict(method)


def test_update_secret_on_channel_0_is_a_method_event(running):
    running.send(0, commands.Connection.UpdateSecret("token", "refresh"))
    event = running.event()
    assert isinstance(event, events.MethodReceived)
    assert event.channel == 0


def test_server_close_ignores_all_but_close_ok(running, frames):
    running.conn.close(errors.connection_forced("broker shutdown"))
    ((channel, close),) = running.output()
    assert (channel, close.reply_code) == (0, 320)
    assert close.reply_text == "CONNECTION_FORCED - broker shutdown"
    assert running.conn.state is connection.ConnectionState.CLOSING
    running.feed(frames.publish(1, b"ignored"))
    running.send(1, commands.Channel.Open())
    running.send(7, commands.Basic.Ack(1))
    running.feed(b"\x09\x00\x00\x00\x00\x00\x00\xce")  # unknown frame type: ignored too
    running.send(0, commands.Connection.Open("/"))
    assert running.events() == []
    assert running.output() == []
    running.send(0, commands.Connection.CloseOk())
    assert running.event() == events.ConnectionCloseConfirmed()
    assert running.conn.closed


def test_crossing_connection_close_is_answered(running):
    running.conn.close(errors.internal_error("oops"))
    running.output()
    running.send(0, commands.Connection.Close(200, "bye", 0, 0))
    assert running.events() == []
    assert running.output_names() == ["Connection.CloseOk"]
    assert running.conn.state is connection.ConnectionState.CLOSING


def test_broken_framing_while_closing_is_silent(running):
    running.conn.close(errors.internal_error("oops"))
    running.output()
    running.feed(b"\x01\x00\x00\x00\x00\x00\x01\x00\x00")  # bad frame end
    assert running.events() == []
    assert running.conn.state is connection.ConnectionState.CLOSING


def test_client_connection_close(running):
    running.send(0, commands.Connection.Close(200, "Normal shutdown", 0, 0))
    assert running.event() == events.ConnectionCloseRequested(200, "Normal shutdown", 0, 0)
    assert running.output_names() == ["Connection.CloseOk"]
    assert running.conn.closed
    running.send(1, commands.Channel.Open())
    assert running.events() == []


def test_output_on_closing_channels_and_connections_is_dropped(running):
    running.open_channel(2)
    running.conn.close_channel(2, errors.precondition_failed("x", channel=2))
    running.output()
    running.conn.send_method(2, commands.Basic.Cancel("c"))
    running.conn.send_deliver(2, "c", 1, False, "", "q", b"\x00\x00", b"x")
    assert running.output() == []
    running.conn.close(errors.internal_error("x"))
    running.output()
    running.conn.send_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"x")
    running.conn.send_method(0, commands.Connection.Blocked("low memory"))
    running.conn.send_get_ok(1, 1, False, "", "q", 0, b"\x00\x00", b"x")
    running.conn.send_return(1, 312, "NO_ROUTE", "", "q", b"\x00\x00", b"x")
    assert running.output() == []


@pytest.mark.parametrize("channel", [0, 9])
def test_output_on_channels_never_opened_is_our_bug(running, channel):
    with pytest.raises(errors.LocalProtocolError):
        running.conn.send_deliver(channel, "c", 1, False, "", "q", b"\x00\x00", b"x")
    if channel:
        with pytest.raises(errors.LocalProtocolError):
            running.conn.send_method(channel, commands.Basic.Cancel("c"))


def test_send_method_routes_closes_through_the_state_machine(running):
    running.conn.send_method(1, commands.Channel.Close(406, "PRECONDITION_FAILED - x", 50, 10))
    assert running.output_names() == ["Channel.Close"]
    running.send(1, commands.Channel.CloseOk())
    assert running.event() == events.ChannelCloseConfirmed(channel=1)
    running.conn.send_method(0, commands.Connection.Close(320, "CONNECTION_FORCED - x", 0, 0))
    assert running.conn.state is connection.ConnectionState.CLOSING


def test_connection_methods_on_channel_0_while_running(running):
    running.conn.send_method(0, commands.Connection.Blocked("low on memory"))
    running.conn.send_method(0, commands.Connection.Unblocked())
    assert running.output_names() == ["Connection.Blocked", "Connection.Unblocked"]


def test_heartbeat_output(running):
    running.conn.send_heartbeat()
    assert running.conn.data_to_send() == [b"\x08\x00\x00\x00\x00\x00\x00\xce"]
