"""Direct reply-to's pure parts in memory: the token registry and the reply_to rewrite.

The side-by-side suite (tests/sidebyside/test_direct_reply_to.py) runs the RPC round trip and
the refusals over pika against RabbitMQ 3.10.8.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_broker.dispatch import replyto
from hutch_broker.protocol import errors, properties


class FakeChannel:
    def __init__(self) -> None:
        self.reply_consumer: tuple[str, str] | None = None


def registered() -> tuple[replyto.ReplyConsumers, Any]:
    replies, channel = replyto.ReplyConsumers(), FakeChannel()
    replies.consume(channel, "tag", no_ack=True)  # type: ignore[arg-type]
    return replies, channel


def test_a_reply_consumer_gets_an_unguessable_token_that_finds_its_channel() -> None:
    replies, channel = registered()
    tag, token = channel.reply_consumer
    assert tag == "tag" and len(token) >= 24
    assert replies.channel_for(replyto.PREFIX + token) is channel
    assert replies.channel_for(replyto.PREFIX + token + "x") is None
    assert replies.channel_for("other." + token) is None


def test_each_channel_gets_its_own_token() -> None:
    replies, first = registered()
    second = FakeChannel()
    replies.consume(second, "tag", no_ack=True)  # type: ignore[arg-type]
    assert first.reply_consumer[1] != second.reply_consumer[1]
    assert len(replies) == 2


def test_cancel_forgets_the_token() -> None:
    replies, channel = registered()
    token = channel.reply_consumer[1]
    replies.cancel(channel)
    replies.cancel(channel)  # twice (cancel, then the channel closes): harmless
    assert channel.reply_consumer is None
    assert replies.channel_for(replyto.PREFIX + token) is None
    assert len(replies) == 0


def test_refusals_change_nothing() -> None:
    replies, channel = registered()
    with pytest.raises(errors.AMQPError, match="reply consumer already set"):
        replies.consume(channel, "again", no_ack=True)
    with pytest.raises(errors.AMQPError, match="reply consumer cannot acknowledge"):
        replies.consume(FakeChannel(), "acking", no_ack=False)  # type: ignore[arg-type]
    assert len(replies) == 1 and channel.reply_consumer[0] == "tag"


def test_reply_to_the_pseudo_queue_is_rewritten_to_the_channels_address() -> None:
    _, channel = registered()
    raw = properties.encode_properties(
        content_type="text/plain", correlation_id="c1", reply_to=replyto.PSEUDO_QUEUE
    )
    stamped = properties.decode_properties(replyto.stamp_reply_to(channel, raw))
    assert stamped["reply_to"] == replyto.PREFIX + channel.reply_consumer[1]
    assert (stamped["content_type"], stamped["correlation_id"]) == ("text/plain", "c1")


@pytest.mark.parametrize(
    "props", [{}, {"reply_to": "my-queue"}, {"reply_to": replyto.PSEUDO_QUEUE + ".x"}]
)
def test_other_reply_to_values_pass_unchanged(props: dict[str, Any]) -> None:
    raw = properties.encode_properties(**props)
    assert replyto.stamp_reply_to(FakeChannel(), raw) is raw  # type: ignore[arg-type]


def test_reply_to_the_pseudo_queue_without_a_reply_consumer_is_refused() -> None:
    raw = properties.encode_properties(reply_to=replyto.PSEUDO_QUEUE)
    with pytest.raises(errors.AMQPError, match="fast reply consumer does not exist"):
        replyto.stamp_reply_to(FakeChannel(), raw)  # type: ignore[arg-type]


def test_declare_answers_for_the_pseudo_queue_and_live_addresses_only() -> None:
    replies, channel = registered()
    live = replyto.PREFIX + channel.reply_consumer[1]
    assert replyto.declare_ok(replyto.PSEUDO_QUEUE, "/", replies).consumer_count == 1
    assert replyto.declare_ok(live, "/", replies).queue == live
    with pytest.raises(errors.AMQPError) as caught:
        replyto.declare_ok(replyto.PREFIX + "gone", "/", replies)
    assert caught.value.reply_code == 404
