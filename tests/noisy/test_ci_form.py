"""The CI form of the noisy cases is shorter than the bench's only where the verdict allows.

Why: tests/noisy runs ``noisy_cases.CI_CASES`` (``Case.for_ci``): fewer topic publishes, one
round of listings, 4 s of churn, a 10 s request timeout for the slow HTTP connections, while
bench/noisy.py runs ``CASES`` unchanged, so its figures stay comparable with RabbitMQ's. The
slow HTTP case with the shorter timeout must still try its new AMQP connection while every slow
connection is held; the case says so when it was not, rather than passing for the wrong reason.
"""

import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hutch_testing import noisy_cases


def _ci(name: str) -> noisy_cases.Case:
    return next(case for case in noisy_cases.CI_CASES if case.name == name)


def _bench(name: str) -> noisy_cases.Case:
    return next(case for case in noisy_cases.CASES if case.name == name)


def test_the_ci_form_changes_only_the_cases_that_say_why():
    shortened = {"case2-topic", "case3-listing", "case4-slow-http", "churn"}
    for case in noisy_cases.CI_CASES:
        bench = _bench(case.name)
        assert case.prepare is bench.prepare
        assert (case.attack is not bench.attack or case.hutch_config != bench.hutch_config) == (
            case.name in shortened
        ), case.name
    assert _ci("case5-stuck-consumer").hutch_config == _bench("case5-stuck-consumer").hutch_config


def test_only_the_ci_form_of_the_slow_http_case_shortens_the_request_timeout(tmp_path: Path):
    line = "management.tcp.request_timeout = 10000"
    assert _ci("case4-slow-http").hutch_config == (line,)
    assert _bench("case4-slow-http").hutch_config == ()
    config = tmp_path / "hutch-broker.conf"
    config.write_text(f"{line}\n")
    assert noisy_cases.request_timeout_s(SimpleNamespace(config_path=config)) == 10.0
    config.write_text("vm_memory_high_watermark.absolute = 1\n")
    assert noisy_cases.request_timeout_s(SimpleNamespace(config_path=config)) is None
    assert noisy_cases.request_timeout_s(SimpleNamespace()) is None  # RabbitMQ's launcher


def test_an_amqp_connection_tried_after_the_request_timeout_is_a_problem(tmp_path: Path):
    config = tmp_path / "hutch-broker.conf"
    config.write_text("management.tcp.request_timeout = 10000\n")
    broker = SimpleNamespace(config_path=config)
    assert noisy_cases._held_throughout(broker, 9.9) == []
    (problem,) = noisy_cases._held_throughout(broker, 10.0)
    assert "past the broker's 10 s request timeout" in problem
    config.write_text("")
    assert noisy_cases._held_throughout(broker, 60.0) == []  # the 30 s default: the bench's


def _keywords(name: str) -> dict[str, Any]:
    attack = _ci(name).attack
    assert isinstance(attack, functools.partial), name
    return attack.keywords


def test_the_ci_attacks_are_the_shorter_ones():
    assert _keywords("case2-topic") == {"publishes": noisy_cases.TOPIC_PUBLISHES_CI}
    assert _keywords("case3-listing") == {"seconds": noisy_cases.LISTING_SECONDS_CI}
    assert _keywords("churn") == {"seconds": noisy_cases.CHURN_SECONDS_CI}
    assert noisy_cases.TOPIC_PUBLISHES_CI < noisy_cases.TOPIC_PUBLISHES
    assert noisy_cases.CHURN_SECONDS_CI < noisy_cases.CHURN_SECONDS
