"""One in-memory AMQP connection over a broker, with a real message store or none, for the
dispatch tests that count the Python work of a path (through the store: a confirmed persistent
publish, a stream's deliveries; or in memory only: a transient publish, its delivery and ack)
and for bench/inprocess_bench.py, which times the same paths.

Why a module of its own: those tests and the benchmark drive the same session (the handshake,
channels 1 and 2 open, frames in, frames out, the loop's parked turns) and differ only in what
they declare and send after it.
"""

from __future__ import annotations

from pathlib import Path

from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_broker.store.messages import MessageStore
from pamqp import base, commands, frame

from hutch_testing import inmemory


class StoreSession:
    """Channels 1 and 2 open on a session whose broker keeps messages in ``data_dir``, or in
    memory only when it is None (as a broker started without --data-dir)."""

    def __init__(self, data_dir: Path | None) -> None:
        self.store = None if data_dir is None else MessageStore(data_dir)
        broker = Broker(message_logs=self.store)
        broker.create_defaults()
        self.context = Context(broker, clock=lambda: 1_000)
        self.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
        self.session = Session(self.context, self.proto, peer_host="127.0.0.1")
        self.session.handle_data(inmemory.handshake_frames())
        self.send(commands.Channel.Open())
        self.send(commands.Channel.Open(), 2)

    def send(self, method: base.Frame, channel: int = 1) -> None:
        self.session.handle_data(frame.marshal(method, channel))

    def output(self) -> int:
        """What the connection would write now, in bytes (the turn's end releases confirms)."""
        self.context.commits.release()
        return sum(len(chunk) for chunk in self.proto.data_to_send())

    def make_durable(self) -> None:
        """The server's group commit: sync the log, then let the stream see its records."""
        commits = self.context.commits
        generation = commits.start(periodic=True)
        if generation is None or self.store is None:
            raise RuntimeError("no group commit to run: a sync is running, or there is no store")
        self.store.sync()
        commits.finished(generation)
        commits.release()

    def turns(self) -> None:
        """The loop's turns until its parked work is done (a stream's reading goes on there)."""
        turns = self.context.turns
        while turns.parked:
            turns.end_of_turn()
