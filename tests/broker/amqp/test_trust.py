"""Issue "Broker trust", item 12 over AMQP: wrong errors that changed state or answered 541."""

import pytest
from hutch_demo import management
from hutch_testing.clients import connect, drain
from pika.exceptions import ChannelClosedByBroker

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


@pytest.mark.parametrize("name", ["café", "q!", "a b", "日本"])
def test_item_12_queue_names_rabbitmq_accepts_work(channel, hutch_broker, name):
    """pamqp's name grammar made declare-ok raise after the queue was created (541)."""
    assert channel.queue_declare(name).method.queue == name
    assert channel.queue_declare(name, passive=True).method.queue == name
    channel.exchange_declare(f"x.{name}", "direct")
    channel.queue_bind(name, f"x.{name}", name)
    channel.basic_publish(f"x.{name}", name, b"via")
    channel.basic_publish("", name, b"direct")
    method, _, body = channel.basic_get(name, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == (f"x.{name}", name, b"via")
    assert drain(channel, name) == [b"direct"]
    assert channel.queue_delete(name).method.message_count == 0
    assert "Traceback" not in hutch_broker.log_tail()


def test_item_12_deleting_an_auto_delete_exchange_with_a_binding(channel, hutch_broker):
    """KeyError (541) on the second, nested deletion; the exchange is deleted once, cleanly."""
    channel.exchange_declare("ad", "direct", auto_delete=True)
    channel.queue_declare("q")
    channel.queue_bind("q", "ad", "k")
    channel.exchange_delete("ad")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.exchange_declare("ad", passive=True)
    assert info.value.reply_code == 404
    assert "Traceback" not in hutch_broker.log_tail()


def test_item_12_queue_delete_checks_permission_before_existence(
    hutch_broker, vhost, api, vhost_user
):
    """A refusal must be the same whether or not the queue exists (no existence oracle)."""
    user = management.quote(vhost_user)
    assert api.put(f"/users/{user}", {"password": "secret", "tags": ""}).status == 201
    permissions = {"configure": "^app\\.", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/{management.quote(vhost)}/{user}", permissions).status == 201
    admin = connect(hutch_broker, vhost=vhost).channel()
    admin.queue_declare("secret.q")
    conn = connect(hutch_broker, user=vhost_user, password="secret", vhost=vhost)
    texts = []
    for name in ("secret.q", "missing.q"):
        with pytest.raises(ChannelClosedByBroker) as info:
            conn.channel().queue_delete(name)
        texts.append((info.value.reply_code, info.value.reply_text))
    assert texts == [
        (
            403,
            f"ACCESS_REFUSED - access to queue '{name}' in vhost '{vhost}' refused for user "
            f"'{vhost_user}'",
        )
        for name in ("secret.q", "missing.q")
    ]
    assert admin.queue_declare("secret.q", passive=True).method.queue == "secret.q"
    conn.close()


@pytest.mark.parametrize("arg", ["x-dead-letter-exchange", "x-dead-letter-routing-key"])
def test_item_8_dead_letter_names_over_255_bytes_are_refused(channel, vhost, api, arg):
    """AMQP carries them as longstrs; a dead-lettered delivery could not carry them (541)."""
    arguments = {"x-dead-letter-exchange": "dlx", arg: "k" * 300}
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("q", arguments=arguments)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue 'q' in vhost '{vhost}': "
        "{too_long,300}"
    )
    assert not api.queue_exists("q")
