"""Refusing API writes a browser sends on behalf of another site (CSRF).

Why: the UI never uses cookies, but a browser that once answered a native Basic prompt for the
management port attaches those credentials to every request to it, including a form another
site posts there (``enctype="text/plain"`` carries a JSON body, and the API reads a body
whatever its Content-Type, as RabbitMQ's publish endpoint does). Browsers say where such a
request comes from: ``Sec-Fetch-Site`` (every current browser; a page's script cannot set it)
and ``Origin`` (every POST, PUT and DELETE from a page). A write whose ``Sec-Fetch-Site`` is
``cross-site`` or ``same-site`` is refused before authentication; ``same-origin`` and ``none``
(typed by the user) pass, even behind a proxy that rewrites ``Host``. Only when a browser sends
no ``Sec-Fetch-Site`` does ``Origin`` decide: it must name the host the request was sent to.
Programs (hutchctl, the operator, curl, rabbitmqadmin) send neither header and are not
affected; reads are never refused, since a cross-site page cannot read the answer.

Pure: the handler glue lives in ``app``.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
FOREIGN_FETCH_SITES: Final = frozenset({"cross-site", "same-site"})


def origin_host(origin: str) -> str | None:
    """``http://h:15672`` -> ``h:15672``; None for ``null`` or anything that is no origin."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc.lower()


def same_host(origin_netloc: str, host: str, scheme: str) -> bool:
    """True if the origin's ``host[:port]`` names the request's ``Host``; default ports count."""
    default = ":443" if scheme == "https" else ":80"
    return origin_netloc.removesuffix(default) == host.lower().removesuffix(default)


def refusal(
    *, method: str, origin: str | None, fetch_site: str | None, host: str, scheme: str
) -> str | None:
    """Why this request is refused as cross-site, or None to let it through."""
    if method.upper() in SAFE_METHODS:
        return None
    if fetch_site is not None:
        if fetch_site.strip().lower() in FOREIGN_FETCH_SITES:
            return f"cross-site request refused (Sec-Fetch-Site: {fetch_site.strip()})"
        return None
    if origin is None:
        return None
    netloc = origin_host(origin)
    if netloc is None or not same_host(netloc, host, scheme):
        return "cross-origin request refused (Origin does not match Host)"
    return None
