"""Paced listings: the same bytes as the one-go listing, built in slices the loop can interleave.

The equivalence tests hold ``paced.render_list`` to ``listing.render_list`` + ``json.dumps`` over
sorting, reverse, paging, name filters (plain and regex), columns and the errors. The slicing
tests use a fake clock, so they count slices and loop turns instead of timing anything.
"""

import asyncio
import json
import random

import pytest
from hutch_broker.admin import errors, listing, paced

NAMES = ["alpha", "Beta", "gamma.1", "gamma.10", "delta", "é-queue", "q-042", "q-7", "zeta"]


def make_items(count: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for index in range(count):
        item = {
            "vhost": rng.choice(["/", "a", "b"]),
            "name": f"{rng.choice(NAMES)}-{index % 37}",
            "messages": rng.choice([0, 1, 5, 5, 2.5, None]),
            "state": rng.choice(["running", "idle"]),
        }
        if rng.random() < 0.5:
            item["stats"] = {"publish": rng.randint(0, 3), "ack": rng.choice([0, True, "x"])}
        items.append(item)
    return items


def one_go(items, params, default_sort=listing.DEFAULT_SORT) -> bytes:
    rendered = listing.render_list(items, listing.parse_query(params), default_sort)
    return json.dumps(rendered, separators=(",", ":")).encode()


async def in_slices(items, params, default_sort=listing.DEFAULT_SORT, slice_s=0.0) -> bytes:
    query = listing.parse_query(params)
    pacer = paced.Pacer(slice_s=slice_s)
    return await paced.render_list(items, dict, query, default_sort=default_sort, pacer=pacer)


QUERIES = [
    {},
    {"sort": "messages"},
    {"sort": "messages", "sort_reverse": "true"},
    {"sort": "stats.publish", "columns": "name,stats.ack"},
    {"sort": "state", "sort_reverse": "true", "columns": "vhost,name"},
    {"page": "1"},
    {"page": "3", "page_size": "7"},
    {"page": "2", "page_size": "50", "name": "GAMMA"},
    {"page": "1", "page_size": "5", "name": "^q-0?4", "use_regex": "true", "sort": "name"},
    {"page": "1", "page_size": "500", "name": "nothing-matches"},
    {"page": "9", "page_size": "100"},  # the page just past a 800-item list: empty, not an error
    {"name": "alpha"},  # ignored without ?page=, as in RabbitMQ
]


@pytest.mark.parametrize("params", QUERIES)
@pytest.mark.parametrize("default_sort", [listing.DEFAULT_SORT, ("name",), ()])
async def test_paced_listing_is_byte_for_byte_the_one_go_listing(params, default_sort):
    items = make_items(800)
    expected = one_go(items, params, default_sort)
    assert await in_slices(items, params, default_sort) == expected
    assert await in_slices(items, params, default_sort, slice_s=60.0) == expected


@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({"page": "10", "page_size": "100"}, 400, "page_out_of_range"),
        ({"page": "1", "name": "(", "use_regex": "true"}, 400, "bad_request"),
    ],
)
async def test_paced_listing_refuses_what_the_one_go_listing_refuses(params, status, error):
    items = make_items(800)
    with pytest.raises(errors.ApiError) as one:
        one_go(items, params)
    with pytest.raises(errors.ApiError) as sliced:
        await in_slices(items, params)
    assert (sliced.value.status, sliced.value.body) == (one.value.status, one.value.body)
    assert sliced.value.body["error"] == error and sliced.value.status == status


async def test_encode_is_json_dumps():
    export = {"rabbit_version": "3.10.8", "queues": make_items(300), "users": [], "n": {"a": [1]}}
    expected = json.dumps(export, separators=(",", ":")).encode()
    assert await paced.encode(export, paced.Pacer(slice_s=0.0)) == expected
    assert (
        await paced.encode(make_items(5), paced.Pacer())
        == json.dumps(make_items(5), separators=(",", ":")).encode()
    )


