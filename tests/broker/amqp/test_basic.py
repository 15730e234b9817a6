"""basic.* over real sockets with pika: publish, consume, get, acks, qos, confirms, tx."""

import urllib.request

import pika
import pytest
from hutch_demo import management
from hutch_testing.clients import connect, drain
from pika.exceptions import ChannelClosedByBroker, UnroutableError

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


def test_publish_get_roundtrip_keeps_properties(channel):
    channel.queue_declare("q")
    props = pika.BasicProperties(
        content_type="application/json",
        headers={"a": 1, "b": "x", "c": [1, 2]},
        delivery_mode=2,
        message_id="m1",
        correlation_id="c1",
        priority=3,
    )
    channel.basic_publish("", "q", b'{"k": 1}', props)
    method, got, body = channel.basic_get("q", auto_ack=True)
    assert body == b'{"k": 1}'
    assert method.exchange == "" and method.routing_key == "q" and not method.redelivered
    assert got.content_type == "application/json"
    assert got.headers == {
        "a": 1,
        "b": b"x" if isinstance(got.headers["b"], bytes) else "x",
        "c": [1, 2],
    }
    assert (got.message_id, got.correlation_id, got.priority, got.delivery_mode) == (
        "m1",
        "c1",
        3,
        2,
    )


def test_fifo_order_and_message_count(channel):
    channel.queue_declare("q")
    for i in range(5):
        channel.basic_publish("", "q", str(i).encode())
    ok = channel.queue_declare("q", passive=True)
    assert ok.method.message_count == 5
    assert drain(channel, "q") == [b"0", b"1", b"2", b"3", b"4"]


def test_large_body_split_over_frames(channel):
    channel.queue_declare("q")
    body = bytes(range(256)) * 4096  # 1 MiB, many frames at frame_max 131072
    channel.basic_publish("", "q", body)
    _, _, got = channel.basic_get("q", auto_ack=True)
    assert got == body


def test_empty_body(channel):
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"")
    method, _, body = channel.basic_get("q", auto_ack=True)
    assert method is not None and body == b""


def test_consume_and_ack(connection, channel):
    channel.queue_declare("q")
    for i in range(10):
        channel.basic_publish("", "q", str(i).encode())
    got = []
    for method, _props, body in channel.consume("q", inactivity_timeout=2):
        if method is None:
            break
        got.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(got) == 10:
            break
    channel.cancel()
    assert got == [str(i).encode() for i in range(10)]
    assert channel.queue_declare("q", passive=True).method.message_count == 0


def test_nack_requeue_goes_back_to_original_position_redelivered(channel):
    channel.queue_declare("q")
    for body in (b"a", b"b", b"c"):
        channel.basic_publish("", "q", body)
    m1, _, _ = channel.basic_get("q")
    m2, _, _ = channel.basic_get("q")
    channel.basic_nack(m2.delivery_tag, requeue=True)
    channel.basic_reject(m1.delivery_tag, requeue=True)
    results = []
    for _ in range(3):
        method, _, body = channel.basic_get("q", auto_ack=True)
        results.append((body, method.redelivered))
    assert results == [(b"a", True), (b"b", True), (b"c", False)]


def test_reject_without_requeue_drops(channel):
    channel.queue_declare("q")
    channel.basic_publish("", "q", b"x")
    method, _, _ = channel.basic_get("q")
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert channel.queue_declare("q", passive=True).method.message_count == 0


def test_ack_multiple(channel):
    channel.queue_declare("q")
    for i in range(4):
        channel.basic_publish("", "q", str(i).encode())
    tags = [channel.basic_get("q")[0].delivery_tag for _ in range(4)]
    assert tags == [1, 2, 3, 4]
    channel.basic_ack(3, multiple=True)
    channel.basic_recover(requeue=True)
    method, _, body = channel.basic_get("q", auto_ack=True)
    assert body == b"3" and method.redelivered


def test_unknown_delivery_tag_is_406(channel):
    channel.queue_declare("q")
    channel.basic_ack(99)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("q", passive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 99"


def test_closing_channel_requeues_unacked(connection):
    ch = connection.channel()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"x")
    method, _, _ = ch.basic_get("q")
    assert method is not None
    ch.close()
    ch2 = connection.channel()
    method, _, body = ch2.basic_get("q", auto_ack=True)
    assert body == b"x" and method.redelivered


def test_prefetch_per_consumer_limits_unacked(connection, channel):
    channel.queue_declare("q")
    for i in range(10):
        channel.basic_publish("", "q", str(i).encode())
    channel.basic_qos(prefetch_count=3)
    received = []
    channel.basic_consume("q", lambda ch, m, p, b: received.append(m.delivery_tag))
    connection.process_data_events(time_limit=0.5)
    assert len(received) == 3
    channel.basic_ack(received[-1], multiple=True)
    connection.process_data_events(time_limit=0.5)
    assert len(received) == 6


def test_prefetch_global_is_shared_by_the_channel(connection, channel):
    channel.queue_declare("q1")
    channel.queue_declare("q2")
    for _ in range(5):
        channel.basic_publish("", "q1", b"x")
        channel.basic_publish("", "q2", b"y")
    channel.basic_qos(prefetch_count=4, global_qos=True)
    received = []
    channel.basic_consume("q1", lambda ch, m, p, b: received.append(b))
    channel.basic_consume("q2", lambda ch, m, p, b: received.append(b))
    connection.process_data_events(time_limit=0.5)
    assert len(received) == 4


