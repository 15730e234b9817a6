"""Declare/delete/bind checks found to differ from RabbitMQ 3.10.8 by the side-by-side suite.

These run without the reference node, so the fixes stay covered under `-m "not rabbitmq"`.
"""

import pytest
from hutch_testing.steps import closed_by_broker, get, publish

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


def test_ex_3_system_exchanges_cannot_be_deleted(connection, vhost):
    refused = closed_by_broker(lambda: connection.channel().exchange_delete("amq.topic"))
    missing = closed_by_broker(lambda: connection.channel().exchange_delete("amq.no-such"))

    assert refused == (
        403,
        f"ACCESS_REFUSED - deletion of system exchange 'amq.topic' in vhost '{vhost}' not allowed",
    )
    assert missing[0] == 403
    connection.channel().exchange_declare("amq.topic", passive=True)


def test_ex_5_with_both_binding_ends_missing_the_source_is_named(connection, vhost):
    queue_bind = closed_by_broker(
        lambda: connection.channel().queue_bind("no-queue", "no-exchange", "k")
    )
    exchange_bind = closed_by_broker(
        lambda: connection.channel().exchange_bind("no-destination", "no-source", "k")
    )

    assert queue_bind == (404, f"NOT_FOUND - no exchange 'no-exchange' in vhost '{vhost}'")
    assert exchange_bind == (404, f"NOT_FOUND - no exchange 'no-source' in vhost '{vhost}'")


def test_q_1_delete_if_empty_counts_ready_messages_only(connection, channel):
    channel.queue_declare("q")
    publish(channel, "q", "m")
    assert get(channel, "q", auto_ack=False)[2] == b"m"  # now unacked, nothing ready

    deleted = connection.channel().queue_delete("q", if_empty=True)

    assert deleted.method.message_count == 0
    assert closed_by_broker(lambda: connection.channel().queue_declare("q", passive=True))[0] == 404
