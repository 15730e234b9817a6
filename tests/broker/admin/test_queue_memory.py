"""``/api/queues``' ``memory``: what a queue holds in memory, not the bytes of its bodies.

Issue 31 item 3: the field summed every body's bytes, paged out or not, and showed 1.3 GB for
a queue of a 256 MiB broker. It now counts the resident bodies and headers plus each message's
entry; ``message_bytes*`` keep the totals. The figure is checked against what tracemalloc sees
the queue allocate, and against paging, which moves bodies out of memory.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from hutch_broker.admin.views import queues as queue_views
from hutch_broker.model import paging
from hutch_broker.model.messages import Message
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import properties
from hutch_broker.store import MessageStore

RAW = properties.encode_properties(delivery_mode=1, content_type="application/json")


def _memory(queue: object) -> int:
    item = queue_views.queue_item(queue, node="hutch@localhost")  # type: ignore[arg-type]
    return int(item["memory"])


@pytest.mark.parametrize(("size", "count"), [(0, 2000), (100, 2000), (8192, 2000), (65536, 300)])
def test_memory_is_what_the_queue_allocates(size: int, count: int) -> None:
    """Within 25% of what tracemalloc sees the queue and its messages allocate."""
    vhost = VirtualHost("/")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        queue, _ = vhost.declare_queue("q")
        for n in range(count):
            body = n.to_bytes(4, "big") * (size // 4)  # a body object of its own per message
            queue.publish(Message("", "q", bytes(bytearray(RAW)), body), 0)  # own header too
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    reported = _memory(queue)
    assert 0.75 * allocated <= reported <= 1.25 * allocated, (reported, allocated)


async def test_paged_out_bodies_are_not_counted_but_message_bytes_keeps_them(
    api, broker, tmp_path
) -> None:
    broker.pager.store = MessageStore(tmp_path / "paging")
    queue, _ = broker.vhosts["/"].declare_queue("q")
    body = b"x" * 65536
    total = paging.KEEP_IN_MEMORY + 100
    for _ in range(total):
        queue.publish(Message("", "q", RAW, body), 0)
    before = (await api.get("/api/queues/%2F/q")).body
    assert before["message_bytes"] == before["message_bytes_ram"] == total * len(body)
    assert before["memory"] >= before["message_bytes_ram"]  # bodies resident, plus entries

    broker.set_paging(True)
    item = (await api.get("/api/queues/%2F/q")).body
    assert item["message_bytes"] == total * len(body)  # the totals are unchanged
    assert item["message_bytes_paged_out"] == item["message_bytes"] - item["message_bytes_ram"]
    assert item["message_bytes_paged_out"] >= 100 * len(body)
    resident = item["message_bytes_ram"]
    assert resident <= item["memory"] <= resident + total * 1024 + 65536, item
    assert item["memory"] < item["message_bytes"] / 2, item
    broker.pager.store.close()


async def test_an_empty_queue_has_a_memory_of_its_own(api, broker) -> None:
    """As RabbitMQ's (13,568 B on 3.10.8), an empty queue's structures are not free."""
    broker.vhosts["/"].declare_queue("q")
    item = (await api.get("/api/queues/%2F/q")).body
    assert 1024 <= item["memory"] <= 65536
    assert item["message_bytes"] == 0