def test_mandatory_unroutable_is_returned(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    with pytest.raises(UnroutableError) as info:
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)
    returned = info.value.messages[0]
    assert returned.method.reply_code == 312 and returned.method.reply_text == "NO_ROUTE"
    assert returned.body == b"x"


def test_confirms_ack_routed_and_unroutable(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    ch.queue_declare("q", durable=True)
    for i in range(50):
        ch.basic_publish("", "q", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("amq.direct", "nowhere", b"lost")  # not mandatory: acked, dropped
    assert ch.queue_declare("q", passive=True, durable=True).method.message_count == 50


@pytest.mark.own_broker  # /metrics counts broker-wide
def test_overview_counts_confirms_and_redeliveries(hutch_broker, connection):
    """message_stats.confirm and .redeliver (and their /metrics counters) move with traffic."""
    mgmt = management.Management(hutch_broker)
    before = mgmt.get("/overview").body.get("message_stats", {})
    ch = connection.channel()
    ch.confirm_delivery()
    ch.queue_declare("counted", durable=True)
    for i in range(7):
        ch.basic_publish("", "counted", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    method, _, _ = ch.basic_get("counted")
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, _, _ = ch.basic_get("counted")  # the same message again: redelivered
    assert method.redelivered
    ch.basic_ack(method.delivery_tag)
    after = mgmt.get("/overview").body["message_stats"]
    assert after["confirm"] - before.get("confirm", 0) == 7
    assert after["redeliver"] - before.get("redeliver", 0) == 1
    with urllib.request.urlopen(hutch_broker.http_url + "/metrics", timeout=10) as reply:  # noqa: S310
        metrics = reply.read().decode()
    assert "rabbitmq_global_messages_redelivered_total 1.0" in metrics
    assert "rabbitmq_global_messages_confirmed_total 7.0" in metrics


def test_publish_to_missing_exchange_closes_channel_404(channel, vhost):
    channel.basic_publish("nope", "k", b"x")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("q")
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no exchange 'nope' in vhost '{vhost}'"


def test_tx_commit_and_rollback(connection):
    ch = connection.channel()
    ch.tx_select()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"rolled-back")
    ch.tx_rollback()
    ch.basic_publish("", "q", b"committed")
    other = connection.channel()
    assert other.queue_declare("q", passive=True).method.message_count == 0
    ch.tx_commit()
    assert drain(other, "q") == [b"committed"]


def test_tx_ack_is_applied_on_commit(connection):
    ch = connection.channel()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"x")
    ch.tx_select()
    method, _, _ = ch.basic_get("q")
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()
    ch.close()  # rollback kept it unacked: closing requeues
    ch2 = connection.channel()
    assert drain(ch2, "q") == [b"x"]


def test_queue_delete_sends_consumer_cancel(connection):
    ch = connection.channel()
    ch.queue_declare("q")
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume("q", lambda *a: None)
    other = connection.channel()
    other.queue_delete("q")
    connection.process_data_events(time_limit=0.5)
    assert cancelled == [tag]


@pytest.fixture
def stamping_channel(hutch_broker_factory, tmp_path):
    """A channel to a hutch-broker that opted in to ``stamp_message_id`` (off by default, as
    RabbitMQ stamps nothing: tests/sidebyside/test_message_ids.py)."""
    config = tmp_path / "stamping.conf"
    config.write_text("stamp_message_id = true\n")
    broker = hutch_broker_factory(extra_args=["--config", str(config)])
    return connect(broker).channel(), broker


def test_opted_in_message_id_is_stamped_when_absent_and_kept_when_given(stamping_channel):
    channel, broker = stamping_channel
    channel.queue_declare("q")
    channel.basic_publish(
        "", "q", b"a", pika.BasicProperties(content_type="text/plain", headers={"h": 1})
    )
    channel.basic_publish("", "q", b"b")
    channel.basic_publish("", "q", b"c", pika.BasicProperties(message_id="mine"))
    first = channel.basic_get("q")
    second = channel.basic_get("q", auto_ack=True)
    third = channel.basic_get("q", auto_ack=True)
    assert first[1].message_id and first[1].message_id.startswith("hutch-")
    assert (first[1].content_type, first[1].headers) == ("text/plain", {"h": 1})
    assert second[1].message_id.startswith("hutch-")
    assert second[1].message_id != first[1].message_id
    assert third[1].message_id == "mine"
    channel.basic_nack(first[0].delivery_tag, requeue=True)
    again = channel.basic_get("q", auto_ack=True)
    assert again[1].message_id == first[1].message_id  # redeliveries keep the same id
    # An HTTP publish without one is stamped too.
    response = management.Management(broker).post(
        "/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "q", "payload": "d", "payload_encoding": "string"},
    )
    assert response.body == {"routed": True}
    fourth = channel.basic_get("q", auto_ack=True)
    assert fourth[1].message_id.startswith("hutch-")
    assert fourth[1].message_id not in (first[1].message_id, second[1].message_id)