class FakeClock:
    """Each reading is ``step`` seconds after the last: work that takes time, without timing."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def test_a_big_listing_gives_the_loop_back_every_few_items():
    """5,000 items at a (fake) 0.5 ms per clock reading, 2 ms slices: the loop runs other
    callbacks hundreds of times while the listing is built; one go would give it none."""
    loop = asyncio.get_running_loop()
    turns = 0
    done = False

    def other_tenant() -> None:
        nonlocal turns
        turns += 1
        if not done:
            loop.call_soon(other_tenant)

    loop.call_soon(other_tenant)
    pacer = paced.Pacer(slice_s=0.002, clock=FakeClock(0.0005))
    query = listing.parse_query({"sort": "messages"})
    await paced.render_list(make_items(5000), dict, query, pacer=pacer)
    done = True
    # Each item passes one step that ticks per item (render and encode), the sort ticks once
    # per piece of RUN_LENGTH items, and a slice is four or five ticks here.
    assert pacer.slices > 5000 // 5
    assert turns >= pacer.slices - 1


async def test_the_gate_admits_one_listing_per_user_and_two_overall():
    gate = paced.ListingGate(total=2, per_user=1)
    inside: list[str] = []
    most = {"total": 0, "alice": 0}
    release = asyncio.Event()

    async def listing_by(user: str) -> None:
        async with gate.admit(user):
            inside.append(user)
            most["total"] = max(most["total"], len(inside))
            most["alice"] = max(most["alice"], inside.count("alice"))
            await release.wait()
            inside.remove(user)

    tasks = [asyncio.create_task(listing_by(user)) for user in ["alice"] * 8 + ["bob", "carol"]]
    await asyncio.sleep(0.01)
    assert sorted(inside) == ["alice", "bob"]  # carol waits for the second overall slot
    release.set()
    await asyncio.gather(*tasks)
    assert most == {"total": 2, "alice": 1}
    assert gate._users == {}  # nobody waiting: no per-user state kept


async def test_a_backtracking_name_regex_costs_bounded_time():
    """``?name=(a+)+$&use_regex=true`` over names of 200 'a's and a '!': ``re.search`` needs
    about 2**200 steps per name; the policy patterns' automaton needs a few per character."""
    items = [{"vhost": "/", "name": "a" * 200 + "!"}, {"vhost": "/", "name": "AAAA"}]
    params = {"page": "1", "name": "(a+)+$", "use_regex": "true"}
    body = json.loads(await in_slices(items, params, slice_s=0.002))
    assert [item["name"] for item in body["items"]] == ["AAAA"]  # caseless, as RabbitMQ
    assert json.loads(one_go(items, params))["items"] == body["items"]


async def test_a_built_listing_gives_back_the_overall_slot_but_keeps_its_users():
    """Sending happens after ``done_working``: a client that does not read its body blocks its
    own user's next listing, not other users' builds."""
    gate = paced.ListingGate(total=1, per_user=1)
    sending = asyncio.Event()
    client_reads = asyncio.Event()
    order: list[str] = []

    async def slow_reader() -> None:
        async with gate.admit("alice") as admission:
            order.append("alice built")
            admission.done_working()
            sending.set()
            await client_reads.wait()
        order.append("alice sent")

    async def listing_by(user: str) -> None:
        async with gate.admit(user):
            order.append(f"{user} built")

    first = asyncio.create_task(slow_reader())
    await sending.wait()
    alice_again = asyncio.create_task(listing_by("alice"))
    await asyncio.wait_for(listing_by("bob"), timeout=1.0)  # the overall slot is free
    assert order == ["alice built", "bob built"]  # alice's second listing still waits
    client_reads.set()
    await asyncio.gather(first, alice_again)
    assert order[2:] == ["alice sent", "alice built"]


async def test_paced_metrics_are_the_one_go_metrics(broker, context, memory):
    from hutch_broker.admin import metrics
    from hutch_broker.admin.state import WriteCounter

    for vhost_name in ("a", 'b"\\\n'):
        broker.add_vhost(vhost_name)
        for index in range(250):
            broker.vhosts[vhost_name].declare_queue(
                f"q-{index}", durable=False, auto_delete=False, arguments={}, now_ms=0
            )
    writes = WriteCounter()
    writes.record("PUT", "/api/queues/{vhost}/{queue}", 201)
    expected = metrics.render(context, memory, writes)
    pacer = paced.Pacer(slice_s=0.0)
    assert await metrics.render_paced(context, memory, writes, pacer) == expected
    assert pacer.slices > 500  # every queue read and every hundred written is a step


async def test_a_shared_render_serves_concurrent_and_recent_callers_one_render():
    now = [0.0]
    shared = paced.SharedRender(max_age_s=1.0, clock=lambda: now[0])
    gate = asyncio.Event()

    async def render() -> bytes:
        await gate.wait()
        return b"body-%d" % shared.renders

    waiting = [asyncio.create_task(shared.get(render)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    assert set(await asyncio.gather(*waiting)) == {b"body-1"}
    now[0] = 0.9
    assert await shared.get(render) == b"body-1"  # still fresh
    now[0] = 1.5
    assert await shared.get(render) == b"body-2"
    assert shared.renders == 2
