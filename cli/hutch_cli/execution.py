"""Runs a plan through an injected ``send`` and turns the answers into an Outcome, pure.

Why: the mapping from HTTP answers to rabbitmqctl's exit codes is the other half of the
translation, so it runs without sockets in tests. A status a step names (``on_status``) wins; any
other non-2xx answer fails with 69 and the broker's reason on one line (RabbitMQ's management API
HTML-escapes reasons and splits them over lines; both are undone here).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hutch_cli import exitcodes, plans, transport

Send = Callable[[plans.Request], transport.Response]


@dataclass(frozen=True)
class Outcome:
    code: int
    result: plans.Result | None = None
    error: str | None = None


def execute(plan: plans.Plan, send: Send) -> Outcome:
    bodies: list[Any] = []
    for step in plan.steps:
        try:
            response = send(step.resolve(bodies))
        except transport.UnreachableError as error:
            return Outcome(exitcodes.UNAVAILABLE, error=f"unable to reach the broker: {error}")
        except transport.RequestTimeoutError as error:
            return Outcome(exitcodes.TEMP_FAILURE, error=f"the broker did not answer: {error}")
        reading = step.on_status.get(response.status)
        if isinstance(reading, plans.Fail):
            return Outcome(reading.code, error=reading.message)
        if isinstance(reading, plans.Substitute):
            bodies.append(reading.body)
        elif 200 <= response.status < 300:
            bodies.append(response.body)
        else:
            return Outcome(exitcodes.UNAVAILABLE, error=refusal(response))
    rendered = plan.render(bodies)
    if isinstance(rendered, plans.Fail):
        return Outcome(rendered.code, error=rendered.message)
    return Outcome(exitcodes.OK, result=rendered)


def execute_waiting(
    plan: plans.Plan,
    send: Send,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    interval: float = 0.5,
) -> Outcome:
    """``execute`` again until the broker answers (await_startup) or ``wait_seconds`` pass."""
    deadline = clock() + (plan.wait_seconds or 0.0)
    while True:
        outcome = execute(plan, send)
        if (
            outcome.code not in (exitcodes.UNAVAILABLE, exitcodes.TEMP_FAILURE)
            or clock() >= deadline
        ):
            return outcome
        sleep(interval)


def refusal(response: transport.Response) -> str:
    """One line: the broker's reason for refusing a request."""
    reason = _reason(response.body)
    if response.status == 401:
        return f"authentication failed (HTTP 401): {reason}"
    if response.status == 403:
        return f"access refused (HTTP 403): {reason}"
    return reason or f"HTTP {response.status}"


def _reason(body: Any) -> str:
    found = body.get("reason", body.get("error", "")) if isinstance(body, dict) else body or ""
    if isinstance(found, list):
        found = ", ".join(str(part) for part in found)
    lines = [line.strip() for line in html.unescape(str(found)).splitlines() if line.strip()]
    if len(lines) > 1:
        return f"{lines[0]}: {'; '.join(lines[1:])}"
    return lines[0] if lines else ""
