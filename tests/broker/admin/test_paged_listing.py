"""A page of a listing renders only its own items, and is byte for byte the old page.

Before, every ``?page=`` of ``/api/bindings/{vhost}`` rendered all of the vhost's bindings into
dicts, sorted them and cut out the page: paging through 110,000 bindings 500 at a time took
about 3 minutes and left 110,000 dicts alive per page for the garbage collector to walk (a
0.24 s pause for everyone). Queues and exchanges rendered every object per page as well.
Now the sort keys are read from the model objects and only the page is rendered.

- the structural tests count renders of one page of 20,000 bindings and 5,000 queues;
- the equivalence tests draw random queries (columns, sort, sort_reverse, name, use_regex,
  page, page_size) and hold each answer to ``listing.render_list`` over the full, unpaged
  listing, byte for byte, refusals included;
- the real-broker test, which pages through 20,000 bindings under a canary in another vhost,
  is test_paged_listing_broker.py (the serial pass: it measures the broker's CPU and a canary).
"""

import json
import random
import urllib.parse
from typing import Any

import aiohttp
import pytest
from hutch_broker.admin import errors, listing
from hutch_broker.admin.views import bindings as bindings_view
from hutch_broker.admin.views import exchanges as exchanges_view
from hutch_broker.admin.views import queues as queues_view

AUTH = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


def populate(vhost, *, queues: int, per_queue: int, seed: int = 7) -> None:
    """``queues`` queues in shuffled order, each bound ``per_queue`` times to a few exchanges,
    some bindings with arguments, some keys shared (ties keep the model's order)."""
    rng = random.Random(seed)
    for name in ("fan", "Up", "topic.x"):
        vhost.declare_exchange(name, "direct")
    vhost.bind("fan", vhost.exchanges["Up"], "e2e")
    names = [f"{rng.choice(['q', 'Q', 'job.'])}{index:05d}" for index in range(queues)]
    rng.shuffle(names)
    for name in names:
        queue, _ = vhost.declare_queue(name)
        for index in range(per_queue):
            source = ("fan", "Up", "topic.x")[index % 3]
            arguments = {"x-n": index} if index % 4 == 1 else None
            vhost.bind(source, queue, f"k{rng.randrange(5)}.{index}", arguments)


async def get_raw(client, path: str) -> tuple[int, bytes]:
    async with client.get(path, headers=AUTH) as response:
        return response.status, await response.read()


def expected(full: list[dict[str, Any]], params: dict[str, str], default_sort) -> tuple[int, bytes]:
    """What the one-go listing answers for ``params`` over the full rendered listing."""
    try:
        query = listing.parse_query(params)
        value = listing.render_list(full, query, default_sort)
    except errors.ApiError as exc:
        return exc.status, json.dumps(exc.body, separators=(",", ":")).encode()
    return 200, json.dumps(value, separators=(",", ":")).encode()


def random_query(rng: random.Random, sorts: list[str | None], names: list[str]) -> dict[str, str]:
    params = {"page": str(rng.choice([1, 1, 2, 3, 7])), "page_size": str(rng.choice([1, 7, 100]))}
    sort = rng.choice(sorts)
    if sort is not None:
        params["sort"] = sort
    if rng.random() < 0.4:
        params["sort_reverse"] = "true"
    if rng.random() < 0.4:
        params["name"] = rng.choice(names)
        if rng.random() < 0.5:
            params["use_regex"] = "true"
    if rng.random() < 0.3:
        params["columns"] = rng.choice(["name,vhost", "routing_key,source", "arguments.x-n"])
    return params


