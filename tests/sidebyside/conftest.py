"""Side-by-side fixture: each scenario runs once on RabbitMQ 3.10.8 and once on hutch-broker.

`target` is parametrized over both brokers, so every test appears as `test_…[rabbitmq]` and
`test_…[hutch]`; both runs assert the same observations, except where a test names a documented
difference (hutch_testing.differences), so the two brokers are held to one expectation.

Both sides are shared the same way: the session's RabbitMQ node and one hutch-broker per module,
each test under its own name prefix, and what it made deleted after it (``Target.cleanup``). A
test that needs a broker of its own (a config file, a restart) asks for ``hutch_broker_factory``.
"""

from collections.abc import Callable, Iterator
from typing import Any

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


@pytest.fixture
def prompt_stop() -> Callable[[Any], Any]:
    """Adds a consumer step to a Celery app: its test worker then stops within 0.2 s.

    Why: ``celery.contrib.testing.worker.start_worker`` stops its worker thread by setting a
    flag that the loop reads only between two polls, and an idle worker polls until its next
    timer, up to 10 s (kombu's ``Hub.fire_timers`` bound): that wait was most of each Celery
    test. A timer entry every 0.2 s bounds the poll. The step starts in the worker's own thread,
    so nothing else touches its timer. Celery is imported here, not at the conftest's import,
    so that collecting the directory does not pay for it (1.6 s at load 13).
    """
    from celery import bootsteps

    class PromptStop(bootsteps.StartStopStep):
        entry: Any = None

        def start(self, parent: Any) -> None:
            self.entry = parent.timer.call_repeatedly(0.2, int)

        def stop(self, parent: Any) -> None:
            if self.entry is not None:
                self.entry.cancel()

    def add(app: Any) -> Any:
        app.steps["consumer"].add(PromptStop)
        return app

    return add
