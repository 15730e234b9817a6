"""Hostile-input fuzzers (issue "Broker trust", torture suite): shared seed, budget and log check.

Why: a broker that parses bytes and JSON from strangers must answer every input with a clean
refusal, never a crash, a traceback or a stall of its other clients.  Each fuzzer is seeded and
prints its seed; ``HUTCH_FUZZ_SEED=<n>`` replays a run (the inputs are a pure function of the
seed; only their interleaving across concurrent connections varies).  ``HUTCH_FUZZ_INPUTS`` sets
the budget. Without it the budget is the module's ``FUZZ_INPUTS`` where a module sets its own (its
docstring says why that size), else 20,000: the CI form, each fuzzer well under a minute of
wall time. The fixture prints the budget the run uses, so a replay names it exactly.
"""

import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hutch_testing import brokers

DEFAULT_INPUTS = 20_000


@dataclass(frozen=True)
class Fuzz:
    seed: int
    inputs: int

    def rng(self, *salt: object) -> random.Random:
        """A generator for one part of the run, independent of the others' consumption."""
        return random.Random(f"{self.seed}:{':'.join(map(str, salt))}")


@pytest.fixture
def fuzz(request: pytest.FixtureRequest) -> Fuzz:
    given = os.environ.get("HUTCH_FUZZ_SEED")
    seed = int(given) if given else random.SystemRandom().randrange(2**32)
    default = getattr(request.module, "FUZZ_INPUTS", DEFAULT_INPUTS)
    inputs = int(os.environ.get("HUTCH_FUZZ_INPUTS", default))
    sys.stderr.write(f"\n{request.node.name}: HUTCH_FUZZ_SEED={seed} inputs={inputs}\n")
    return Fuzz(seed, inputs)


@pytest.fixture
def tracebacks() -> Callable[[brokers.HutchBroker], list[str]]:
    return broker_tracebacks


def broker_tracebacks(broker: brokers.HutchBroker) -> list[str]:
    """Every logged traceback (with the log line before it) in the broker's console log."""
    lines = broker.console_log.read_text(errors="replace").splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.startswith("Traceback"):
            context = lines[max(0, index - 1) : index + 40]
            found.append("\n".join(context))
    return found
