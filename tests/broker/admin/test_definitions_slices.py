"""The definitions import and export run a slice of short steps per loop turn (pure, fast).

A ticker task counts event-loop turns while an import or an export runs in-process: before,
the whole import (check, rehearsal, apply) and the export's walk ran in the turn that started
them; now each turn does at most ``slicing.SLICE_STEPS`` steps or ``SLICE_SECONDS`` of work.
Changes another client makes between two slices are handled item by item.
"""

import asyncio
import itertools
import time

import pytest
from hutch_broker.admin import definitions, errors, slicing
from hutch_broker.model.broker import Broker
from hutch_testing import definitions as documents

QUEUES = 2000  # the interference tests need an import still running after 60 loop turns
# Enough for an import of several slices of ``slicing.SLICE_STEPS`` (200), where the tests only
# need that: 2,000 cost them twice the CPU for nothing more (#29).
SLICED = 1000


def document(vhost: str = "a", queues: int = QUEUES) -> dict:
    """Ten exchanges and ``queues`` queues in ``vhost``, queue i bound to exchange i % 10."""
    names = [f"q{index:05d}" for index in range(queues)]
    edges = [(f"x{index % 10}", name, f"k{index}") for index, name in enumerate(names)]
    exchanges = [f"x{index}" for index in range(10)]
    return documents.in_vhost(documents.document(exchanges, names, edges), vhost)


class Ticker:
    """Counts loop turns, and the steps the observed generator takes in each."""

    def __init__(self) -> None:
        self.turns = 0
        self.stop = False

    async def run(self) -> None:
        while not self.stop:
            self.turns += 1
            await asyncio.sleep(0)


async def while_ticking(work):
    ticker = Ticker()
    task = asyncio.create_task(ticker.run())
    await asyncio.sleep(0)
    began = ticker.turns
    try:
        result = await work
    finally:
        ticker.stop = True
        await task
    return result, ticker.turns - began


def counted(steps, ticker_turns: list[int], ticker: Ticker):
    """Wrap a generator: record the ticker's turn at each step."""
    result = None
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result = done.value
            break
        ticker_turns.append(ticker.turns)
        yield
    return result


async def test_run_steps_takes_at_most_its_steps_per_turn():
    ticker = Ticker()
    task = asyncio.create_task(ticker.run())
    turns: list[int] = []

    def steps():
        for _ in range(1000):
            yield
        return "done"

    result = await slicing.run_steps(counted(steps(), turns, ticker), most=10)
    ticker.stop = True
    await task
    assert result == "done"
    per_turn = [turns.count(turn) for turn in set(turns)]
    assert max(per_turn) <= 10
    assert len(per_turn) >= 100


async def test_run_steps_ends_a_slice_when_its_time_is_spent():
    ticker = Ticker()
    task = asyncio.create_task(ticker.run())
    turns: list[int] = []

    def slow_steps():
        for _ in range(20):
            time.sleep(0.001)
            yield

    await slicing.run_steps(counted(slow_steps(), turns, ticker), seconds=0.002, most=1000)
    ticker.stop = True
    await task
    assert max(turns.count(turn) for turn in set(turns)) <= 2


def test_import_steps_yield_once_per_item():
    from hutch_broker.model.broker import import_steps

    broker = Broker()
    steps = list(import_steps(broker, document(queues=100), "http", None, paused=None))
    assert len(steps) == 1 + 10 + 100 + 100
    assert len(broker.vhosts["a"].queues) == 100


def test_export_steps_give_the_export():
    broker = Broker()
    broker.create_defaults()
    broker.import_definitions(document(queues=300))
    steps = broker.export_steps(per_step=50)
    count = 0
    while True:
        try:
            next(steps)
            count += 1
        except StopIteration as done:
            exported = done.value
            break
    assert exported == broker.export_definitions()
    assert count >= 600 // 50


async def test_an_import_runs_over_many_turns_and_lands_whole():
    broker = Broker()
    broker.create_defaults()
    seen: list[int] = []  # the queue count of vhost "a" at each loop turn

    async def sample() -> None:
        while True:
            vhost = broker.vhosts.get("a")
            seen.append(len(vhost.queues) if vhost is not None else 0)
            await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    await definitions.import_definitions(broker, document(queues=SLICED))
    sampler.cancel()
    growth = [later - earlier for earlier, later in itertools.pairwise(seen)]
    most = 200  # slicing.SLICE_STEPS; before, all the queues came in one turn
    assert max(growth) <= most
    assert sum(1 for step in growth if step) >= SLICED // most
    vhost = broker.vhosts["a"]
    assert len(vhost.queues) == SLICED
    assert sum(len(x.bindings) for x in vhost.exchanges.values()) == SLICED


async def test_a_bad_binding_at_the_end_changes_nothing_and_is_found_in_slices():
    broker = Broker()
    broker.create_defaults()
    bad = document()
    bad["bindings"].append({"vhost": "a", **documents.binding("x0", "nowhere", "")})
    before = broker.export_definitions()
    with pytest.raises(errors.ApiError) as caught:
        await while_ticking(definitions.import_definitions(broker, bad))
    assert caught.value.status == 400
    assert "nowhere" in caught.value.body["reason"]
    assert broker.export_definitions() == before


