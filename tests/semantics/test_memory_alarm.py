"""Memory high watermark and connection.blocked (MEM-1..MEM-7).

`{"absolute": 1}` forces an alarm (any process uses more than one byte) and a large value clears
it, so no test needs real memory pressure.
"""

import math

import pytest
from hutch_demo.management import Management
from hutch_demo.waiting import wait_for
from hutch_testing.clients import connect
from hutch_testing.steps import get, publish

WATERMARK = "/vm-memory-high-watermark"
FORCE_ALARM = {"absolute": 1}
CLEAR_ALARM = {"absolute": 1 << 50}


def _node(api):
    (node,) = api.get("/nodes").body
    return node


def _alarm(api):
    return _node(api)["mem_alarm"]


class _Signals:
    """connection.blocked / connection.unblocked as a pika connection reports them."""

    def __init__(self, connection):
        self.connection = connection
        self.events = []
        connection.add_on_connection_blocked_callback(
            lambda _conn, frame: self.events.append(("blocked", frame.method.reason))
        )
        connection.add_on_connection_unblocked_callback(
            lambda _conn, _frame: self.events.append(("unblocked", None))
        )

    def wait(self, count, timeout=10.0):
        return wait_for(
            lambda: self.connection.process_data_events(0.02) or list(self.events),
            lambda events: len(events) >= count,
            timeout=timeout,
            what=f"{count} blocked/unblocked event(s)",
        )


def _ready_over_http(api, queue):
    return api.queue(queue)["messages_ready"]


# -- MEM-1 -------------------------------------------------------------------------------------


def test_mem_1_default_watermark_is_relative_0_4_of_total_memory(hutch_broker_factory, tmp_path):
    config = tmp_path / "hutch.conf"
    config.write_text("total_memory_available_override_value = 1000000000\n")
    broker = hutch_broker_factory(extra_args=["--config", str(config)])
    api = Management(broker)

    setting = api.get(WATERMARK).body
    node = _node(api)

    assert setting["relative"] == pytest.approx(0.4)
    assert setting["mem_limit"] == math.floor(0.4 * 1_000_000_000)
    assert node["mem_limit"] == 400_000_000
    assert node["mem_alarm"] is False


# -- MEM-2 -------------------------------------------------------------------------------------


def test_mem_2_relative_zero_disables_the_monitor_and_clears_an_alarm(hutch_broker, api):
    publisher = connect(hutch_broker)
    signals = _Signals(publisher)
    publisher.channel().queue_declare("q")
    api.put(WATERMARK, FORCE_ALARM)
    publish(publisher.channel(), "q", "held")
    assert signals.wait(1) == [("blocked", "low on memory")]

    response = api.put(WATERMARK, {"relative": 0})

    assert response.status == 204
    assert signals.wait(2)[1] == ("unblocked", None)
    assert _alarm(api) is False
    assert wait_for(lambda: _ready_over_http(api, "q")) == 1
    publish(publisher.channel(), "q", "free")
    assert wait_for(lambda: _ready_over_http(api, "q"), lambda n: n == 2) == 2
    assert api.get("/health/checks/alarms").status == 200


# -- MEM-3 -------------------------------------------------------------------------------------


