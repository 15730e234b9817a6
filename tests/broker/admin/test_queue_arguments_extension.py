"""The in-place argument update extension, end to end against a real broker process."""

import base64
import json
import urllib.error
import urllib.request

import pika
import pytest
from hutch_testing.clients import connect, drain


def http(broker, method: str, path: str, body=None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{broker.http_url}{path}", data=data, method=method)  # noqa: S310
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            text = response.read()
            return response.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_lowering_max_length_in_place_truncates_and_keeps_the_rest(hutch_broker):
    ch = connect(hutch_broker).channel()
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare("dlq")
    ch.queue_bind("dlq", "dlx")
    ch.queue_declare(
        "q", durable=True, arguments={"x-max-length": 10, "x-dead-letter-exchange": "dlx"}
    )
    for i in range(6):
        ch.basic_publish("", "q", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    status, _ = http(
        hutch_broker,
        "PUT",
        "/api/queues/%2F/q/arguments",
        {"arguments": {"x-max-length": 2, "x-dead-letter-exchange": "dlx"}},
    )
    assert status == 204
    status, queue = http(hutch_broker, "GET", "/api/queues/%2F/q")
    assert queue["arguments"] == {"x-max-length": 2, "x-dead-letter-exchange": "dlx"}
    assert drain(ch, "dlq") == [b"0", b"1", b"2", b"3"]
    # survives a restart with the new arguments, and redeclaring with them is equivalent
    hutch_broker.restart()
    ch = connect(hutch_broker).channel()
    ch.queue_declare(
        "q", durable=True, arguments={"x-max-length": 2, "x-dead-letter-exchange": "dlx"}
    )
    assert drain(ch, "q") == [b"4", b"5"]


def test_ring_size_lowered_in_place_deletes_nothing_at_once(hutch_broker):
    ch = connect(hutch_broker).channel()
    ch.queue_declare("ring", arguments={"x-ring-size": 5})
    for i in range(5):
        ch.basic_publish("", "ring", str(i).encode())
    assert (
        http(
            hutch_broker, "PUT", "/api/queues/%2F/ring/arguments", {"arguments": {"x-ring-size": 2}}
        )[0]
        == 204
    )
    assert ch.queue_declare("ring", passive=True).method.message_count == 5
    ch.basic_publish("", "ring", b"5")
    assert drain(ch, "ring") == [b"1", b"2", b"3", b"4", b"5"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"arguments": {"x-queue-type": "quorum"}},
            "arguments x-queue-type of queue 'q' in vhost '/' cannot be changed in place",
        ),
        (
            {"arguments": {"x-max-length": -1}},
            "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
    ],
)
def test_bad_updates_are_refused_and_change_nothing(hutch_broker, body, reason):
    ch = connect(hutch_broker).channel()
    ch.queue_declare("q", arguments={"x-max-length": 3})
    status, error = http(hutch_broker, "PUT", "/api/queues/%2F/q/arguments", body)
    assert status == 400
    assert error["reason"] == reason
    assert http(hutch_broker, "GET", "/api/queues/%2F/q")[1]["arguments"] == {"x-max-length": 3}


def test_missing_queue_is_404(hutch_broker):
    assert http(hutch_broker, "PUT", "/api/queues/%2F/nope/arguments", {"arguments": {}})[0] == 404
