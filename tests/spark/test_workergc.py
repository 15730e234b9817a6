"""hutch_spark.workergc: the freeze happens once per process, at the first call.

The freeze itself is stubbed here (the test process's own objects stay collectable); that a real
Spark worker which read a slice is frozen is tests/spark/test_streamsource.py's
test_a_worker_that_read_a_slice_has_frozen_its_imports.
"""

from __future__ import annotations

import pytest
from hutch_spark import workergc


def test_the_first_call_freezes_and_the_later_ones_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    freezes: list[int] = []
    monkeypatch.setattr(workergc, "_frozen", False)
    monkeypatch.setattr(workergc.gc, "freeze", lambda: freezes.append(1))
    assert workergc.freeze_imports() is True
    assert workergc.freeze_imports() is False
    assert workergc.freeze_imports() is False
    assert freezes == [1]
