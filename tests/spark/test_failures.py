"""failures.py without a broker: which message for which error (the wire cases are in
test_connect_errors.py).

The exceptions are built the way pika 1.3 wraps them, as observed against both brokers:
SelectConnection reports ``AMQPConnectionWorkflowFailed`` around a phase error around the
cause, BlockingConnection raises the ssl error itself, and a refused socket comes inside an
``AMQPConnectionError``.
"""

import socket
import ssl

import pika.exceptions
import pytest
from hutch_demo import certs
from hutch_spark import connections, failures
from hutch_spark.failures import Endpoint
from pika.adapters.utils import connection_workflow as workflow

TLS = Endpoint("orders-broker.apps.svc", 5671, tls=True, ca_file="/etc/hutch-ca/ca.crt")
PLAIN = Endpoint("orders-broker.apps.svc", 5672)


def unverified(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(
        1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message} (_ssl.c:1006)"
    )
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    error.verify_code = code
    error.verify_message = message
    return error


def as_select_reports(cause: BaseException) -> BaseException:
    return workflow.AMQPConnectionWorkflowFailed([workflow.AMQPConnectorTransportSetupError(cause)])


def test_root_cause_unwraps_every_pika_wrapper():
    cause = ConnectionRefusedError(111, "Connection refused")
    wrapped = pika.exceptions.AMQPConnectionError(
        workflow.AMQPConnectionWorkflowFailed([workflow.AMQPConnectorSocketConnectError(cause)])
    )
    assert failures.root_cause(wrapped) is cause
    assert failures.root_cause(as_select_reports(cause)) is cause
    assert failures.root_cause(cause) is cause
    login = pika.exceptions.ProbableAuthenticationError("ACCESS_REFUSED - Login was refused")
    assert failures.root_cause(login) is login


@pytest.mark.parametrize("wrap", [as_select_reports, lambda error: error])
def test_a_wrong_ca_names_the_broker_the_ca_file_and_openssl_reason(wrap):
    error = wrap(unverified(20, "unable to get local issuer certificate"))
    assert failures.connect_failure(error, TLS) == (
        "the TLS certificate of the broker at orders-broker.apps.svc:5671 was not verified by "
        "the CA file '/etc/hutch-ca/ca.crt' (certificate verify failed: unable to get local "
        "issuer certificate; CERTIFICATE_VERIFY_FAILED): give the CA that issued it"
    )


def test_without_a_ca_file_the_system_trust_store_is_named():
    no_ca = Endpoint("broker", 5671, tls=True)
    message = failures.connect_failure(unverified(19, "self-signed certificate"), no_ca)
    assert "not verified by the system trust store (no caFile option, no HUTCH_AMQP_CA_FILE)" in (
        message
    )


def test_a_certificate_for_another_host_is_not_blamed_on_the_ca():
    error = unverified(62, "Hostname mismatch, certificate is not valid for 'broker'.")
    message = failures.connect_failure(as_select_reports(error), TLS)
    assert message.startswith(
        "the TLS certificate of the broker at orders-broker.apps.svc:5671 does not name host "
        "'orders-broker.apps.svc' (certificate verify failed: Hostname mismatch"
    )
    assert "CA file" not in message


def test_tls_to_a_plain_port_says_the_peer_does_not_speak_tls():
    error = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    error.reason = "WRONG_VERSION_NUMBER"
    assert failures.connect_failure(as_select_reports(error), TLS) == (
        "the TLS handshake with the broker at orders-broker.apps.svc:5671 failed: wrong version "
        "number (WRONG_VERSION_NUMBER); the peer does not speak TLS: is 5671 a plain amqp:// port?"
    )


def test_amqp_to_a_tls_port_suggests_amqps():
    lost = pika.exceptions.IncompatibleProtocolError(
        "StreamLostError: ('Transport indicated EOF',)"
    )
    assert failures.connect_failure(lost, PLAIN).endswith("if 5672 is a TLS port, use amqps://")
    assert "amqps" not in failures.connect_failure(lost, TLS)


def test_refused_unresolvable_timed_out_and_unknown():
    refused = pika.exceptions.AMQPConnectionError(
        workflow.AMQPConnectorSocketConnectError(ConnectionRefusedError(111, "refused"))
    )
    assert failures.connect_failure(refused, PLAIN) == (
        "the broker at orders-broker.apps.svc:5672 refused the connection (nothing listens "
        "there: check the uri's host and port, and that the broker is up)"
    )
    unknown = socket.gaierror(-2, "Name or service not known")
    assert failures.connect_failure(unknown, PLAIN) == (
        "cannot resolve the broker host 'orders-broker.apps.svc': Name or service not known"
    )
    assert failures.connect_failure(TimeoutError(), PLAIN) == (
        "timed out connecting to the broker at orders-broker.apps.svc:5672"
    )
    assert failures.connect_failure(RuntimeError("odd"), PLAIN) == (
        "cannot connect to the broker at orders-broker.apps.svc:5672: RuntimeError: odd"
    )


