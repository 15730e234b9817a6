"""queue.declare and exchange.declare whose policy matching does not fit in the loop turn.

Why this module exists: a declare of a new name matches it against every policy of the vhost
(POL-2).  A policymaker can choose patterns whose DFA cannot be cached, at up to ~27 ms per
255-byte name each; ten of them made one declare hold the event loop for ~180 ms, and a loop
of declares froze every other tenant.  Here the search (``model.policymatch``) runs against
the same per-turn allowance as routing (``dispatch.turns``): if it fits in what the turn has
left, the declare completes at once, as before; if not, the declare is *parked* exactly as an
expensive publish is: its connection reads and processes nothing more, the search goes on a
slice per loop turn, and the declare (with its errors, its declare-ok) completes once the
answer is known.  The replies of that connection stay in order; other connections run between
slices.

The search counts ``automata`` units (about 30-60 ns each); the turn's allowance counts routing
steps (a few hundred ns each), so a search is charged ``UNITS_PER_STEP`` units per step.

If a policy change is installed while a declare is parked, its answer may be stale: the search
starts again against the new tables (``PolicyMatch.current``), so a declare never gets a policy
that was no longer the best when it completed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from hutch_broker.dispatch.channels import Channel, ChannelOwner
from hutch_broker.model import budgets
from hutch_broker.model.exchanges import Exchange
from hutch_broker.model.policymatch import PolicyMatch
from hutch_broker.model.queues import Queue
from hutch_broker.protocol import errors

# automata units per routing step: a step is ~0.2-0.4 us, a unit ~30-60 ns.
UNITS_PER_STEP: Final = 6

log = logging.getLogger(__name__)

Begin = Callable[[], PolicyMatch | None]  # a new search, against the tables as they are now
Finish = Callable[[PolicyMatch | None, int], None]  # the declare itself: (match, now_ms)


def within(match: PolicyMatch, meter: budgets.Meter) -> bool:
    """Advance ``match`` while ``meter`` lasts, charging it; True once the answer is known."""
    left = meter.left
    if left > 0 and not match.done:
        spent = match.advance(left * UNITS_PER_STEP)
        meter.left = left - (spent + UNITS_PER_STEP - 1) // UNITS_PER_STEP
    return match.done


def declare(
    session: ChannelOwner,
    channel: Channel,
    method: Any,
    begin: Begin,
    finish: Finish,
    now_ms: int,
) -> None:
    """Run ``finish`` now if the policy search fits in the turn; else park the connection."""
    match = begin()
    if match is None or within(match, session.context.turns.inline_meter()):
        finish(match, now_ms)
        return
    session.park_reading()
    session.context.turns.park(ParkedDeclare(session, channel, method, match, begin, finish))


def delete(
    session: ChannelOwner,
    channel: Channel,
    method: Any,
    entity: Queue | Exchange,
    finish: Callable[[int], None],
    now_ms: int,
) -> None:
    """queue.delete, exchange.delete: remove the entity's bindings within the turn's meter,
    then run ``finish`` (the delete itself); with thousands of bindings, over later turns."""
    vhost = session.open_vhost
    if vhost.unlink_within(entity, session.context.turns.inline_meter()):
        finish(now_ms)
        return
    session.park_reading()
    session.context.turns.park(ParkedDelete(session, channel, method, entity, finish))


class ParkedMethod:
    """A method of a parked connection: ``work`` over later turns, then ``run`` it, with the
    errors a method handled at once would raise (``dispatch.turns.Parked``)."""

    def __init__(self, session: ChannelOwner, channel: Channel, method: Any) -> None:
        self.session, self.channel, self.method = session, channel, method

    def work(self, meter: budgets.Meter) -> bool:
        """Go on while ``meter`` lasts; True once the method can complete."""
        raise NotImplementedError

    def run(self, now_ms: int) -> None:
        raise NotImplementedError

    def advance(self, meter: budgets.Meter) -> bool:
        session = self.session
        if session.closed:
            return True  # the connection went: nothing more is done, nobody to answer
        if not self.work(meter):
            return False
        self._complete()
        session.resume_parked()  # reads on: the rest of its frames
        return True

    def _complete(self) -> None:
        session, channel = self.session, self.channel
        channels = session.channels
        if isinstance(channels, dict) and channels.get(channel.number) is not channel:
            return  # its channel went meanwhile: no reply
        try:
            self.run(session.context.clock())
        except errors.SoftError as exc:
            _attach(exc, self.method, channel.number)
            session.fail_channel(exc)
        except errors.HardError as exc:
            _attach(exc, self.method, channel.number)
            session.fail_connection(exc)
        except Exception:  # as data_received does for a method handled at once
            log.exception("internal error on connection %s", getattr(session, "id", "?"))
            session.fail_connection(errors.internal_error("internal error"))


class ParkedDeclare(ParkedMethod):
    """A declare waiting for its policy search."""

    def __init__(
        self,
        session: ChannelOwner,
        channel: Channel,
        method: Any,
        match: PolicyMatch,
        begin: Begin,
        finish: Finish,
    ) -> None:
        super().__init__(session, channel, method)
        self.match: PolicyMatch | None = match
        self.begin, self._finish = begin, finish
        self.restarts = 0  # searches started again after a policy change (tests, metrics)

    def work(self, meter: budgets.Meter) -> bool:
        while True:
            match = self.match
            if match is not None and not within(match, meter):
                return False
            if match is None or match.current(match.kind):
                return True
            self.restarts += 1  # a policy change was installed meanwhile: search again
            self.match = self.begin()
            if meter.left <= 0:
                return False

    def run(self, now_ms: int) -> None:
        self._finish(self.match, now_ms)


class ParkedDelete(ParkedMethod):
    """A queue.delete or exchange.delete removing thousands of bindings first."""

    def __init__(
        self,
        session: ChannelOwner,
        channel: Channel,
        method: Any,
        entity: Queue | Exchange,
        finish: Callable[[int], None],
    ) -> None:
        super().__init__(session, channel, method)
        self.entity, self._finish = entity, finish

    def work(self, meter: budgets.Meter) -> bool:
        return self.session.open_vhost.unlink_within(self.entity, meter)

    def run(self, now_ms: int) -> None:
        self._finish(now_ms)


def _attach(exc: errors.AMQPError, method: Any, channel: int) -> None:
    """Which method failed, for the close frame (as ``sessions`` does for a direct failure)."""
    if not exc.class_id:
        index = getattr(method, "index", 0) or 0
        exc.class_id, exc.method_id = index >> 16, index & 0xFFFF
    if isinstance(exc, errors.SoftError) and not getattr(exc, "channel", 0):
        exc.channel = channel
