"""The group commit in memory: no reply before its write is durable (P-3).

The slow proofs (kill -9 and SIGTERM with consumers attached) are in
tests/broker/amqp/test_direct_delivery_durability.py; these fail fast when the rule breaks.
"""

from collections.abc import Callable

import pytest
from hutch_broker.dispatch.commits import NOT_DURABLE, GroupCommit
from hutch_broker.dispatch.context import Context
from hutch_broker.dispatch.sessions import Session
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import connection as proto_connection
from hutch_testing import inmemory
from pamqp import body, commands, frame, header

# -- GroupCommit alone ------------------------------------------------------------------------


class Waiter:
    def __init__(self) -> None:
        self.told: list[int] = []

    def release_durable(self, durable_generation: int) -> None:
        self.told.append(durable_generation)


def test_nothing_wanted_starts_no_sync_but_the_timer_may():
    commits = GroupCommit()
    assert commits.start() is None
    assert commits.start(periodic=True) == 1


def test_a_write_sets_wanted_and_the_sync_it_starts_clears_it():
    """``wanted`` is what the end of a tick reads before it asks for a sync at all."""
    commits = GroupCommit()
    assert not commits.wanted
    commits.wrote()
    assert commits.wanted
    commits.finished(commits.start())
    assert not commits.wanted
    commits.wrote()
    commits.finished(commits.start(periodic=True))  # the timer's sync covers it too
    assert not commits.wanted


def test_a_write_is_durable_only_after_the_sync_that_started_after_it():
    commits = GroupCommit()
    first = commits.wrote()
    assert not commits.is_durable(first)
    running = commits.start()
    assert running == first
    during = commits.wrote()  # made while sync 1 runs: its pages may not be in it
    assert during > running
    assert commits.start() is None, "one sync at a time"
    commits.finished(running)
    assert commits.is_durable(first)
    assert not commits.is_durable(during)
    commits.finished(commits.start())
    assert commits.is_durable(during)


def test_a_failed_sync_never_makes_anything_durable_again():
    commits = GroupCommit()
    generation = commits.wrote()
    running = commits.start()
    commits.failed(running)
    assert commits.broken
    commits.wrote()
    assert commits.start() is None
    assert commits.start(periodic=True) is None
    assert not commits.is_durable(generation)


def test_a_stale_completion_is_refused():
    commits = GroupCommit()
    commits.wrote()
    running = commits.start()
    with pytest.raises(ValueError, match="was running"):
        commits.finished(running + 1)


def test_waiters_hear_the_durable_generation_until_done():
    flushes: list[None] = []
    commits = GroupCommit(lambda: flushes.append(None))
    waiter = Waiter()
    commits.wait(waiter)
    assert flushes, "a new waiter asks for the end of the tick"
    commits.release()
    commits.finished(commits.start(periodic=True))
    commits.release()
    assert waiter.told == [0, 1]
    commits.done(waiter)
    commits.release()
    assert waiter.told == [0, 1]


def test_a_tick_without_news_tells_no_waiter():
    """Waiters are told only when the durable generation moved or one registered: what a
    waiter holds then waits for a later sync, so telling it again releases nothing."""
    commits = GroupCommit()
    waiter = Waiter()
    commits.wait(waiter)
    commits.release()  # registered: told what is durable now (replies may wait for nothing)
    written = commits.wrote()
    running = commits.start()
    commits.release()
    commits.release()
    assert waiter.told == [0]
    commits.finished(running)
    commits.release()
    commits.release()
    assert waiter.told == [0, written]
    other = Waiter()
    commits.wait(other)
    commits.release()
    assert other.told == [written]
    assert waiter.told == [0, written, written]


# -- the rule on the publish path, over an in-memory connection --------------------------------


class FakeLog:
    """Stands in for a durable queue's log: records what was written and acked."""

    def __init__(self) -> None:
        self.live: dict[int, bytes] = {}
        self._next = 1

    def append(self, *, body: bytes, **_: object) -> int:
        msg_id, self._next = self._next, self._next + 1
        self.live[msg_id] = body
        return msg_id

    def ack(self, msg_id: int) -> None:
        self.live.pop(msg_id, None)


class Client:
    def __init__(self, request_flush: Callable[[], None] = lambda: None) -> None:
        broker = Broker()
        broker.create_defaults()
        self.context = Context(broker, clock=lambda: 0, request_flush=request_flush)
        self.proto = proto_connection.Connection(server_properties={"product": "Hutch"})
        self.session = Session(self.context, self.proto, peer_host="127.0.0.1")
        self.session.handle_data(inmemory.handshake_frames())
        self.send(commands.Channel.Open(), 1)
        self.replies()

    def send(self, method: object, channel: int = 1) -> None:
        self.session.handle_data(frame.marshal(method, channel))

    def publish(self, payload: bytes) -> None:
        props = commands.Basic.Properties(delivery_mode=2)
        data = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        data += frame.marshal(header.ContentHeader(0, len(payload), props), 1)
        data += frame.marshal(body.ContentBody(payload), 1)
        self.session.handle_data(data)

    def replies(self) -> list[object]:
        return inmemory.decode_frames(b"".join(self.proto.data_to_send()))

    def sync(self) -> None:
        """What the server does at the end of a tick, with a sync that succeeds."""
        commits = self.context.commits
        generation = commits.start()
        if generation is not None:
            commits.finished(generation)
        commits.release()


