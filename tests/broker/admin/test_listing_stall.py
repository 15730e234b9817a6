"""A client that asks for a big listing and never reads it is disconnected after
``send_stall_s``, and its user's listing slot is free again.

Listings are sent under the user's slot (so unread bodies cannot pile up in memory); without
the stall timeout that slot, and with it every later listing of the same user, waited for
ever on a client that stopped reading.
"""

import asyncio
import base64
import socket

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hutch_broker.admin.app import make_app

pytestmark = pytest.mark.broker  # level broker: a hutch-broker of its own

QUEUES = 5000
STALL_S = 0.5


async def test_a_client_that_never_reads_loses_its_connection_not_its_users_listings(
    broker, context
):
    vhost = broker.vhosts["/"]
    for index in range(QUEUES):
        vhost.declare_queue(
            f"q-{index:05d}-{'x' * 100}", durable=False, auto_delete=False, arguments={}, now_ms=0
        )
    app = make_app(context, send_stall_s=STALL_S)
    async with TestServer(app, host="127.0.0.1") as server:
        auth = base64.b64encode(b"guest:guest").decode()
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(stalled, ("127.0.0.1", server.port))
        request = f"GET /api/queues/%2F HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n\r\n"
        await loop.sock_sendall(stalled, request.encode())
        await asyncio.sleep(STALL_S * 4)  # never read: the broker gives up after STALL_S

        headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
        async with aiohttp.ClientSession(headers=headers) as session:
            url = f"http://127.0.0.1:{server.port}/api/queues/%2F?page=1&page_size=10"
            async with asyncio.timeout(5):
                async with session.get(url) as response:
                    assert response.status == 200
                    assert (await response.json())["total_count"] == QUEUES
                async with session.get(url.partition("?")[0]) as response:
                    whole = len(await response.read())

        received = 0
        async with asyncio.timeout(5):
            while True:
                try:
                    chunk = await loop.sock_recv(stalled, 1 << 20)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                received += len(chunk)
        stalled.close()
        assert received < whole  # cut off: the broker gave up on it
