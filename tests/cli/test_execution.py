"""HTTP answers -> exit codes and one-line errors, with a fake ``send`` (no sockets)."""

from hutch_cli import execution, plans, transport
from hutch_cli.plans import Fail, Request, Step, Substitute


def replying(*responses):
    sent = []
    queue = list(responses)

    def send(request):
        sent.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return send, sent


def table(bodies):
    return plans.Table(("n",), tuple((item["n"],) for item in bodies[-1]))


def test_named_statuses_win_and_later_steps_are_not_sent():
    plan = plans.Plan(
        ("banner",),
        (
            Step(
                Request("GET", "/api/vhosts/v"), {404: Fail(65, "Virtual host 'v' does not exist")}
            ),
            Step(Request("PUT", "/api/policies/v/p", {})),
        ),
    )
    send, sent = replying(transport.Response(404, {"error": "Object Not Found"}))
    outcome = execution.execute(plan, send)
    assert outcome == execution.Outcome(65, error="Virtual host 'v' does not exist")
    assert len(sent) == 1


def test_a_substituted_status_is_a_success_with_that_body():
    plan = plans.Plan((), (Step(Request("GET", "/api/queues/v"), {404: Substitute([])}),), table)
    send, _ = replying(transport.Response(404, None))
    assert execution.execute(plan, send) == execution.Outcome(0, result=plans.Table(("n",), ()))


def test_a_later_request_is_built_from_earlier_bodies():
    plan = plans.Plan(
        (),
        (
            Step(Request("GET", "/api/users/u")),
            Step(lambda bodies: Request("PUT", "/api/users/u", {"tags": bodies[0]["tags"]})),
        ),
    )
    send, sent = replying(transport.Response(200, {"tags": "a"}), transport.Response(204, None))
    assert execution.execute(plan, send).code == 0
    assert sent[1].body == {"tags": "a"}


def test_other_refusals_are_69_with_the_reason_on_one_unescaped_line():
    plan = plans.Plan((), (Step(Request("PUT", "/api/policies/%2F/p", {})),))
    reason = 'Validation failed\n\n[{&lt;&lt;"x"&gt;&gt;,1}] are not recognised policy settings\n'
    send, _ = replying(transport.Response(400, {"error": "bad_request", "reason": reason}))
    assert execution.execute(plan, send) == execution.Outcome(
        69, error='Validation failed: [{<<"x">>,1}] are not recognised policy settings'
    )


def test_list_reasons_and_bad_credentials():
    assert execution.refusal(transport.Response(400, {"reason": ["no_such_user", "u"]})) == (
        "no_such_user, u"
    )
    assert execution.refusal(transport.Response(401, {"reason": "Not_Authorized"})) == (
        "authentication failed (HTTP 401): Not_Authorized"
    )


def test_unreachable_is_69_and_a_timeout_75():
    plan = plans.Plan((), (Step(Request("GET", "/api/overview")),))
    send, _ = replying(transport.UnreachableError("http://h:1: [Errno 111] Connection refused"))
    assert execution.execute(plan, send) == execution.Outcome(
        69, error="unable to reach the broker: http://h:1: [Errno 111] Connection refused"
    )
    send, _ = replying(transport.RequestTimeoutError("no answer within 1.0 s"))
    assert execution.execute(plan, send).code == 75


def test_waiting_retries_until_the_broker_answers_or_time_is_up():
    plan = plans.Plan((), (Step(Request("GET", "/api/overview")),), wait_seconds=2.0)
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    down = transport.UnreachableError("refused")
    send, sent = replying(down, down, transport.Response(200, {}))
    outcome = execution.execute_waiting(plan, send, clock=lambda: now[0], sleep=sleep)
    assert (outcome.code, len(sent), now[0]) == (0, 3, 1.0)

    send, sent = replying(*[down] * 10)
    outcome = execution.execute_waiting(plan, send, clock=lambda: now[0], sleep=sleep)
    assert outcome.code == 69
    assert len(sent) == 5  # at t = 1.0, 1.5, 2.0, 2.5 and 3.0 (the deadline)
