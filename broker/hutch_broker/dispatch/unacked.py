"""A channel's unacked deliveries: one item per single delivery, one per run of a stream's.

Why runs: a stream reader takes thousands of deliveries a second on one channel, in runs of
consecutive tags (``Channel.deliver_run``), and acks them with ``multiple`` (its acks only give
back credit). Kept one dict item per delivery, as a classic queue's are, the bookkeeping was a
third of the broker's CPU in a stream read (py-spy, 2026-12-01: inserting each tag, popping
each one in a Python loop at the ack, summing bodies a stream delivery does not hold). A run is
one item whatever its length: an ack takes a slice of its entries list, in C.

Items are kept in tag order in one ``OrderedDict`` (tags are handed out in order, and a run's
are consecutive): a single delivery under its tag, a run under minus its last tag, so that no
tag names a run and ``pop(tag)``, the channel's single ack, finds singles only. What an ack
names:

- ``multiple`` with tag T: every outstanding delivery up to T, T included, which must be
  outstanding (else ``take_through`` returns None and nothing changes: the caller's 406). The
  item holding T is found first (the single under T, or the run holding T by bisection over
  ``runs``, by first tag); the items before it go whole, and of a run holding T the prefix
  through T, the rest staying in front.
- a single tag that no single has: the one tag of the run holding it (``take_one``). A run
  keeps such a tag as a hole until a prefix passes it, so no run is ever split: an ack costs
  O(log runs) whatever the order a client acks in.

A run's holes are tags settled singly; ``live`` counts the rest. A run with none live leaves
the dict at once and ``runs`` lazily (compacted when half of it is dead).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Union

from hutch_broker.model.messages import Entry
from hutch_broker.model.queues import Consumer, Queue

Single = tuple[Queue, Entry, Union[Consumer, None]]  # noqa: UP007 - a runtime alias
RunPiece = tuple[Queue, Consumer, list[Entry]]  # what an ack takes of one run
_base = attrgetter("base")


@dataclass(slots=True, eq=False)
class Run:
    """Tags ``base + start`` to ``base + len(entries) - 1`` (``entries[i]`` is tag
    ``base + i``'s), less ``holes``; what is before ``start`` is gone."""

    queue: Queue
    consumer: Consumer
    base: int
    entries: list[Entry]
    last: int  # base + len(entries) - 1: a field, read on every ack
    start: int = 0
    live: int = 0
    holes: set[int] = field(default_factory=set)

    def holds(self, tag: int) -> bool:
        return self.base + self.start <= tag <= self.last and tag not in self.holes

    def take_through(self, tag: int) -> list[Entry]:
        """Everything outstanding up to ``tag`` (within the run): a slice, less any holes."""
        stop = min(tag, self.last) - self.base + 1
        taken = self.entries[self.start : stop]
        if self.holes:
            first = self.base + self.start
            gone = self.holes
            keep = [first + i not in gone for i in range(len(taken))]
            taken = list(compress(taken, keep))
            self.holes = {hole for hole in gone if hole >= self.base + stop}
        self.start = stop
        self.live -= len(taken)
        return taken

    def take_one(self, tag: int) -> Entry:
        """``tag``'s entry (``holds(tag)``); a tag past the first becomes a hole."""
        if tag == self.base + self.start:
            self.start += 1
            while self.holes and self.base + self.start in self.holes:
                self.holes.discard(self.base + self.start)
                self.start += 1
        else:
            self.holes.add(tag)
        self.live -= 1
        return self.entries[tag - self.base]


class Unacked(OrderedDict[int, Union[Single, Run]]):  # noqa: UP007 - a runtime base
    """See the module doc. The dict holds the items; ``outstanding()`` counts deliveries.

    A subclass of the dict, not a wrapper, so that a classic queue's delivery and its ack cost
    what they did: ``Channel.deliver`` stores a single with one C call, and while no run is
    outstanding (``live_runs``) the channel takes acks of singles itself, as before
    (tests/broker/dispatch/test_publish_calls.py pins those costs)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Run] = []  # by base; those with live == 0 are dead, kept until compacted
        self.live_runs = 0  # runs in the dict
        self.extra = 0  # what the runs in the dict add to len(): their live deliveries less one

    def outstanding(self) -> int:
        return len(self) + self.extra

    def add_run(self, tag: int, queue: Queue, consumer: Consumer, entries: list[Entry]) -> None:
        """``entries`` delivered with tags ``tag`` onwards (at least one)."""
        count = len(entries)
        last = tag + count - 1
        self[-last] = run = Run(queue, consumer, tag, entries, last, live=count)
        self.runs.append(run)
        self.live_runs += 1
        self.extra += count - 1

    # -- acks: the general case (the channel takes a classic queue's singles itself) --------

    def take_one(self, tag: int) -> Single | None:
        """An ack of ``tag`` alone, when no single has that tag (the channel pops those): the
        delivery of the run holding it, taken; None when it is not outstanding."""
        run = self._run_holding(tag)
        if run is None or not run.holds(tag):
            return None
        entry = run.take_one(tag)
        self._took(run, 1)
        return run.queue, entry, run.consumer

    def take_through(
        self, tag: int, *, newest: bool = False
    ) -> tuple[list[Single], list[RunPiece]] | None:
        """A multiple ack of ``tag``: every delivery up to it, removed, as single deliveries
        and pieces of runs; None, and nothing changed, when ``tag`` is not outstanding (0:
        everything; ``newest``: the channel's last tag, so everything if it is outstanding)."""
        if tag == 0:
            return self.take_all()
        if tag in self:
            stop = tag
        else:
            run = self._run_holding(tag)
            if run is None or not run.holds(tag):
                return None
            stop = -run.last  # the key of the item holding ``tag``
        if newest:
            return self.take_all()
        singles: list[Single] = []
        pieces: list[RunPiece] = []
        while True:
            key = next(iter(self))  # the oldest item; a run leaves only once _took empties it
            item = self[key]
            if isinstance(item, Run):
                taken = item.take_through(tag)
                pieces.append((item.queue, item.consumer, taken))
                self._took(item, len(taken))
            else:
                del self[key]
                singles.append(item)
            if key == stop:
                return singles, pieces

    def take_all(self) -> tuple[list[Single], list[RunPiece]]:
        singles: list[Single] = []
        pieces: list[RunPiece] = []
        for item in self.values():
            if isinstance(item, Run):
                # without holes, the slice take_through would make, without its call (runs
                # of big messages are short, and a call each showed in the pinned calls)
                whole = (
                    item.entries[item.start :] if not item.holes else item.take_through(item.last)
                )
                pieces.append((item.queue, item.consumer, whole))
            else:
                singles.append(item)
        self.clear()
        self.runs.clear()
        self.live_runs = self.extra = 0
        return singles, pieces

    def _took(self, run: Run, count: int) -> None:
        """``count`` of ``run``'s deliveries were taken; one with none left leaves the dict
        now and ``runs`` lazily (compacted when half of it is dead)."""
        if run.live:
            self.extra -= count
            return
        self.extra -= count - 1
        del self[-run.last]
        self.live_runs -= 1
        if self.live_runs * 2 < len(self.runs):  # more dead than live
            self.runs = [r for r in self.runs if r.live]

    def _run_holding(self, tag: int) -> Run | None:
        runs = self.runs
        at = bisect_right(runs, tag, key=_base) - 1  # a C key: no call a step
        if at < 0:
            return None
        run = runs[at]
        return run if run.live and run.last >= tag else None

    # -- what is outstanding ----------------------------------------------------------------

    def queues(self, tag: int = 0) -> Iterator[Queue]:
        """The queue of each outstanding delivery up to ``tag`` (0: all), in tag order (a run
        once)."""
        for key, item in self.items():
            if isinstance(item, Run):
                if tag and item.base + item.start > tag:
                    return
                yield item.queue
            else:
                if tag and key > tag:
                    return
                yield item[0]

    def queue_of(self, tag: int) -> Queue | None:
        """The queue of the outstanding delivery ``tag``, if there is one."""
        single = self.get(tag)
        if single is not None:
            return single[0]  # type: ignore[index]  # a non-negative key is a single's
        run = self._run_holding(tag)
        return run.queue if run is not None and run.holds(tag) else None

    def deliveries(self) -> Iterator[tuple[int, Queue, Entry, Consumer | None]]:
        """Every outstanding delivery, in tag order (tests, diagnostics: not a hot path)."""
        for key, item in self.items():
            if isinstance(item, Run):
                for tag in range(item.base + item.start, item.last + 1):
                    if tag not in item.holes:
                        yield tag, item.queue, item.entries[tag - item.base], item.consumer
            else:
                yield key, item[0], item[1], item[2]

    def tags(self) -> list[int]:
        """The outstanding tags, in order."""
        return [delivery[0] for delivery in self.deliveries()]
