"""Side-by-side fixture: each scenario runs once on RabbitMQ 3.10.8 and once on hutch-broker.

`target` is parametrized over both brokers, so every test appears as `test_…[rabbitmq]` and
`test_…[hutch]`; both runs assert the same observations, except where a test names a documented
difference (hutch_testing.differences), so the two brokers are held to one expectation.
"""

from collections.abc import Iterator

import pytest
from hutch_testing import levels
from hutch_testing.differences import HUTCH, RABBITMQ
from hutch_testing.sidebyside import Target


@pytest.fixture(params=[RABBITMQ, HUTCH])
@levels.broker_level
def target(request) -> Iterator[Target]:
    if request.param == RABBITMQ:
        broker = request.getfixturevalue("rabbitmq")
    else:
        broker = request.getfixturevalue("hutch_broker")
    side = Target(request.param, broker, request.node.originalname)
    yield side
    side.cleanup()
    if side.is_hutch:
        broker.stop(graceful=False)  # fresh per test; a clean shutdown is not under test
