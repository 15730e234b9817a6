"""The CI form of the noisy cases is shorter than the bench's only where the verdict allows.

Why: tests/noisy runs ``noisy_cases.CI_CASES`` (``Case.for_ci``): fewer topic publishes, one
round of listings, 4 s of churn, 2 s of the stuck consumer's RSS samples, a 5 s request timeout
for the slow HTTP connections, while
bench/noisy.py runs ``CASES`` unchanged, so its figures stay comparable with RabbitMQ's. The
slow HTTP case with the shorter timeout must still try its new AMQP connection while every slow
connection is held; the case says so when it was not, rather than passing for the wrong reason.

The cases build their objects in one pipelined stream (``rawamqp.pipelined``: thousands of
``nowait`` declares and binds, then one method with a reply); ``noisy_cases.declare_all``
trusts that the reply means every method before it was served, and that a refused method is not
passed over. There the broker is the other end of a socket pair, so the test sees exactly what
was sent.
"""

import functools
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hutch_testing import noisy_cases, rawamqp
from pamqp import commands, frame


def _ci(name: str) -> noisy_cases.Case:
    return next(case for case in noisy_cases.CI_CASES if case.name == name)


def _bench(name: str) -> noisy_cases.Case:
    return next(case for case in noisy_cases.CASES if case.name == name)


def test_the_ci_form_changes_only_the_cases_that_say_why():
    shortened = {
        "case2-topic",
        "case3-listing",
        "case4-slow-http",
        "case5-stuck-consumer",
        "churn",
        "idle-stream-consumers",
    }
    for case in noisy_cases.CI_CASES:
        bench = _bench(case.name)
        assert case.prepare is bench.prepare
        assert (case.attack is not bench.attack or case.hutch_config != bench.hutch_config) == (
            case.name in shortened
        ), case.name
    assert _ci("case5-stuck-consumer").hutch_config == _bench("case5-stuck-consumer").hutch_config


def test_only_the_ci_form_of_the_slow_http_case_shortens_the_request_timeout(tmp_path: Path):
    line = "management.tcp.request_timeout = 5000"
    assert _ci("case4-slow-http").hutch_config == (line,)
    assert _bench("case4-slow-http").hutch_config == ()
    config = tmp_path / "hutch-broker.conf"
    config.write_text(f"{line}\n")
    assert noisy_cases.request_timeout_s(SimpleNamespace(config_path=config)) == 5.0
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
    assert _keywords("case5-stuck-consumer") == {"seconds": noisy_cases.STUCK_SECONDS_CI}
    assert noisy_cases.TOPIC_PUBLISHES_CI < noisy_cases.TOPIC_PUBLISHES
    assert noisy_cases.CHURN_SECONDS_CI < noisy_cases.CHURN_SECONDS
    assert noisy_cases.STUCK_SECONDS_CI < noisy_cases.STUCK_SECONDS


def _serve(sock: socket.socket, received: list[object], reply: object) -> None:
    """Read methods until the passive declare, then answer it with ``reply``."""
    while True:
        method = rawamqp.read_frame(sock)
        received.append(method)
        if isinstance(method, commands.Queue.Declare) and method.passive:
            sock.sendall(frame.marshal(reply, 1))
            return


def _run(reply: object, count: int) -> tuple[list[object], object]:
    client, server = socket.socketpair()
    received: list[object] = []
    broker = threading.Thread(target=_serve, args=(server, received, reply))
    broker.start()
    methods = [commands.Queue.Declare(queue=f"q{index}", nowait=True) for index in range(count)]
    sync = commands.Queue.Declare(queue=f"q{count - 1}", passive=True)
    try:
        answer = rawamqp.pipelined(client, methods, sync, commands.Queue.DeclareOk)
    finally:
        broker.join(30)
        client.close()
        server.close()
    return received, answer


def test_every_method_is_sent_in_order_before_the_sync_and_its_answer_is_returned():
    received, answer = _run(commands.Queue.DeclareOk("q4999", 0, 0), 5000)  # three batches
    assert [method.queue for method in received] == [f"q{i}" for i in range(5000)] + ["q4999"]
    assert [method.passive for method in received].count(True) == 1
    assert isinstance(answer, commands.Queue.DeclareOk)


def test_a_refused_method_is_an_error_not_a_silent_skip():
    refusal = commands.Channel.Close(404, "NOT_FOUND - no queue 'q9'", 50, 10)
    with pytest.raises(AssertionError, match=r"refused a pipelined method.*NOT_FOUND"):
        _run(refusal, 10)
