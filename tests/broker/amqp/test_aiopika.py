"""aio-pika (asyncio client) against hutch-broker: confirms, consume, requeue, topic routing."""

import asyncio

import aio_pika
import pytest

pytestmark = pytest.mark.shared_broker  # one broker per module, a vhost per test


@pytest.fixture
async def aio_connection(hutch_broker):
    connection = await aio_pika.connect(hutch_broker.amqp_url)  # the test's vhost
    yield connection
    await connection.close()


async def test_publish_with_confirms_and_consume(aio_connection):
    channel = await aio_connection.channel(publisher_confirms=True)
    queue = await channel.declare_queue("aio.q", durable=True)
    for i in range(100):
        await channel.default_exchange.publish(
            aio_pika.Message(str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key="aio.q",
        )
    received = []
    async with queue.iterator() as messages:
        async for message in messages:
            async with message.process():
                received.append(int(message.body))
            if len(received) == 100:
                break
    assert received == list(range(100))


async def test_reject_requeue_then_topic_routing(aio_connection):
    channel = await aio_connection.channel()
    await channel.set_qos(prefetch_count=10)
    exchange = await channel.declare_exchange("aio.topic", aio_pika.ExchangeType.TOPIC)
    queue = await channel.declare_queue("", exclusive=True)
    await queue.bind(exchange, "orders.*.created")
    await exchange.publish(aio_pika.Message(b"yes"), routing_key="orders.eu.created")
    await exchange.publish(aio_pika.Message(b"no"), routing_key="orders.eu.deleted")
    first = await queue.get(timeout=5)
    await first.reject(requeue=True)
    again = await queue.get(timeout=5)
    assert (again.body, again.redelivered) == (b"yes", True)
    await again.ack()
    assert await queue.get(fail=False, timeout=1) is None


async def test_channel_error_is_reported_and_connection_survives(aio_connection):
    channel = await aio_connection.channel()
    with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
        await channel.declare_queue("aio.bad", arguments={"x-max-length": -1})
    other = await aio_connection.channel()
    queue = await other.declare_queue("aio.ok")
    await other.default_exchange.publish(aio_pika.Message(b"fine"), routing_key="aio.ok")
    message = await asyncio.wait_for(queue.get(), 5)
    assert message.body == b"fine"
