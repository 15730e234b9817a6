"""Side-by-side fixture: each scenario runs once on RabbitMQ 3.10.8 and once on hutch-broker.

`target` is parametrized over both brokers, so every test appears as `test_…[rabbitmq]` and
`test_…[hutch]`; both runs assert the same observations, except where a test names a documented
difference (hutch_testing.differences), so the two brokers are held to one expectation.

Both sides are shared the same way: the session's RabbitMQ node and one hutch-broker per module,
each test under its own name prefix, and what it made deleted after it (``Target.cleanup``). A
test that needs a broker of its own (a config file, a restart) asks for ``hutch_broker_factory``.
"""

from collections.abc import Iterator

import pytest
from hutch_testing import brokers, levels, vhosts
from hutch_testing.differences import HUTCH, RABBITMQ
from hutch_testing.sidebyside import Target


@pytest.fixture(scope="module")
@levels.broker_level
def module_hutch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[brokers.HutchBroker]:
    """The module's hutch-broker: one start per module instead of one per test."""
    broker = vhosts.start_module_broker(tmp_path_factory)
    yield broker
    broker.stop(graceful=False)  # a clean shutdown is not under test here


@pytest.fixture(params=[RABBITMQ, HUTCH])
@levels.broker_level
def target(request) -> Iterator[Target]:
    broker = request.getfixturevalue("rabbitmq" if request.param == RABBITMQ else "module_hutch")
    side = Target(request.param, broker, request.node.originalname)
    yield side
    side.cleanup()