@pytest.fixture
def client():
    client = Client()
    client.send(commands.Queue.Declare(queue="q", durable=True))
    client.context.broker.vhosts["/"].queues["q"].store = client.log = FakeLog()
    client.send(commands.Confirm.Select())
    client.replies()
    return client


def acks(replies):
    return [r for r in replies if isinstance(r, commands.Basic.Ack)]


@pytest.mark.parametrize("consumer", ["none", "manual-ack with room"])
def test_a_persistent_publish_is_written_and_confirmed_only_after_the_sync(client, consumer):
    if consumer != "none":
        client.send(commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=False))
        client.replies()
    client.publish(b"m1")
    replies = client.replies()
    if consumer != "none":
        assert any(isinstance(r, commands.Basic.Deliver) for r in replies), "delivered at once"
    assert list(client.log.live.values()) == [b"m1"], "written even though delivered at once"
    client.context.commits.release()  # a tick with no sync: nothing may be confirmed
    assert acks(replies + client.replies()) == []
    client.sync()
    assert [a.delivery_tag for a in acks(client.replies())] == [1]


def test_confirms_published_while_a_sync_runs_go_out_after_the_next_one():
    """Only the first of a channel's held confirms registers it with the group commit; the
    ones published while that sync runs must still be confirmed, with no tick asked for by
    them: the completed sync asks for the tick that starts the next one (as the server's
    ``call_soon`` does, a tick here runs only when something asked for it)."""
    asked: list[None] = []
    client = Client(request_flush=lambda: asked.append(None))
    client.send(commands.Queue.Declare(queue="q", durable=True))
    client.context.broker.vhosts["/"].queues["q"].store = FakeLog()
    client.send(commands.Confirm.Select())
    client.replies()
    commits = client.context.commits
    confirmed: list[int] = []

    def tick() -> int | None:
        """The server's end of tick if one is due: start a sync, release what is durable."""
        if not asked:
            return None
        asked.clear()
        generation = commits.start()
        commits.release()
        confirmed.extend(a.delivery_tag for a in acks(client.replies()))
        return generation

    client.publish(b"m1")
    first = tick()
    assert first is not None
    client.publish(b"m2")  # written while sync 1 runs: they need sync 2
    client.publish(b"m3")
    tick()
    assert confirmed == []
    commits.finished(first)
    second = tick()
    assert confirmed == [1], "m1 only: m2 and m3 are not durable yet"
    assert second is not None, "the completed sync's tick started the one m2 and m3 need"
    commits.finished(second)
    tick()
    assert confirmed == [1, 3]  # multiple=true up to 3
    assert commits.start() is None, "nothing left to sync"


def test_a_requeued_direct_delivery_is_still_in_the_log_and_an_ack_removes_it(client):
    client.send(commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=False))
    client.publish(b"m1")
    client.send(
        commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )  # requeues it
    queue = client.context.broker.vhosts["/"].queues["q"]
    assert queue.ready_count == 1
    assert list(client.log.live.values()) == [b"m1"]
    client.send(commands.Channel.Open(), 2)
    client.send(commands.Basic.Get(queue="q", no_ack=False), 2)
    client.send(commands.Basic.Ack(delivery_tag=1), 2)
    assert client.log.live == {}


def test_a_no_ack_consumer_needs_no_write_and_no_wait(client):
    client.send(commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    client.replies()
    client.publish(b"m1")
    assert client.log.live == {}
    client.context.commits.release()
    assert [a.delivery_tag for a in acks(client.replies())] == [1]


def test_tx_commit_ok_waits_for_the_sync_of_its_persistent_messages():
    client = Client()
    client.send(commands.Queue.Declare(queue="q", durable=True))
    client.context.broker.vhosts["/"].queues["q"].store = log = FakeLog()
    client.send(commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=False))
    client.send(commands.Tx.Select())
    client.replies()
    client.publish(b"m1")
    client.send(commands.Tx.Commit())
    client.context.commits.release()
    replies = client.replies()
    assert not any(isinstance(r, commands.Tx.CommitOk) for r in replies)
    assert list(log.live.values()) == [b"m1"]
    client.sync()
    assert any(isinstance(r, commands.Tx.CommitOk) for r in client.replies())


def test_an_empty_commit_is_answered_at_once():
    client = Client()
    client.send(commands.Tx.Select())
    client.replies()
    client.send(commands.Tx.Commit())
    client.context.commits.release()
    assert any(isinstance(r, commands.Tx.CommitOk) for r in client.replies())
    assert NOT_DURABLE == 0