async def test_the_export_runs_over_many_turns():
    broker = Broker()
    broker.create_defaults()
    broker.import_definitions(document(queues=6000))
    exported, turns = await while_ticking(definitions.export(broker))
    # 12,010 items, 50 a step: over 240 steps, so at least two slices of at most
    # slicing.SLICE_STEPS (200) steps, however fast the machine (before: one turn)
    assert turns >= 2
    assert exported == broker.export_definitions()
    per_vhost, _ = await while_ticking(definitions.export(broker, "a"))
    assert per_vhost == definitions.vhost_export(broker.export_definitions(), "a")


async def run_with_interference(broker: Broker, doc: dict, interfere, after_turns: int = 30):
    """Start the import, let it run ``after_turns`` turns, call ``interfere``, finish it."""
    task = asyncio.create_task(definitions.import_definitions(broker, doc))
    for _ in range(after_turns):
        await asyncio.sleep(0)
    assert not task.done()
    interfere()
    return await asyncio.gather(task, return_exceptions=True)


async def test_a_queue_deleted_during_the_import_loses_its_binding_not_the_import():
    broker = Broker()
    broker.create_defaults()
    task = asyncio.create_task(definitions.import_definitions(broker, document()))
    while "a" not in broker.vhosts or len(broker.vhosts["a"].queues) < QUEUES:  # noqa: ASYNC110
        await asyncio.sleep(0)  # the import has declared every queue, not yet every binding
    assert not task.done()
    vhost = broker.vhosts["a"]
    vhost.delete_queue("q01999")  # its binding is the document's last one
    await task
    assert "q01999" not in vhost.queues
    assert len(vhost.queues) == QUEUES - 1
    destinations = [b.destination.name for b in vhost.bindings()]
    assert "q01999" not in destinations
    assert len(destinations) == QUEUES - 1


async def test_a_conflicting_declare_during_the_import_is_named_and_the_rest_lands():
    broker = Broker()
    broker.create_defaults()
    broker.add_vhost("a")
    vhost = broker.vhosts["a"]
    doc = document()

    def declare() -> None:
        vhost.declare_queue("q01999", durable=False, source="amqp")

    [outcome] = await run_with_interference(broker, doc, declare)
    assert isinstance(outcome, errors.ApiError)
    assert outcome.status == 409
    assert "q01999" in outcome.body["reason"]
    assert vhost.queues["q01999"].durable is False
    assert len(vhost.queues) == QUEUES


async def test_a_vhost_deleted_during_the_import_ends_the_import_cleanly():
    broker = Broker()
    broker.create_defaults()
    broker.add_vhost("a")
    [outcome] = await run_with_interference(broker, document(), lambda: broker.delete_vhost("a"),
                                            after_turns=60)  # fmt: skip
    assert outcome is None
    # The import's own vhost item may have re-created it (it came before the delete) or not;
    # either way no queue or binding points at a vhost object the broker no longer holds.
    for vhost in broker.vhosts.values():
        for exchange in vhost.exchanges.values():
            for binding in exchange.bindings.values():
                assert binding.destination.name in vhost.queues


async def test_imports_run_one_at_a_time():
    broker = Broker()
    broker.create_defaults()
    first = asyncio.create_task(definitions.import_definitions(broker, document("a", SLICED)))
    second = asyncio.create_task(definitions.import_definitions(broker, document("b", SLICED)))
    seen_both_applying = False
    while not (first.done() and second.done()):
        a = broker.vhosts.get("a")
        b = broker.vhosts.get("b")
        if a is not None and b is not None and 0 < len(a.queues) < SLICED and b.queues:
            seen_both_applying = True
        await asyncio.sleep(0)
    await asyncio.gather(first, second)
    assert not seen_both_applying
    assert len(broker.vhosts["a"].queues) == len(broker.vhosts["b"].queues) == SLICED


async def test_the_rehearsal_copy_is_taken_apart_in_slices_not_left_to_the_collector():
    """Left whole, the scratch copy of 2,000 queues was ~30,000 objects of cyclic garbage
    that a collection freed in one pause (~15,000 for the 1,000 here, still 15 times the bound);
    dismantled a slice per turn, refcounts free it."""
    import gc

    broker = Broker()
    broker.create_defaults()
    broker.import_definitions(document(queues=SLICED))
    bad = document("b", queues=SLICED)
    bad["bindings"].append({**bad["bindings"][0], "destination": "nowhere"})
    gc.collect()
    gc.disable()
    try:
        await definitions.import_definitions(broker, document("c", queues=SLICED))
        with pytest.raises(errors.ApiError):
            await definitions.import_definitions(broker, bad)
        garbage = gc.collect()
    finally:
        gc.enable()
    assert garbage < 1000, garbage
