"""Fixtures of the noisy-neighbour suite: a hutch-broker per test, from this tree by default.

``HUTCH_NOISY_SOURCE=<dir>/broker`` runs the same tests against another source tree's broker
(``git archive <commit> broker | tar -x -C <dir>``): how the cases were shown to fail before
their fixes.
"""

from collections.abc import Iterator

import pytest
from hutch_testing import levels, noisy_cases


@pytest.fixture
@levels.broker_level
def quiet_broker(tmp_path) -> Iterator[noisy_cases.SourceBroker]:
    broker = noisy_cases.start_hutch(tmp_path / "broker")
    yield broker
    broker.stop()
