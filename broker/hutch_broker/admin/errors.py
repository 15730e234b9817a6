"""HTTP errors of the management API and their RabbitMQ-compatible JSON bodies.

Every refusal leaves the API as ``{"error": ..., "reason": ...}`` with the
status RabbitMQ uses, because clients (the Hutch operator among them) branch
on the status and show the reason verbatim.  Handlers raise ``ApiError``;
model refusals arrive as AMQP errors and are translated once, here, the way
RabbitMQ's management plugin translates channel errors: 404-coded errors are
"Object Not Found", access refusals are 401, everything else is a 400 whose
reason is the AMQP text without its ``NAME - `` prefix.
"""

from __future__ import annotations

from typing import Any, Final

from hutch_broker.protocol import errors as amqp_errors

NOT_FOUND_BODY: Final = {"error": "Object Not Found", "reason": "Not Found"}
_UNAUTHORISED_CODES: Final = (403, 530)


class ApiError(Exception):
    """A refusal with its HTTP status and JSON body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("reason", ""))
        self.status = status
        self.body = body


def bad_request(reason: str) -> ApiError:
    return ApiError(400, {"error": "bad_request", "reason": reason})


def not_found() -> ApiError:
    return ApiError(404, dict(NOT_FOUND_BODY))


def vhost_not_found() -> ApiError:
    """What RabbitMQ answers a write that would create something in a missing vhost (PUT of a
    queue, exchange, policy, parameter or limit, POST of a binding); reads answer ``not_found``."""
    return ApiError(404, {"error": "not_found", "reason": "vhost_not_found"})


def not_authorized(reason: str = "Not_Authorized") -> ApiError:
    return ApiError(401, {"error": "not_authorized", "reason": reason})


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, {"error": "Method Not Allowed", "reason": f"{method} not allowed"})


def service_unavailable(reason: str) -> ApiError:
    return ApiError(503, {"error": "service_unavailable", "reason": reason})


def validation_failed(detail: str) -> ApiError:
    """POL-8: the policy validation body RabbitMQ sends."""
    return bad_request(f"Validation failed\n\n{detail}\n")


def detail_of(exc: amqp_errors.AMQPError) -> str:
    """``PRECONDITION_FAILED - inequivalent arg ...`` -> ``inequivalent arg ...``."""
    name, separator, detail = exc.reply_text.partition(" - ")
    return detail if separator and name.isupper() else exc.reply_text


def from_amqp(exc: amqp_errors.AMQPError) -> ApiError:
    if exc.reply_code == 404:
        return not_found()
    if exc.reply_code in _UNAUTHORISED_CODES:
        return not_authorized(detail_of(exc))
    return bad_request(detail_of(exc))
