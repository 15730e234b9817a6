"""Real client libraries, as users run them, side by side with RabbitMQ 3.10.8 (issue 14).

Why: the wire-level suites prove frames and texts; users meet Hutch through libraries whose
patterns combine many methods (aio-pika's RPC declares an exclusive reply queue, binds, consumes
and, on close, unbinds and cancels). Before, aio-pika's RPC failed in close() on hutch-broker
every time (an unbind of an already deleted queue answered 404).
"""

import asyncio

import aio_pika
import pytest
from aio_pika.patterns import RPC

pytestmark = pytest.mark.rabbitmq


async def _rpc_round_trip(url: str, method: str) -> list[int]:
    connection = await aio_pika.connect_robust(url)
    async with connection:
        server_channel = await connection.channel()
        server = await RPC.create(server_channel)

        async def multiply(*, x: int, y: int) -> int:
            return x * y

        await server.register(method, multiply, auto_delete=True)
        client_channel = await connection.channel()
        client = await RPC.create(client_channel)
        results = [await client.call(method, kwargs={"x": n, "y": 3}) for n in range(5)]
        await client.close()  # unbinds and deletes its reply queue
        await server.close()
    return results


def test_aio_pika_rpc_pattern_opens_calls_and_closes(target):
    method = target.name("multiply")
    url = target.broker.amqp_url
    results = asyncio.run(asyncio.wait_for(_rpc_round_trip(url, method), 30))
    assert results == [0, 3, 6, 9, 12]
