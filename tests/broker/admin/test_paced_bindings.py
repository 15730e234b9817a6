"""Exchange binding lists, now paced, keep the views' order: by source, destination, key."""

import random

from hutch_broker.admin.views import bindings as bindings_view


async def test_exchange_bindings_keep_the_view_order(api, broker):
    vhost = broker.vhosts["/"]
    assert (await api.put("/api/exchanges/%2F/fan", {"type": "fanout"})).status == 201
    assert (await api.put("/api/exchanges/%2F/up", {"type": "direct"})).status == 201
    names = [f"q{index:03d}" for index in range(300)]
    random.Random(3).shuffle(names)
    for name in names:
        assert (await api.put(f"/api/queues/%2F/{name}", {})).status == 201
        binding = {"routing_key": f"k{name[-1]}"}
        assert (await api.post(f"/api/bindings/%2F/e/fan/q/{name}", binding)).status == 201
    assert (await api.post("/api/bindings/%2F/e/up/e/fan", {"routing_key": "b"})).status == 201
    fan = vhost.exchanges["fan"]

    source = await api.get("/api/exchanges/%2F/fan/bindings/source")
    assert source.body == bindings_view.exchange_bindings(fan, "/", as_source=True)
    assert [item["destination"] for item in source.body] == sorted(names)
    destination = await api.get("/api/exchanges/%2F/fan/bindings/destination")
    assert destination.body == bindings_view.exchange_bindings(fan, "/", as_source=False)
    default = await api.get("/api/exchanges/%2F/amq.default/bindings/source")
    assert len(default.body) == len(vhost.queues)
    paged = await api.get("/api/exchanges/%2F/fan/bindings/source?page=2&page_size=100")
    assert paged.body["items"] == source.body[100:200]
