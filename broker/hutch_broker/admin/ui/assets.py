"""Serving the UI's files: ``/`` is the page, ``/ui/<file>`` its scripts and styles.

The files are package data (``static/``), read once when the app is made and served from
memory: a few tens of KiB, no disk access per request, and no path from a URL ever reaches the
file system (a name is looked up in a dict). They are open to anybody, as RabbitMQ's are: they
hold no data; everything the page shows comes from the authenticated API.

Every answer carries a Content-Security-Policy that allows scripts and styles from this origin
only and no inline script, so even a name that slipped past the page's escaping could not run
(the page never builds HTML from strings: ``static/js/dom.js``). ``frame-ancestors 'none'``
keeps other sites from framing the UI to trick clicks on its buttons.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from typing import Final

from aiohttp import web

PAGE: Final = "index.html"
PREFIX: Final = "/ui/"
CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

Asset = tuple[bytes, str]  # body, content type


def load(root: Traversable | None = None) -> dict[str, Asset]:
    """Every file under ``static/`` by its relative path (``js/app.js``)."""
    base = root if root is not None else resources.files(__package__) / "static"
    assets: dict[str, Asset] = {}
    pending: list[tuple[str, Traversable]] = [("", base)]
    while pending:
        prefix, folder = pending.pop()
        for entry in folder.iterdir():
            name = prefix + entry.name
            if entry.is_dir():
                pending.append((name + "/", entry))
                continue
            suffix = name[name.rfind(".") :]
            if suffix in CONTENT_TYPES:
                assets[name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return assets


def respond(asset: Asset) -> web.Response:
    body, content_type = asset
    response = web.Response(body=body, headers=SECURITY_HEADERS)
    response.headers["Content-Type"] = content_type
    return response


def add_routes(app: web.Application) -> None:
    """``GET /`` and ``GET /ui/{name}``; an unknown name is the API's JSON 404."""
    assets = load()

    async def page(_request: web.Request) -> web.Response:
        return respond(assets[PAGE])

    async def asset(request: web.Request) -> web.Response:
        found = assets.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound
        return respond(found)

    app.router.add_get("/", page)
    app.router.add_get(PREFIX + "{name:.+}", asset)
