"""HEAD on a paced listing: headers only, and the keep-alive connection stays usable.

Paced listings are written by the handler as a stream; aiohttp leaves the body out of a HEAD
reply for a ``Response`` but not for a stream, and the management fuzzer's next request on the
same connection then read a JSON body where it expected a status line.
"""

import aiohttp


async def test_head_of_a_listing_sends_no_body(client, api):
    assert (await api.put("/api/queues/%2F/q", {})).status == 201
    headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    for path in ("/api/queues/%2F", "/api/exchanges", "/api/bindings", "/api/definitions"):
        async with client.head(path, headers=headers) as head:
            assert head.status == 200
            assert int(head.headers["Content-Length"]) > 2
            assert await head.read() == b""
        reply = await api.get(path)  # the same keep-alive connection
        assert reply.status == 200
        assert len(reply.body) > 0
