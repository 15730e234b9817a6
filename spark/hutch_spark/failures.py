"""What the source and the sink say when the broker cannot be used: pure, no I/O.

Why a module of its own: pika reports a failed connect as wrappers, an
``AMQPConnectionWorkflowFailed`` around an ``AMQPConnectorTransportSetupError`` around the
``ssl.SSLCertVerificationError``, whose text is empty or names only the wrapper, and Spark shows
that inside its own exception. The streaming consumer, the batch reader and the sink all connect;
each hands its error to `connect_failure`, so a wrong CA reads the same everywhere. A channel
closed by the broker is explained by `consume_refusal`, from the reply codes and texts that
hutch-broker and RabbitMQ 3.10.8 both send (observed, tests/spark/test_connect_errors.py):

- 403 "queue 'q' in vhost '/' in exclusive use": an exclusive consumer holds the queue, or our
  exclusive consume met a queue that has consumers;
- 403 "access to queue 'q' in vhost '/' refused for user 'u'": no read permission, whether the
  consume was exclusive or not;
- 405 RESOURCE_LOCKED "cannot obtain exclusive access to locked queue ...": an exclusive queue
  of another connection.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass

import pika.exceptions
from pika.adapters.utils import connection_workflow

_NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
_PERMISSION = re.compile(
    r"access to queue '(?P<queue>.*)' in vhost '(?P<vhost>.*)' refused for user '(?P<user>.*)'"
)
_EXCLUSIVE_USE = ("in exclusive use", "exclusive access")
_LOGIN_ERRORS = (
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.AuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a connection went: enough to say which broker and which trust failed."""

    host: str
    port: int
    tls: bool = False
    ca_file: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def root_cause(error: BaseException) -> BaseException:
    """The error under pika's connect wrappers (the last attempt's, as pika itself reports)."""
    for _ in range(8):  # the wrappers nest at most three deep; a bound guards against cycles
        if isinstance(error, connection_workflow.AMQPConnectionWorkflowFailed) and error.exceptions:
            error = error.exceptions[-1]
        elif isinstance(error, connection_workflow.AMQPConnectorPhaseErrorBase):
            error = error.exception
        elif isinstance(error, pika.exceptions.AMQPConnectionError) and _wrapped(error):
            error = error.args[0]
        else:
            break
    return error


def _wrapped(error: BaseException) -> bool:
    return len(error.args) == 1 and isinstance(error.args[0], BaseException)


def connect_failure(error: BaseException, endpoint: Endpoint) -> str:
    """One sentence on why connecting to `endpoint` failed, naming it and the cause."""
    cause = root_cause(error)
    where = endpoint.address
    if isinstance(cause, ssl.SSLCertVerificationError):
        return _unverified(cause, endpoint)
    if isinstance(cause, ssl.SSLError):
        hint = ""
        if cause.reason == "WRONG_VERSION_NUMBER":
            hint = f"; the peer does not speak TLS: is {endpoint.port} a plain amqp:// port?"
        return f"the TLS handshake with the broker at {where} failed: {_ssl_text(cause)}{hint}"
    if isinstance(cause, ConnectionRefusedError):
        return (
            f"the broker at {where} refused the connection (nothing listens there: "
            "check the uri's host and port, and that the broker is up)"
        )
    if isinstance(cause, socket.gaierror):
        return f"cannot resolve the broker host {endpoint.host!r}: {cause.strerror or cause}"
    if isinstance(cause, TimeoutError):
        return f"timed out connecting to the broker at {where}"
    if isinstance(cause, pika.exceptions.IncompatibleProtocolError):
        hint = "" if endpoint.tls else f"; if {endpoint.port} is a TLS port, use amqps://"
        return f"the broker at {where} did not answer the AMQP protocol header ({cause}){hint}"
    if isinstance(cause, _LOGIN_ERRORS):
        return f"the broker at {where} refused the login: {type(cause).__name__}: {cause}"
    return f"cannot connect to the broker at {where}: {type(cause).__name__}: {cause}"


def is_final(error: BaseException) -> bool:
    """True when retrying the connect cannot help: the broker refused the credentials, or its
    TLS certificate failed verification (an untrusted issuer or another host's name: the
    certificate or the trust must change first). Refused connections, resets and timeouts,
    what a broker restart looks like, stay retryable."""
    return isinstance(root_cause(error), (*_LOGIN_ERRORS, ssl.SSLCertVerificationError))


def _unverified(cause: ssl.SSLCertVerificationError, endpoint: Endpoint) -> str:
    reason = f"certificate verify failed: {str(cause.verify_message).rstrip('.')}"
    if cause.verify_code in _NAME_MISMATCH:
        return (
            f"the TLS certificate of the broker at {endpoint.address} does not name host "
            f"{endpoint.host!r} ({reason}): connect with a host name the certificate lists"
        )
    trust = (
        f"the CA file {endpoint.ca_file!r}"
        if endpoint.ca_file
        else "the system trust store (no caFile option, no HUTCH_AMQP_CA_FILE)"
    )
    return (
        f"the TLS certificate of the broker at {endpoint.address} was not verified by "
        f"{trust} ({reason}; CERTIFICATE_VERIFY_FAILED): give the CA that issued it"
    )


def _ssl_text(cause: ssl.SSLError) -> str:
    """OpenSSL's words without Python's "[SSL: X] ... (_ssl.c:1006)" framing, X kept."""
    text = str(cause.args[1]) if len(cause.args) > 1 else str(cause)
    text = re.sub(r"^\[SSL: [A-Z_]+\] ", "", text)
    text = re.sub(r" \(_ssl\.c:\d+\)$", "", text)
    return f"{text} ({cause.reason})" if cause.reason else text


def consume_refusal(code: int | None, text: str, *, queue: str, exclusive: bool) -> str | None:
    """Why the broker closed our channel for good, or None when retrying may help."""
    if code == 404:
        return f"hutch: queue {queue!r} does not exist (404 NOT_FOUND: {text})"
    if code == 405:
        return (
            f"hutch: queue {queue!r} is an exclusive queue of another connection, which no "
            f"other connection may consume (405 RESOURCE_LOCKED: {text})"
        )
    if code != 403:
        return None
    refused = f"(403 ACCESS_REFUSED: {text})"
    permission = _PERMISSION.search(text)
    if permission is not None:
        return (
            f"hutch: user {permission['user']!r} lacks read permission on queue {queue!r} in "
            f"vhost {permission['vhost']!r} {refused}; grant it with a Permission object whose "
            "spec.read matches the queue (docs/operator.md, Tenancy)"
        )
    if any(marker in text for marker in _EXCLUSIVE_USE):
        holder = (
            "we asked for exclusive=true and the queue has another consumer"
            if exclusive
            else "another consumer holds it with exclusive=true"
        )
        return f"hutch: queue {queue!r} is in exclusive use: {holder} {refused}"
    hint = "; with exclusive=true, another consumer may hold it" if exclusive else ""
    return f"hutch: the broker refused to let us consume queue {queue!r} {refused}{hint}"
