"""Limits survive restarts, and a restart never refuses what exists (issue 14: "Limits").

A max-queues limit below the number of durable queues already there (set after they were
declared) must not make recovery drop queues: recovery imports queues without the check.
"""

import signal

import pytest
from hutch_demo.management import Management
from hutch_testing.clients import connect
from pika.exceptions import ChannelClosedByBroker, ProbableAccessDeniedError


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_limits_are_durable_and_recovery_keeps_every_queue(hutch_broker, stop):
    api = Management(hutch_broker)
    channel = connect(hutch_broker).channel()
    for name in ("a", "b", "c"):
        channel.queue_declare(name, durable=True)
    assert api.put("/vhost-limits/%2F/max-queues", {"value": 1}).status == 204
    assert api.put("/vhost-limits/%2F/max-connections", {"value": 1}).status == 204
    assert api.put("/users/bob", {"password": "pw", "tags": ""}).ok
    assert api.put("/user-limits/bob/max-channels", {"value": 0}).status == 204
    channel.connection.close()
    hutch_broker.kill(stop)
    hutch_broker.start()

    assert {q["name"] for q in api.get("/queues/%2F").body} == {"a", "b", "c"}
    assert api.get("/vhost-limits/%2F").body == [
        {"vhost": "/", "value": {"max-queues": 1, "max-connections": 1}}
    ]
    assert api.get("/user-limits/bob").body == [{"user": "bob", "value": {"max-channels": 0}}]
    connection = connect(hutch_broker)
    with pytest.raises(ProbableAccessDeniedError):
        connect(hutch_broker)
    with pytest.raises(ChannelClosedByBroker, match="queue limit in vhost '/' \\(1\\) is reached"):
        connection.channel().queue_declare("d", durable=True)
