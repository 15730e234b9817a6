"""A renewed certificate served to new TLS connections without a restart.

Why: certificates are short-lived (cert-manager renews them every few weeks) and a restart to
pick one up drops every connection and leaves a one-replica broker without AMQPS for seconds.
The files a Kubernetes Secret volume mounts change by an atomic swap of a ``..data`` symlink,
so reading them again is enough.

How: each TLS listener is created once with a *listening* context whose ``sni_callback`` hands
every new handshake the context loaded last (``ssl_object.context = ...``, the documented way
to switch contexts per handshake; asyncio and uvloop both call it, with or without a server
name). That swaps certificate, key and CA bundle; the verify mode stays the listening
context's, which is right since the config that sets it is not reloaded. Connections already
made keep the context they were handshaken with.

``Reloader.check`` runs off the event loop, from a timer: it hashes the configured files and,
when the content changed, builds a new context with ``tls.server_context`` (the checks the
start-up makes). A pair that does not serve (half-written, unreadable, key not the
certificate's) keeps the current context and logs one ERROR line; the next change is tried
again. A context built while the files changed once more is not used: the next check sees that
change and loads it.

Every check, changed or not, counts in ``Reloader.checks`` and logs one DEBUG line with that
count: a promise about what a check does *not* do (say why again, load again) can only be
proved by waiting for checks to happen, and the count is what a test waits for.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from pathlib import Path
from typing import Any

from hutch_broker.config import BrokerConfig, TLSOptions
from hutch_broker.server import tls
from hutch_broker.server.tlsinfo import distinguished_name

log = logging.getLogger(__name__)

# Seconds between two looks at the files: three small reads and a hash, off the event loop.
CHECK_INTERVAL_S = 2.0


def fingerprint(options: TLSOptions) -> bytes:
    """A digest of the configured files' content; a file that cannot be read counts as such."""
    digest = hashlib.sha256()
    for path in (options.certfile, options.keyfile, options.cacertfile):
        digest.update(path.encode() + b"\0")
        if not path:
            continue
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            data = f"unreadable: {exc}".encode()
        digest.update(hashlib.sha256(data).digest())
    return digest.digest()


def describe_certificate(certfile: str) -> str:
    """``subject CN=..., serial ..., notAfter ...`` of the first certificate in ``certfile``."""
    try:
        # The ssl module's own PEM decoder (what getpeercert() returns, for a file).
        decoded: dict[str, Any] = ssl._ssl._test_decode_cert(certfile)  # type: ignore[attr-defined]
    except (OSError, ssl.SSLError, AttributeError) as exc:
        return f"(certificate not decoded: {exc})"
    subject = distinguished_name(decoded.get("subject"))
    return (
        f"subject {subject}, serial {decoded.get('serialNumber')}, "
        f"notAfter {decoded.get('notAfter')}"
    )


class Reloader:
    """One TLS listener's contexts: ``listening`` creates the server, ``current`` serves."""

    def __init__(self, options: TLSOptions, *, prefix: str, label: str) -> None:
        self.options = options
        self.prefix = prefix
        self.label = label
        # The digest first: a change while the context is built is seen at the first check.
        self._seen = fingerprint(options)
        self.listening = tls.server_context(options, prefix=prefix)
        self.current = self.listening
        self.listening.sni_callback = self._handshake
        self.reloads = 0
        self.failures = 0
        self.checks = 0  # completed checks, whatever they found

    def _handshake(self, ssl_object: ssl.SSLObject, _name: str | None, _ctx: object) -> None:
        current = self.current
        if current is not ssl_object.context:
            ssl_object.context = current

    def check(self) -> bool:
        """Load the files again if their content changed; True when a new context serves."""
        try:
            return self._check()
        finally:
            self.checks += 1
            log.debug("%s: certificate files checked: %d", self.label, self.checks)

    def _check(self) -> bool:
        seen = fingerprint(self.options)
        if seen == self._seen:
            return False
        self._seen = seen  # tried once per change: a bad pair is not retried until the next
        try:
            context = tls.server_context(self.options, prefix=self.prefix)
        except tls.TLSConfigError as exc:
            self.failures += 1
            log.error(
                "%s: certificate not reloaded, still serving the previous one: %s",
                self.label,
                exc,
            )
            return False
        if fingerprint(self.options) != seen:
            self._seen = b""  # changed while loading: load the newest at the next check
            return False
        self.current = context
        self.reloads += 1
        log.info(
            "%s: certificate reloaded from %s for new connections: %s",
            self.label,
            self.options.certfile,
            describe_certificate(self.options.certfile),
        )
        return True


def listening(reloader: Reloader | None) -> ssl.SSLContext | None:
    """The context to create a listener with (None: plain)."""
    return reloader.listening if reloader is not None else None


def reloaders(config: BrokerConfig) -> tuple[Reloader | None, Reloader | None]:
    """(AMQPS, HTTPS) reloaders; None where that listener is not configured.

    ``tls.contexts`` makes the start-up checks and refuses bad files with their key's name.
    """
    tls.contexts(config)
    amqps = None
    if config.ssl_port is not None:
        amqps = Reloader(config.tls, prefix="ssl_options", label="AMQPS")
    https = None
    if config.management_ssl_port is not None:
        https = Reloader(config.management_tls, prefix="management.ssl", label="HTTPS")
    return amqps, https