CASES = {
    "bindings": (
        "/api/bindings/%2F",
        (),
        [None, "source", "destination", "routing_key", "destination_type", "vhost", "name",
         "arguments", "properties_key", "arguments.x-n", "nope"],
    ),
    "all-bindings": ("/api/bindings", (), [None, "routing_key", "properties_key"]),
    "queues": ("/api/queues/%2F", listing.DEFAULT_SORT, [None, "name", "vhost", "durable",
                                                           "messages", "arguments", "nope"]),
    "all-queues": ("/api/queues", listing.DEFAULT_SORT, [None, "name", "state"]),
    "exchanges": ("/api/exchanges/%2F", listing.DEFAULT_SORT, [None, "name", "type", "vhost"]),
    "default-exchange": ("/api/exchanges/%2F/amq.default/bindings/source", (), [None, "source"]),
    "fan-source": ("/api/exchanges/%2F/fan/bindings/source", (), [None, "routing_key", "name"]),
    "fan-destination": ("/api/exchanges/%2F/Up/bindings/destination", (), [None, "source"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
async def test_random_pages_equal_the_one_go_listing(case, client, broker):
    populate(broker.vhosts["/"], queues=60, per_queue=4)
    path, default_sort, sorts = CASES[case]
    names = ["q", "Q0001", "job", "^q.*5$", "(a+)+$", "[", "", "e2e", "x"]
    status, body = await get_raw(client, path)
    assert status == 200
    full = json.loads(body)
    rng = random.Random(case)
    for _ in range(60):
        params = random_query(rng, sorts, names)
        answer = await get_raw(client, f"{path}?{urllib.parse.urlencode(params)}")
        assert answer == expected(full, params, default_sort), params
    # walking every page gives the full listing, in order
    pages, page = [], 1
    while True:
        status, body = await get_raw(client, f"{path}?page={page}&page_size=17")
        assert status == 200
        pages.extend(json.loads(body)["items"])
        if page >= json.loads(body)["page_count"]:
            break
        page += 1
    assert pages == listing.render_list(full, listing.ListQuery(), default_sort)


def count_calls(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


async def test_a_page_of_20000_bindings_renders_only_the_page(client, broker, monkeypatch):
    populate(broker.vhosts["/"], queues=2000, per_queue=9)  # 2,000 implicit + 18,001 explicit
    implicit = count_calls(monkeypatch, bindings_view, "default_binding_item")
    explicit = count_calls(monkeypatch, bindings_view, "binding_item")
    for query in (
        "page=3&page_size=500",  # the default order
        "page=20&page_size=500&sort=routing_key",
        "page=2&page_size=500&sort=destination&sort_reverse=true",
    ):
        implicit[0] = explicit[0] = 0
        status, body = await get_raw(client, f"/api/bindings/%2F?{query}")
        assert status == 200
        page = json.loads(body)
        assert page["total_count"] == 20001 and page["item_count"] == 500
        # before: every one of the 20,001 bindings rendered for every page
        assert implicit[0] + explicit[0] == 500, query


async def test_a_page_of_5000_queues_renders_only_the_page(client, broker, monkeypatch):
    populate(broker.vhosts["/"], queues=5000, per_queue=0)
    rendered = count_calls(monkeypatch, queues_view, "queue_item")
    for query in ("page=4&page_size=500", "page=1&page_size=100&name=q0&sort=name"):
        rendered[0] = 0
        status, body = await get_raw(client, f"/api/queues/%2F?{query}")
        assert status == 200 and json.loads(body)["total_count"] == 5000
        assert rendered[0] == json.loads(body)["item_count"], query
    # a sort key that is not read from the queue still works, by rendering every queue
    rendered[0] = 0
    status, _ = await get_raw(client, "/api/queues/%2F?page=1&page_size=10&sort=messages")
    assert status == 200 and rendered[0] == 5000 + 10


async def test_a_page_of_exchanges_renders_only_the_page(client, broker, monkeypatch):
    vhost = broker.vhosts["/"]
    for index in range(1000):
        vhost.declare_exchange(f"x{index:04d}", "fanout")
    rendered = count_calls(monkeypatch, exchanges_view, "exchange_item")
    status, body = await get_raw(client, "/api/exchanges/%2F?page=2&page_size=100")
    assert status == 200 and json.loads(body)["item_count"] == 100
    assert rendered[0] == 100
