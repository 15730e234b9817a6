"""Where the broker is and who we are: options, then environment, then defaults, pure.

Why apart: the precedence is a contract users script against. The URL comes from --url, else
HUTCH_URL, else http://localhost:15672 (the management port a port-forward usually maps). The
user and password come from --username/--password, else HUTCH_USERNAME/HUTCH_PASSWORD, else a
credentials file (--credentials-file or HUTCH_CREDENTIALS_FILE: ``username=...`` and
``password=...`` lines, so a password never has to be on the command line), else guest/guest.
--cacert (or HUTCH_CACERT) is the CA bundle for https; HUTCH_SERVER_NAME, when set, is the name
the broker's certificate is verified for instead of the URL's host (``kubectl hutch ctl`` sets it
for its port-forward on localhost).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hutch_cli import exitcodes, plans
from hutch_cli.arguments import Invocation
from hutch_cli.client import Endpoint

DEFAULT_URL = "http://localhost:15672"


def endpoint(
    invocation: Invocation, env: Mapping[str, str], read_text: Callable[[str], str]
) -> Endpoint | plans.Fail:
    url = invocation.value("url") or env.get("HUTCH_URL") or DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        return plans.Fail(exitcodes.USAGE, f"--url must be an http:// or https:// URL, not {url!r}")
    from_file: dict[str, str] = {}
    path = invocation.value("credentials-file") or env.get("HUTCH_CREDENTIALS_FILE")
    if path:
        try:
            from_file = credentials(read_text(path))
        except OSError as error:
            return plans.Fail(
                exitcodes.DATA_ERROR, f"cannot read credentials file {path}: {error.strerror}"
            )
    timeout_text = invocation.value("timeout") if invocation.verb != "await_startup" else None
    try:
        timeout = float(timeout_text) if timeout_text else 60.0
    except ValueError:
        return plans.Fail(
            exitcodes.USAGE, f"--timeout must be a number of seconds, not {timeout_text!r}"
        )
    return Endpoint(
        url=url.rstrip("/"),
        username=_pick(
            invocation.value("username"), env.get("HUTCH_USERNAME"), from_file.get("username")
        ),
        password=_pick(
            invocation.value("password"), env.get("HUTCH_PASSWORD"), from_file.get("password")
        ),
        cacert=invocation.value("cacert") or env.get("HUTCH_CACERT") or None,
        timeout=timeout,
        server_name=env.get("HUTCH_SERVER_NAME") or None,
    )


def credentials(text: str) -> dict[str, str]:
    """``username=...`` and ``password=...`` lines (blank lines and ``#`` comments skipped)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            found[key.strip()] = value.rstrip("\r\n")
    return found


def _pick(*candidates: str | None) -> str:
    return next((c for c in candidates if c), "guest")
