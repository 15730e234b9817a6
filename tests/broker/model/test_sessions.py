"""Session logic in memory: loopback-only users (CN-2) without a socket."""

from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_testing import inmemory
from pamqp import commands, frame


def start(peer_host: str) -> tuple[Session, proto_connection.Connection]:
    broker = Broker()
    broker.create_defaults()
    context = Context(broker, clock=lambda: 0)
    proto = proto_connection.Connection(server_properties={"product": "Hutch"})
    session = Session(context, proto, peer_host=peer_host)
    session.handle_data(b"AMQP\x00\x00\x09\x01")
    session.handle_data(
        frame.marshal(
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
            ),
            0,
        )
    )
    return session, proto


def methods(proto: proto_connection.Connection) -> list:
    return inmemory.decode_frames(b"".join(proto.data_to_send()))


def test_guest_from_loopback_is_accepted():
    _, proto = start("127.0.0.1")
    assert any(isinstance(m, commands.Connection.Tune) for m in methods(proto))


def test_guest_from_a_remote_host_is_refused_with_403():
    _, proto = start("10.1.2.3")
    sent = methods(proto)
    closes = [m for m in sent if isinstance(m, commands.Connection.Close)]
    assert closes
    assert closes[0].reply_code == 403
    assert closes[0].reply_text.startswith(
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN"
    )
    assert not any(isinstance(m, commands.Connection.Tune) for m in sent)