def test_mem_3_alarm_follows_mem_used_against_the_limit_at_once(api):
    mem_used = _node(api)["mem_used"]
    assert mem_used > 0

    api.put(WATERMARK, {"absolute": mem_used // 2})
    alarmed = _alarm(api)
    api.put(WATERMARK, {"absolute": mem_used * 8})
    cleared = _alarm(api)

    assert (alarmed, cleared) == (True, False)  # no waiting for the next 1 s sample


# -- MEM-4, MEM-5, MEM-6 -----------------------------------------------------------------------


def test_mem_4_blocking_is_lazy_and_the_publish_is_held(hutch_broker, api):
    publisher = connect(hutch_broker)
    signals = _Signals(publisher)
    channel = publisher.channel()
    channel.queue_declare("q")

    api.put(WATERMARK, FORCE_ALARM)
    wait_for(lambda: _alarm(api), what="mem_alarm")
    publisher.process_data_events(time_limit=0.3)
    assert signals.events == []  # nothing is sent when the alarm fires

    publish(channel, "q", "held")

    assert signals.wait(1) == [("blocked", "low on memory")]
    publisher.process_data_events(time_limit=0.3)
    assert _ready_over_http(api, "q") == 0


def test_mem_4_a_connection_opened_during_an_alarm_is_blocked_at_its_first_publish(
    hutch_broker, api
):
    api.put(WATERMARK, FORCE_ALARM)
    wait_for(lambda: _alarm(api), what="mem_alarm")
    late = connect(hutch_broker)
    signals = _Signals(late)
    channel = late.channel()
    channel.queue_declare("q")  # not content-bearing: still fine

    publish(channel, "q", "m")

    assert signals.wait(1) == [("blocked", "low on memory")]
    assert _ready_over_http(api, "q") == 0


def test_mem_5_consumers_keep_receiving_and_are_not_notified(hutch_broker, api):
    feeder = connect(hutch_broker).channel()
    feeder.queue_declare("feed")
    for index in range(3):
        publish(feeder, "feed", str(index))
    consumer = connect(hutch_broker)
    consumer_signals = _Signals(consumer)
    consuming = consumer.channel()
    consuming.basic_qos(prefetch_count=1)
    api.put(WATERMARK, FORCE_ALARM)
    wait_for(lambda: _alarm(api), what="mem_alarm")
    publisher = connect(hutch_broker)
    publish(publisher.channel(), "feed", "held")  # some other connection is blocked

    got = []

    def on_message(chan, method, _props, body):
        got.append(body)
        chan.basic_ack(method.delivery_tag)

    consuming.basic_consume("feed", on_message)
    wait_for(
        lambda: consumer.process_data_events(0.02) or list(got),
        lambda bodies: len(bodies) == 3,
        what="three deliveries during the alarm",
    )

    assert got == [b"0", b"1", b"2"]
    assert consumer_signals.events == []


def test_mem_6_clearing_unblocks_and_completes_the_held_publish(hutch_broker, api):
    publisher = connect(hutch_broker)
    signals = _Signals(publisher)
    channel = publisher.channel()
    channel.queue_declare("q")
    api.put(WATERMARK, FORCE_ALARM)
    publish(channel, "q", "held")
    signals.wait(1)

    api.put(WATERMARK, CLEAR_ALARM)

    assert signals.wait(2) == [("blocked", "low on memory"), ("unblocked", None)]
    wait_for(lambda: _ready_over_http(api, "q"), lambda n: n == 1, what="the held publish")
    assert get(channel, "q")[2] == b"held"


# -- MEM-7 -------------------------------------------------------------------------------------


BAD_WATERMARKS = [
    {},
    {"relative": 2},
    {"relative": "x"},
    {"absolute": -1},
    {"relative": 0.1, "absolute": 5},
]


def test_mem_7_runtime_watermark_change_over_http(api):
    default = api.get(WATERMARK).body
    refused = [api.put(WATERMARK, body) for body in BAD_WATERMARKS]
    unchanged = api.get(WATERMARK).body
    put = api.put(WATERMARK, {"absolute": 123_456_789})
    setting = api.get(WATERMARK).body
    node = _node(api)
    relative = api.put(WATERMARK, {"relative": 0.5})

    assert [(response.status, response.body["error"]) for response in refused] == [
        (400, "bad_request")
    ] * len(BAD_WATERMARKS)
    assert unchanged == default
    assert put.status == 204
    assert setting == {"absolute": 123_456_789, "mem_limit": 123_456_789}
    assert node["mem_limit"] == 123_456_789
    assert relative.status == 204
    assert api.get(WATERMARK).body["relative"] == pytest.approx(0.5)


def test_mem_7_alarm_shows_in_nodes_health_check_and_http_publish(channel, api):
    channel.queue_declare("q")
    api.put(WATERMARK, FORCE_ALARM)
    wait_for(lambda: _alarm(api), what="mem_alarm")

    health = api.get("/health/checks/alarms")
    published = api.post(
        "/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "q", "payload": "x", "payload_encoding": "string"},
    )

    assert health.status == 503
    assert health.body["status"] == "failed"
    assert health.body["reason"] == "There are alarms in effect in the cluster"
    assert [alarm["resource"] for alarm in health.body["alarms"]] == ["memory"]
    assert published.status == 503
    assert published.body == {"error": "service_unavailable", "reason": "low on memory"}

    api.put(WATERMARK, CLEAR_ALARM)
    assert api.get("/health/checks/alarms").body == {"status": "ok"}


# -- MEM-6: the disk alarm works the same way ----------------------------------------------------


def test_mem_6_disk_free_limit_blocks_publishers_with_low_on_disk(hutch_broker_factory, tmp_path):
    config = tmp_path / "disk.conf"
    config.write_text("disk_free_limit.absolute = 1000000TB\n")  # more than any disk has
    broker = hutch_broker_factory(extra_args=["--config", str(config)])
    api = Management(broker)
    (node,) = api.get("/nodes").body
    assert node["disk_free_alarm"] is True
    assert api.get("/health/checks/alarms").status == 503
    publisher = connect(broker)
    signals = _Signals(publisher)
    channel = publisher.channel()
    channel.queue_declare("q")
    publish(channel, "q", "held")
    assert signals.wait(1) == [("blocked", "low on disk")]
    assert _ready_over_http(api, "q") == 0
