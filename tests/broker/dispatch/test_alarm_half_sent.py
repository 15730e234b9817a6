"""During a memory alarm, a half-received message blocks its connection, as a content frame does in
RabbitMQ (issue 30, memory after hostile input).

Only a complete publish used to block a publisher, so a client that never completed one read on
past the watermark: half-sent bodies on channel after channel, up to channel_max x
max_message_size per connection. In memory, with an alarm that is on or off by hand.
"""

from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

MIB = 1024 * 1024


class Alarm:
    publishing_blocked = False
    block_reason = "low on memory"


class Transport:
    def __init__(self) -> None:
        self.reading = True

    def flush(self) -> None: ...

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def client() -> tuple[Session, Alarm, Transport]:
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    alarm = context.alarms = Alarm()
    transport = Transport()
    proto = proto_connection.Connection(server_properties={"product": "Hutch"})
    session = Session(context, proto, peer_host="127.0.0.1", transport=transport)
    start_ok = commands.Connection.StartOk(
        client_properties={"capabilities": {"connection.blocked": True}},
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    )
    tune_ok = commands.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0)
    session.handle_data(
        inmemory.PROTOCOL_HEADER
        + frame.marshal(start_ok, 0)
        + frame.marshal(tune_ok, 0)
        + frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
        + frame.marshal(commands.Channel.Open(), 1)
        + frame.marshal(commands.Queue.Declare(queue="q"), 1)
    )
    proto.data_to_send()
    return session, alarm, transport


def half_sent(channel: int = 1) -> bytes:
    return (
        frame.marshal(commands.Basic.Publish(routing_key="q"), channel)
        + frame.marshal(header.ContentHeader(0, 16 * MIB, commands.Basic.Properties()), channel)
        + frame.marshal(body.ContentBody(bytes(100_000)), channel)
    )


def sent_methods(session: Session) -> list[str]:
    frames = inmemory.decode_frames(b"".join(session.proto.data_to_send()))
    return [type(value).__name__ for value in frames]


def test_a_half_received_message_blocks_its_connection_during_an_alarm():
    session, alarm, transport = client()
    alarm.publishing_blocked = True
    session.handle_data(half_sent())
    assert session.blocked
    assert not transport.reading, "the rest of the body must not be read"
    assert sent_methods(session) == ["Blocked"]
    assert session.held_publish is None

    alarm.publishing_blocked = False
    session.unblock()
    assert not session.blocked and transport.reading
    assert sent_methods(session) == ["Unblocked"]
    left = 16 * MIB - 100_000
    while left:
        size = min(left, 131072 - 8)
        session.handle_data(frame.marshal(body.ContentBody(bytes(size)), 1))
        left -= size
    queue = session.context.broker.vhosts["/"].queues["q"]
    assert len(list(queue.ready_entries())) == 1, "the message completes once the alarm is over"


def test_without_an_alarm_a_half_received_message_blocks_nothing():
    session, _alarm, transport = client()
    session.handle_data(half_sent())
    assert not session.blocked and transport.reading
    assert sent_methods(session) == []


def test_during_an_alarm_other_frames_still_do_not_block():
    """Only content blocks, as in RabbitMQ: a consumer's acks and declares go on."""
    session, alarm, transport = client()
    alarm.publishing_blocked = True
    session.handle_data(frame.marshal(commands.Queue.Declare(queue="other"), 1))
    assert not session.blocked and transport.reading
    assert sent_methods(session) == ["DeclareOk"]
