"""dispatch.unacked: a channel's unacked deliveries with a stream's runs as one item each.

Checked against the simplest model that is right by construction, one dict item per tag (what
the channel kept before runs), over random interleavings of single deliveries, runs, single
and multiple acks (of outstanding tags, of settled ones, of tags never sent) and takes of
everything; plus the cases the module's doc names, one by one. The channel's own use (acks of
real stream reads, the 406 for an unknown tag) is tests/broker/dispatch/test_stream_deliveries.py
and the side-by-side suite's.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hutch_broker.dispatch.unacked import Unacked

CLASSIC, STREAM = "classic", "stream"  # stand-ins: Unacked does not look into them
SINGLE_CONSUMER, RUN_CONSUMER = "c1", "c2"


class Model:
    """One item per tag, in order: what the channel did before runs."""

    def __init__(self) -> None:
        self.items: dict[int, tuple[Any, Any, Any]] = {}

    def take(self, tag: int, multiple: bool) -> list[tuple[Any, Any, Any]] | None:
        if multiple and tag == 0:
            taken = list(self.items.values())
            self.items.clear()
            return taken
        if tag not in self.items:
            return None
        if not multiple:
            return [self.items.pop(tag)]
        names = [t for t in self.items if t <= tag]
        return [self.items.pop(t) for t in names]


def flat(taken: tuple[list[Any], list[Any]] | None) -> list[tuple[Any, Any, Any]] | None:
    """Singles and run pieces as (queue, entry, consumer) deliveries, sorted by entry."""
    if taken is None:
        return None
    singles, pieces = taken
    out = list(singles)
    for queue, consumer, entries in pieces:
        out += [(queue, entry, consumer) for entry in entries]
    return sorted(out, key=lambda delivery: delivery[1])


def unacked_with(deliveries: list[tuple[str, int]]) -> tuple[Unacked, Model, int]:
    """("single", 1) or ("run", n) in order, tags from 1; entries are their tags."""
    unacked, model, tag = Unacked(), Model(), 1
    for kind, count in deliveries:
        if kind == "single":
            unacked[tag] = model.items[tag] = (CLASSIC, tag, SINGLE_CONSUMER)
            tag += 1
        else:
            entries = list(range(tag, tag + count))
            unacked.add_run(tag, STREAM, RUN_CONSUMER, entries)
            for t in entries:
                model.items[t] = (STREAM, t, RUN_CONSUMER)
            tag += count
    return unacked, model, tag


def take(unacked: Unacked, tag: int, multiple: bool) -> tuple[list[Any], list[Any]] | None:
    """What the channel does: a single ack pops a single, else asks the runs."""
    if multiple:
        return unacked.take_through(tag)
    found = unacked.pop(tag, None) or unacked.take_one(tag)
    return None if found is None else ([found], [])


def check(unacked: Unacked, model: Model) -> None:
    assert unacked.tags() == list(model.items)
    assert unacked.outstanding() == len(model.items)
    assert list(unacked.deliveries()) == [(t, *d) for t, d in model.items.items()]


def test_a_multiple_ack_inside_a_run_takes_its_prefix_and_leaves_the_rest_in_front() -> None:
    unacked, model, _ = unacked_with([("single", 1), ("run", 10), ("single", 1)])
    assert len(unacked) == 3  # three items ...
    assert unacked.outstanding() == 12  # ... twelve deliveries
    taken = take(unacked, 5, multiple=True)
    assert taken is not None
    singles, pieces = taken
    assert singles == [(CLASSIC, 1, SINGLE_CONSUMER)]
    assert pieces == [(STREAM, RUN_CONSUMER, [2, 3, 4, 5])]
    assert unacked.tags() == [6, 7, 8, 9, 10, 11, 12]
    model.take(5, multiple=True)
    check(unacked, model)
    assert unacked.queue_of(6) == STREAM
    assert unacked.queue_of(5) is None


def test_single_acks_inside_a_run_leave_holes_and_a_hole_is_not_outstanding() -> None:
    unacked, _, _ = unacked_with([("run", 10)])
    assert flat(take(unacked, 4, multiple=False)) == [(STREAM, 4, RUN_CONSUMER)]
    assert take(unacked, 4, multiple=False) is None  # acked already: unknown
    assert take(unacked, 4, multiple=True) is None  # and nothing changed
    assert unacked.tags() == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    assert flat(take(unacked, 6, multiple=True)) == [
        (STREAM, t, RUN_CONSUMER) for t in (1, 2, 3, 5, 6)
    ]
    assert unacked.tags() == [7, 8, 9, 10]


def test_the_last_delivery_of_a_run_gone_singly_leaves_the_dict() -> None:
    unacked, _, _ = unacked_with([("run", 3)])
    for tag in (3, 1, 2):
        assert take(unacked, tag, multiple=False) is not None
    assert not unacked
    assert unacked.outstanding() == 0
    assert unacked.live_runs == 0


def test_tags_never_sent_are_unknown_and_change_nothing() -> None:
    unacked, model, next_tag = unacked_with([("run", 5), ("single", 1), ("run", 5)])
    for tag in (next_tag, next_tag + 100, -1):
        assert take(unacked, tag, multiple=True) is None
        assert take(unacked, tag, multiple=False) is None
    check(unacked, model)


def test_queues_up_to_a_tag_name_each_run_once() -> None:
    unacked, _, _ = unacked_with([("single", 1), ("run", 4), ("single", 1), ("run", 4)])
    assert list(unacked.queues(1)) == [CLASSIC]
    assert list(unacked.queues(2)) == [CLASSIC, STREAM]
    assert list(unacked.queues(6)) == [CLASSIC, STREAM, CLASSIC]
    assert list(unacked.queues()) == [CLASSIC, STREAM, CLASSIC, STREAM]


@pytest.mark.parametrize("seed", range(40))
def test_random_acks_settle_what_one_item_per_tag_would(seed: int) -> None:
    rng = random.Random(seed)
    unacked, model, tag = Unacked(), Model(), 1
    for _ in range(300):
        roll = rng.random()
        if roll < 0.25:
            if rng.random() < 0.5:
                unacked[tag] = model.items[tag] = (CLASSIC, tag, SINGLE_CONSUMER)
                tag += 1
            else:
                count = rng.randint(1, 30)
                entries = list(range(tag, tag + count))
                unacked.add_run(tag, STREAM, RUN_CONSUMER, entries)
                for t in entries:
                    model.items[t] = (STREAM, t, RUN_CONSUMER)
                tag += count
        elif roll < 0.3:
            assert flat(unacked.take_through(0)) == flat((model.take(0, True) or [], []))
        else:
            multiple = rng.random() < 0.4
            # an outstanding tag mostly, sometimes one settled before or never sent
            outstanding = list(model.items)
            pick = rng.choice(outstanding) if outstanding and rng.random() < 0.8 else None
            name = pick if pick is not None else rng.randint(1, tag + 3)
            expected = model.take(name, multiple)
            got = take(unacked, name, multiple)
            assert flat(got) == (None if expected is None else sorted(expected, key=lambda d: d[1]))
        check(unacked, model)
