"""AMQP connection parameters for the source, the batch reader and the sink.

Why here and not in options.py: credentials must be read in the process that connects (the
driver's streaming runner, or an executor for batch reads and the sink), from the environment
that Kubernetes fills from a Secret (`spark.kubernetes.driver.secretKeyRef.*`). They are never
part of the options Spark pickles into plans and prints in `explain()`.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

import pika

from hutch_spark.failures import Endpoint

USERNAME_ENV = "HUTCH_AMQP_USERNAME"
PASSWORD_ENV = "HUTCH_AMQP_PASSWORD"  # noqa: S105 - the name of a variable, not a secret


def parameters(
    uri: str,
    *,
    connection_name: str,
    heartbeat_s: int = 30,
    env: Mapping[str, str] | None = None,
    ca_file: str | None = None,
) -> pika.URLParameters:
    """pika parameters for `uri`; credentials from the URI, else from the environment.

    For ``amqps://`` the broker's certificate is verified, chain and host name, against
    ``ca_file`` (the ``caFile`` option) or the system trust store: pika's own default context
    has no server name and so cannot check the host.
    """
    environment = os.environ if env is None else env
    params = pika.URLParameters(uri)
    if params.ssl_options is not None:
        context = ssl.create_default_context(cafile=ca_file)
        params.ssl_options = _TLSOptions(context, params.host, ca_file)
    if urlsplit(uri).username is None and USERNAME_ENV in environment:
        params.credentials = pika.PlainCredentials(
            environment[USERNAME_ENV], environment.get(PASSWORD_ENV, "")
        )
    params.heartbeat = heartbeat_s
    params.blocked_connection_timeout = 300
    params.connection_attempts = 1
    params.client_properties = {"connection_name": connection_name, "product": "hutch-spark"}
    return params


class _TLSOptions(pika.SSLOptions):  # type: ignore[misc]  # pika: Any to mypy
    """pika's TLS options plus the CA file's path: an SSLContext does not keep it, and a
    failed verification should name it (failures.py)."""

    __slots__ = ("ca_file",)

    def __init__(self, context: ssl.SSLContext, server_hostname: str, ca_file: str | None) -> None:
        super().__init__(context, server_hostname=server_hostname)
        self.ca_file = ca_file


def endpoint(params: pika.ConnectionParameters) -> Endpoint:
    """Where `params` connect, and with which trust, for error messages."""
    tls = params.ssl_options
    return Endpoint(
        host=params.host,
        port=params.port,
        tls=tls is not None,
        ca_file=getattr(tls, "ca_file", None),
    )
