"""Issue 16, TLS on the real node: the Broker's Pod serves the certificate from its Secret.

Why a real Pod: on the apiserver tier nothing mounts the Secret. Here the kubelet does (mode
0440, group fsGroup, under a read-only root filesystem, beside the ConfigMap), the container
must start with only its TLS listeners (its probes on 5671/15671), and a renewed Secret must
roll the Pod into one that serves the new certificate. The certificate names the Service
(``<b>.<ns>.svc``); the test connects to the Pod IP with that name as the TLS server name and
compares the certificate the broker presented with the Secret's.
"""

from __future__ import annotations

import socket
from typing import Any

import pika
import pytest
from cryptography import x509
from hutch_testing import brokerpods, certs
from hutch_testing.tlsbrokers import client_context

pytestmark = pytest.mark.timeout(600)

NAME = "secure"


def put_tls_secret(plane: Any, namespace: str, leaf: certs.Leaf, *, create: bool) -> None:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": f"{NAME}-tls"},
        "data": leaf.secret_data(),
    }
    if not create:
        path += f"/{NAME}-tls"
        body["metadata"] = plane.api("GET", path)[1]["metadata"]
    status, reply = plane.api("POST" if create else "PUT", path, body)
    assert status in (200, 201), reply


def served_serial(pod: brokerpods.BrokerPod, authority: certs.Authority, server_name: str) -> int:
    """AMQPS on the Pod IP with pika (chain and name verified), then the served serial."""
    context = client_context(authority.pem)
    params = pika.ConnectionParameters(
        host=pod.pod_ip,
        port=5671,
        credentials=pika.PlainCredentials(pod.user, pod.password),
        ssl_options=pika.SSLOptions(context, server_hostname=server_name),
        connection_attempts=20,
        retry_delay=1,
    )
    connection = pika.BlockingConnection(params)
    assert connection.channel().queue_declare("tls.node").method.queue == "tls.node"
    connection.close()
    with (
        socket.create_connection((pod.pod_ip, 5671), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as sock,
    ):
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def serial_of(leaf: certs.Leaf) -> int:
    return x509.load_pem_x509_certificate(leaf.cert_pem).serial_number


def test_the_pod_serves_its_secret_and_a_renewal_rolls_it(node_operator: Any, kit: Any) -> None:
    running = node_operator
    kube = kit.Kube(running, running.create_namespace())
    host = f"{NAME}.{kube.namespace}.svc"
    authority = certs.Authority()
    first = authority.issue(host, hosts=(host,))
    put_tls_secret(running, kube.namespace, first, create=True)
    spec = {
        "persistence": {"size": "0"},
        "terminationGracePeriodSeconds": 10,
        "tls": {"secretName": f"{NAME}-tls", "disableNonTLSListeners": True},
    }
    kube.create("Broker", "brokers", NAME, spec)
    pod = brokerpods.BrokerPod(running, kube.namespace, NAME).attach()  # Ready: amqps probe
    assert served_serial(pod, authority, host) == serial_of(first)
    # No plain listener in the Pod.
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.ConnectionParameters(pod.pod_ip, 5672, connection_attempts=1))

    renewed = authority.issue(host, hosts=(host,))
    put_tls_secret(running, kube.namespace, renewed, create=False)
    pod.wait_ready(not_uid=pod.pod["metadata"]["uid"])  # the roll: a new Pod, Ready
    assert served_serial(pod, authority, host) == serial_of(renewed)
