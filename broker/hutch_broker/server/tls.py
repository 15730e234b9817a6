"""TLS server contexts for AMQPS and HTTPS, built before anything listens.

Why here and at start-up: a certificate that cannot be read, a key that does not belong to it or
a CA bundle that is not PEM would otherwise surface as a handshake failure on the first client,
long after the broker said it was up. ``server_context`` turns each of those into a
``TLSConfigError`` naming the config key and the file, which ``__main__`` prints as its one-line
refusal. The same checks build the context a renewed certificate is served with
(``tlsreload``): files that fail them there keep the previous context instead.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from hutch_broker.config import BrokerConfig, TLSOptions


class TLSConfigError(ValueError):
    """TLS settings that cannot serve: the message names the key and the file."""


def _readable(key: str, path: str) -> None:
    if not path:
        raise TLSConfigError(f"{key} is not set")
    file = Path(path)
    if not file.is_file():
        raise TLSConfigError(f"{key} {path}: no such file")
    try:
        file.read_bytes()
    except OSError as exc:
        raise TLSConfigError(f"{key} {path}: {exc.strerror or exc}") from exc


def server_context(options: TLSOptions, *, prefix: str) -> ssl.SSLContext:
    """A TLS 1.2+ server context from ``<prefix>.certfile/keyfile/cacertfile/verify``."""
    for name in ("certfile", "keyfile"):
        _readable(f"{prefix}.{name}", getattr(options, name))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(options.certfile, options.keyfile)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise TLSConfigError(
                f"{prefix}.keyfile {options.keyfile} is not the key of "
                f"{prefix}.certfile {options.certfile}"
            ) from exc
        raise TLSConfigError(
            f"{prefix}.certfile {options.certfile} / {prefix}.keyfile {options.keyfile}: "
            f"not a PEM certificate and key ({exc.reason or exc})"
        ) from exc
    if options.cacertfile:
        _readable(f"{prefix}.cacertfile", options.cacertfile)
        try:
            context.load_verify_locations(cafile=options.cacertfile)
        except ssl.SSLError as exc:
            raise TLSConfigError(
                f"{prefix}.cacertfile {options.cacertfile}: not a PEM CA bundle "
                f"({exc.reason or exc})"
            ) from exc
    if options.verify_peer:
        if not options.cacertfile:
            raise TLSConfigError(f"{prefix}.verify = verify_peer needs {prefix}.cacertfile")
        # RabbitMQ's verify_peer asks for a client certificate and checks one if sent;
        # fail_if_no_peer_cert makes it mandatory.
        context.verify_mode = (
            ssl.CERT_REQUIRED if options.fail_if_no_peer_cert else ssl.CERT_OPTIONAL
        )
    return context


def contexts(config: BrokerConfig) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(AMQPS context, HTTPS context); None where that listener is not configured."""
    # A vhost worker (server/workers.py) listens for no AMQP: the listener hands it connections.
    if config.amqp_port is None and config.ssl_port is None and not config.vhost_workers:
        raise TLSConfigError("listeners.tcp = none leaves no AMQP listener: set listeners.ssl")
    if config.http_port is None and config.management_ssl_port is None:
        raise TLSConfigError(
            "management.tcp = none leaves no management listener: set management.ssl.port"
        )
    amqps = None
    if config.ssl_port is not None:
        amqps = server_context(config.tls, prefix="ssl_options")
    https = None
    if config.management_ssl_port is not None:
        # As RabbitMQ 3.10.8: management.ssl.* names its own files (no ssl_options fallback;
        # 3.10.8 refuses the start with no_cert).
        https = server_context(config.management_tls, prefix="management.ssl")
    return amqps, https
