"""The torture suite's killer: a random moment, but never before the first confirm.

CI once killed the broker before any publish was confirmed (a loaded machine's clients were
still connecting), so that cycle checked nothing and failed the suite's own guard.
"""

import asyncio
import random
import re
import signal
from pathlib import Path

import pytest
from hutch_testing import torture


class _Broker:
    console_log = Path("console.log")

    def __init__(self) -> None:
        self.killed_with: list[int] = []

    def kill(self, sig: int) -> None:
        self.killed_with.append(sig)


async def _kill(ledger: torture.Ledger, broker: _Broker, *, confirm_after: float | None) -> None:
    stop = asyncio.Event()
    if confirm_after is not None:
        asyncio.get_running_loop().call_later(confirm_after, ledger.confirm, ("q",), "m-1")
    await torture.killer(broker, ledger, stop, random.Random(1), signal.SIGKILL)  # type: ignore[arg-type]
    assert stop.is_set()


def test_the_kill_waits_for_the_first_confirm():
    async def scenario() -> tuple[torture.Ledger, _Broker]:
        ledger, broker = torture.Ledger(), _Broker()
        await _kill(ledger, broker, confirm_after=2.0)  # later than the longest random delay
        return ledger, broker

    ledger, broker = asyncio.run(scenario())
    assert broker.killed_with == [signal.SIGKILL]
    assert ledger.first_confirm_s is not None and ledger.killed_s is not None
    assert 2.0 <= ledger.first_confirm_s <= ledger.killed_s


def test_a_broker_that_confirms_nothing_fails_the_cycle_and_is_still_killed(monkeypatch):
    monkeypatch.setattr(torture, "FIRST_CONFIRM_TIMEOUT_S", 0.2)

    async def scenario(broker: _Broker) -> None:
        await _kill(torture.Ledger(), broker, confirm_after=None)

    broker = _Broker()
    expected = "no publish was confirmed 0.2s after the cycle's random kill delay"
    with pytest.raises(torture.NoConfirmError, match=re.escape(expected)):
        asyncio.run(scenario(broker))
    assert broker.killed_with == [signal.SIGKILL]