def test_a_refused_login_and_an_unverified_certificate_are_final_a_lost_broker_is_not():
    login = pika.exceptions.ProbableAuthenticationError("ACCESS_REFUSED - Login was refused")
    assert failures.is_final(login)
    assert "refused the login: ProbableAuthenticationError" in failures.connect_failure(
        login, PLAIN
    )
    # An untrusted issuer or another host's name: the same error on every retry.
    assert failures.is_final(as_select_reports(unverified(20, "unable to get local issuer")))
    assert failures.is_final(unverified(62, "Hostname mismatch"))
    # What a broker restart looks like: retried.
    refused = ConnectionRefusedError(111, "Connection refused")
    assert not failures.is_final(as_select_reports(refused))
    assert not failures.is_final(pika.exceptions.AMQPConnectionError(refused))
    assert not failures.is_final(as_select_reports(ConnectionResetError(104, "reset")))
    assert not failures.is_final(as_select_reports(ssl.SSLEOFError(8, "EOF in violation")))
    assert not failures.is_final(TimeoutError())


def test_the_endpoint_of_connection_parameters_keeps_the_ca_file(tmp_path):
    params = connections.parameters(
        "amqps://u:p@broker:5671/%2F", connection_name="t", ca_file=None
    )
    assert connections.endpoint(params) == Endpoint("broker", 5671, tls=True, ca_file=None)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(certs.Authority().pem)
    params = connections.parameters("amqps://broker/%2F", connection_name="t", ca_file=str(ca_file))
    assert connections.endpoint(params) == Endpoint("broker", 5671, tls=True, ca_file=str(ca_file))
    params = connections.parameters("amqp://broker/%2F", connection_name="t")
    assert connections.endpoint(params) == Endpoint("broker", 5672)


# Reply texts as hutch-broker and RabbitMQ 3.10.8 send them (test_connect_errors.py).
NO_READ = "ACCESS_REFUSED - access to queue 'orders' in vhost '/' refused for user 'spark'"
IN_USE = "ACCESS_REFUSED - queue 'orders' in vhost '/' in exclusive use"
LOCKED = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'orders' in vhost '/'. It "
    "could be originally declared on another connection or the exclusive property value does "
    "not match that of the original declaration."
)


@pytest.mark.parametrize("exclusive", [False, True])
def test_no_read_permission_points_to_the_permission_object_never_to_exclusivity(exclusive):
    message = failures.consume_refusal(403, NO_READ, queue="orders", exclusive=exclusive)
    assert message == (
        "hutch: user 'spark' lacks read permission on queue 'orders' in vhost '/' (403 "
        f"ACCESS_REFUSED: {NO_READ}); grant it with a Permission object whose spec.read "
        "matches the queue (docs/operator.md, Tenancy)"
    )


def test_exclusive_use_says_who_holds_the_queue():
    assert failures.consume_refusal(403, IN_USE, queue="orders", exclusive=False) == (
        "hutch: queue 'orders' is in exclusive use: another consumer holds it with "
        f"exclusive=true (403 ACCESS_REFUSED: {IN_USE})"
    )
    assert failures.consume_refusal(403, IN_USE, queue="orders", exclusive=True) == (
        "hutch: queue 'orders' is in exclusive use: we asked for exclusive=true and the queue "
        f"has another consumer (403 ACCESS_REFUSED: {IN_USE})"
    )


def test_another_403_gets_the_exclusive_hint_only_when_we_asked_for_exclusive():
    other = "ACCESS_REFUSED - something else"
    plain = failures.consume_refusal(403, other, queue="orders", exclusive=False)
    assert plain == (
        "hutch: the broker refused to let us consume queue 'orders' "
        "(403 ACCESS_REFUSED: ACCESS_REFUSED - something else)"
    )
    exclusive = failures.consume_refusal(403, other, queue="orders", exclusive=True)
    assert exclusive == f"{plain}; with exclusive=true, another consumer may hold it"


def test_404_and_405_are_final_other_closes_are_retried():
    assert failures.consume_refusal(404, "NOT_FOUND - no queue", queue="q", exclusive=False) == (
        "hutch: queue 'q' does not exist (404 NOT_FOUND: NOT_FOUND - no queue)"
    )
    assert failures.consume_refusal(405, LOCKED, queue="orders", exclusive=False) == (
        "hutch: queue 'orders' is an exclusive queue of another connection, which no other "
        f"connection may consume (405 RESOURCE_LOCKED: {LOCKED})"
    )
    assert failures.consume_refusal(320, "CONNECTION_FORCED", queue="q", exclusive=False) is None
    assert failures.consume_refusal(None, "closed", queue="q", exclusive=False) is None
