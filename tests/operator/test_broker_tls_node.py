"""Issue 16, TLS on the real node: the Broker's Pod serves the certificate from its Secret.

Why a real Pod: on the apiserver tier nothing mounts the Secret. Here the kubelet does (mode
0440, group fsGroup, under a read-only root filesystem, beside the ConfigMap), the container
must start with only its TLS listeners (its probes on 5671/15671), and a renewed Secret must
reach the running broker through the kubelet's refresh of the volume (issue 31: no roll, no
failed connect; the broker reloads the files for new connections). The certificate names the
Service (``<b>.<ns>.svc``); the test connects to the Pod IP with that name as the TLS server
name and compares the certificate the broker presented with the Secret's.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pika
import pytest
from cryptography import x509
from hutch_demo import certs
from hutch_testing import brokerpods, tlsloop
from hutch_testing.tlsbrokers import client_context
from hutch_testing.tlsloop import ConnectLoop

pytestmark = pytest.mark.timeout(600)

NAME = "secure"
# The kubelet refreshes a Secret volume at its next sync of the Pod: every syncFrequency (1 min,
# the default our node keeps) plus up to half of it as jitter, and the watched Secret cache is
# current; then the broker's next check (2 s). Measured: see docs/operator.md#tls.
RENEWAL_SEEN_WITHIN_S = 150.0

log = logging.getLogger(__name__)


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


def pika_connection(
    pod: brokerpods.BrokerPod, authority: certs.Authority, server_name: str
) -> pika.BlockingConnection:
    """AMQPS on the Pod IP with pika, chain and server name verified."""
    params = pika.ConnectionParameters(
        host=pod.pod_ip,
        port=5671,
        credentials=pika.PlainCredentials(pod.user, pod.password),
        ssl_options=pika.SSLOptions(client_context(authority.pem), server_hostname=server_name),
        connection_attempts=20,
        retry_delay=1,
    )
    return pika.BlockingConnection(params)


def served_serial(pod: brokerpods.BrokerPod, authority: certs.Authority, server_name: str) -> int:
    """A queue declared over pika, then the serial a new connection is served."""
    connection = pika_connection(pod, authority, server_name)
    assert connection.channel().queue_declare("tls.node").method.queue == "tls.node"
    connection.close()
    return tlsloop.served_serial(pod.pod_ip, 5671, client_context(authority.pem), server_name)


def serial_of(leaf: certs.Leaf) -> int:
    return x509.load_pem_x509_certificate(leaf.cert_pem).serial_number


def test_the_pod_serves_its_secret_and_a_renewal_without_a_roll(
    node_operator: Any, kit: Any
) -> None:
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

    # Renewal under a client's load: new connections all along, one made before kept open.
    uid, restarts = pod.pod["metadata"]["uid"], pod.container_status()["restartCount"]
    kept = pika_connection(pod, authority, host)
    kept_channel = kept.channel()
    kept_channel.queue_declare("tls.kept")
    renewed = authority.issue(host, hosts=(host,))
    context = client_context(authority.pem)
    with ConnectLoop(pod.pod_ip, 5671, context, server_name=host, pause=0.02) as loop:
        loop.wait_for(serial_of(first), timeout=30)
        renewed_at = time.monotonic()
        put_tls_secret(running, kube.namespace, renewed, create=False)
        delay = loop.wait_for(serial_of(renewed), timeout=RENEWAL_SEEN_WITHIN_S, since=renewed_at)
        kept.process_data_events(0)  # heartbeats, as a client's own I/O would
        time.sleep(2.0)  # and keeps serving it
    log.info(
        "renewed certificate served %.1f s after the Secret update; %d connects, %d failed",
        delay,
        len(loop.serials),
        len(loop.failures),
    )
    assert loop.failures == []
    assert loop.distinct_in_order() == [serial_of(first), serial_of(renewed)]
    # The same Pod and container: nothing rolled or restarted.
    current = pod.current()
    assert current["metadata"]["uid"] == uid
    assert pod.container_status()["restartCount"] == restarts
    # The connection made before the renewal still works.
    kept_channel.basic_publish("", "tls.kept", b"still here")
    assert kept_channel.basic_get("tls.kept", auto_ack=True)[2] == b"still here"
    kept.close()
    assert served_serial(pod, authority, host) == serial_of(renewed)
    # The broker said so, once per TLS listener, naming the new certificate's serial.
    _, logs = running.api("GET", f"{pod.pod_path}/log")
    reloaded = [line for line in logs["raw"].splitlines() if "certificate reloaded" in line]
    listeners = sorted(re.search(r"(\w+): certificate reloaded", line)[1] for line in reloaded)
    assert listeners == ["AMQPS", "HTTPS"], reloaded
    for line in reloaded:
        assert int(line.split("serial ")[1].split(",")[0], 16) == serial_of(renewed), line
