"""kill -9 of a real hutch-broker 15 and 40 ms (±50%) after a background definitions compaction
started: every queue and binding whose declare-ok or bind-ok the client received is there after
the restart, wherever in (or after) the compaction the kill landed.

Why a module of its own: these cases measure nothing, so they run in the broker level's parallel
pass; the case that must land the kill in the compaction at once stays in the serial module
test_definitions_compaction_broker.py (a race with the broker's progress, which a neighbour's
load could lose). Shared body: compaction_kill.py.
"""

from __future__ import annotations

import pytest

from tests.broker.store.compaction_kill import (
    kill_during_a_compaction_keeps_every_acknowledged_declare,
)


@pytest.mark.parametrize("delay_ms", [15, 40])
def test_kill_9_later_in_a_background_compaction_keeps_every_acknowledged_declare(
    hutch_broker, delay_ms
):
    kill_during_a_compaction_keeps_every_acknowledged_declare(hutch_broker, delay_ms)
