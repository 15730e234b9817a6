"""Helpers every handler uses: the caller, the body, and RabbitMQ's response forms.

PUT answers 201 (created, empty body) or 204 (updated), DELETE answers 204,
lists honour sorting, paging and ``?columns=``, single items honour
``?columns=`` (docs/contracts/broker.md#http-api).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from hutch_broker.admin import auth, bodies, errors, listing, paced
from hutch_broker.admin.state import STATE, USER, AdminState
from hutch_broker.model import access
from hutch_broker.model.vhosts import VirtualHost

log = logging.getLogger(__name__)
DEFAULT_EXCHANGE_PATH = "amq.default"
T = TypeVar("T")


def state(request: web.Request) -> AdminState:
    return request.app[STATE]


def user(request: web.Request) -> access.User:
    return request[USER]


def path(request: web.Request, name: str) -> str:
    return request.match_info[name]


def require_operator_policy_changes(request: web.Request) -> None:
    """``management.restrictions.operator_policy_changes.disabled``: PUT and DELETE of
    operator policies are not allowed methods (405), as RabbitMQ 3.11+ answers."""
    if state(request).operator_policy_changes_disabled:
        raise errors.method_not_allowed(request.method)


def vhost_to_read(request: web.Request) -> VirtualHost:
    """The ``{vhost}`` of the path, if it exists and the caller may see it (else 404/401)."""
    return auth.vhost_for_reading(state(request).broker, user(request), path(request, "vhost"))


def vhost_to_write(request: web.Request, *, creating: bool = False) -> VirtualHost:
    """The ``{vhost}`` of the path, if the caller may change things in it (``creating``: see
    auth.vhost_for_writing)."""
    return auth.vhost_for_writing(
        state(request).broker, user(request), path(request, "vhost"), creating=creating
    )


def exchange_path(request: web.Request, name: str) -> str:
    """The default exchange is ``amq.default`` in URLs and ``""`` in the model."""
    value = request.match_info[name]
    return "" if value == DEFAULT_EXCHANGE_PATH else value


async def body(request: web.Request) -> bodies.Body:
    return bodies.parse_json(await request.read())


async def body_value(request: web.Request) -> Any:
    """The ``value`` of a parameter or limit body; RabbitMQ's 400 when it is missing."""
    parsed = await body(request)
    if "value" not in parsed:
        raise errors.bad_request("[{key_missing,value}]")
    return parsed["value"]


def json_response(data: Any, *, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(data, separators=(",", ":")),
        content_type="application/json",
        headers={"Cache-Control": "no-cache"},
    )


def created_or_updated(created: bool) -> web.Response:
    return web.Response(status=201 if created else 204)


def no_content() -> web.Response:
    return web.Response(status=204)


def list_response(
    request: web.Request,
    items: Sequence[dict[str, Any]],
    default_sort: Sequence[str] = listing.DEFAULT_SORT,
) -> web.Response:
    query = listing.parse_query(request.query)
    return json_response(listing.render_list(items, query, default_sort))


SEND_CHUNK = 256 * 1024  # a big body is written in pieces, each waiting for the client to drain


@dataclass(frozen=True, slots=True)
class PacedWork:
    pacer: paced.Pacer
    admission: paced.Admission


@contextlib.asynccontextmanager
async def paced_work(request: web.Request) -> AsyncIterator[PacedWork]:
    """A slot behind the listing gate (overall and per user) and a fresh time budget."""
    async with state(request).listings.admit(user(request).name) as admission:
        yield PacedWork(paced.Pacer(), admission)


async def paced_list_response(
    request: web.Request,
    objects: Sequence[T],
    render: Callable[[T], dict[str, Any]],
    default_sort: Sequence[str] = listing.DEFAULT_SORT,
    fields: paced.Fields | None = None,
) -> web.StreamResponse:
    """A list that grows with the broker: ``render`` is applied per object in slices that yield
    to the loop (``paced``), behind the listing gate. ``objects`` is a snapshot (a list).
    ``fields``: the item keys readable from the objects, so that a page renders only itself."""
    async with paced_work(request) as work:
        return await paced_list(request, work, objects, render, default_sort, fields=fields)


async def paced_list(
    request: web.Request,
    work: PacedWork,
    objects: Sequence[T],
    render: Callable[[T], dict[str, Any]],
    default_sort: Sequence[str] = listing.DEFAULT_SORT,
    *,
    fields: paced.Fields | None = None,
) -> web.StreamResponse:
    query = listing.parse_query(request.query)
    pacer = work.pacer
    body = await paced.render_list(
        objects, render, query, default_sort=default_sort, pacer=pacer, fields=fields
    )
    work.admission.done_working()
    return await send_json(request, body)


async def paced_json_response(request: web.Request, data: Any) -> web.StreamResponse:
    """A large document (a definitions export) encoded in slices, behind the listing gate."""
    async with paced_work(request) as work:
        body = await paced.encode(data, work.pacer)
        work.admission.done_working()
        return await send_json(request, body)


async def send_json(request: web.Request, body: bytes) -> web.StreamResponse:
    """Sent from the handler, still holding the user's listing slot, in pieces that wait for
    the client to read: one user's unread listings cost one body, however many it asks for.
    A client that reads nothing for ``send_stall_s`` is disconnected, which frees the slot."""
    headers = {"Cache-Control": "no-cache", "Content-Type": "application/json; charset=utf-8"}
    return await send_body(request, body, headers)


async def send_body(
    request: web.Request, body: bytes, headers: dict[str, str]
) -> web.StreamResponse:
    """``body`` in pieces that wait for the client to drain (``send_json``)."""
    if request.method == "HEAD":  # aiohttp leaves the body out of a Response, not of a stream
        return web.Response(body=body, headers=headers)
    response = web.StreamResponse(headers=headers)
    response.content_length = len(body)
    try:
        async with asyncio.timeout(state(request).send_stall_s) as deadline:
            await response.prepare(request)
            view = memoryview(body)
            for start in range(0, len(body), SEND_CHUNK):
                deadline.reschedule(asyncio.get_running_loop().time() + state(request).send_stall_s)
                await response.write(view[start : start + SEND_CHUNK])
            await response.write_eof()
    except ConnectionResetError:
        pass  # the client left; aiohttp closes the connection
    except TimeoutError:
        log.warning(
            "stopped sending a listing to %s: it read nothing for %.1f s",
            request.remote,
            state(request).send_stall_s,
        )
        if request.transport is not None:
            request.transport.abort()
    return response


def item_response(request: web.Request, item: dict[str, Any]) -> web.Response:
    query = listing.parse_query(request.query)
    return json_response(listing.render_item(item, query))
