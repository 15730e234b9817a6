"""Issue 31 item 2: a renewed certificate serves new TLS connections without a restart.

The certificate files live as a Kubernetes Secret volume lays them out (``tls.crt`` ->
``..data/tls.crt``, ``..data`` -> a timestamped directory) and are renewed the way the kubelet
does it: a new directory, then an atomic rename of a new ``..data`` symlink over the old one.
A client connects in a loop meanwhile (a full TLS handshake and the AMQP header each time):
none fails, the serial it sees changes to the new certificate's, and a connection made before
keeps working. A pair that does not serve keeps the old certificate and says why once.

"Once" is an absence, proved by waiting for checks, not seconds: the broker logs each check of
the files with a count at DEBUG (``Reloader.checks``), and a test waits for the check that
said something and one more, which read the same files in full, before it counts the lines.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from pathlib import Path

import pika
import pytest
from cryptography import x509
from hutch_broker.server import tlsreload
from hutch_demo import certs
from hutch_testing.tlsbrokers import TLSHutchBroker, client_context
from hutch_testing.tlsloop import ConnectLoop, served_serial
from hutch_testing.tlsloop import serial_of_leaf as leaf_serial

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.broker,
]  # level broker: TLS hutch-brokers of its own

HOSTS = ("localhost", "127.0.0.1")
# The broker looks every CHECK_INTERVAL_S; a thread to read the files, a loaded machine.
SEEN_WITHIN_S = tlsreload.CHECK_INTERVAL_S + 8.0
LISTENERS = ("AMQPS", "HTTPS")
CHECKED = re.compile(r" DEBUG \S+: (AMQPS|HTTPS): certificate files checked: (\d+)$")
# Only a safety net: the checks come every CHECK_INTERVAL_S, a thread each, on a loaded machine.
CHECKS_WITHIN_S = 60.0


class SecretVolume:
    """A directory laid out as the kubelet mounts a Secret, updated as the kubelet updates it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True)
        self.generation = 0

    def lines(self) -> tuple[str, ...]:
        files = {"certfile": "tls.crt", "keyfile": "tls.key", "cacertfile": "ca.crt"}
        return tuple(
            f"{prefix}.{key} = {self.root / name}"
            for prefix in ("ssl_options", "management.ssl")
            for key, name in files.items()
        )

    def write(self, cert_pem: bytes, key_pem: bytes, ca_pem: bytes) -> None:
        self.generation += 1
        data_dir = self.root / f"..gen_{self.generation}"
        data_dir.mkdir()
        for name, data in (("tls.crt", cert_pem), ("tls.key", key_pem), ("ca.crt", ca_pem)):
            (data_dir / name).write_bytes(data)
        staged = self.root / "..data_tmp"
        staged.symlink_to(data_dir.name)
        staged.rename(self.root / "..data")  # rename(2): atomic, as the kubelet's swap
        for name in ("tls.crt", "tls.key", "ca.crt"):
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")

    def install(self, leaf: certs.Leaf) -> None:
        self.write(leaf.cert_pem, leaf.key_pem, leaf.ca_pem)


def https_serial(host: str, port: int, context: ssl.SSLContext) -> int:
    with (
        socket.create_connection((host, port), timeout=5.0) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def log_lines(broker: TLSHutchBroker, text: str) -> list[str]:
    return [line for line in broker.console_log.read_text().splitlines() if text in line]


def checks_after(broker: TLSHutchBroker, text: str, nth: int) -> dict[str, int]:
    """Per listener, its checks logged after its ``nth`` line saying ``text`` (0: not yet).

    A check logs what it found first and its count last, in one thread: the first check
    counted after a line is the one that wrote it, the second one read the files after.
    """
    seen = dict.fromkeys(LISTENERS, 0)
    after = dict.fromkeys(LISTENERS, 0)
    for line in broker.console_log.read_text().splitlines():
        if match := CHECKED.search(line):
            after[match[1]] += seen[match[1]] >= nth
        for label in LISTENERS:
            seen[label] += f"{label}: {text}" in line
    return after


def wait_for_checks_after(broker: TLSHutchBroker, text: str, *, nth: int = 1) -> None:
    """Return once each listener logged ``text`` ``nth`` times and then checked its files in
    full once more: whatever that check would say again, it has said."""
    deadline = time.monotonic() + CHECKS_WITHIN_S
    while min((after := checks_after(broker, text, nth)).values()) < 2:
        assert time.monotonic() < deadline, f"checks after {text!r} #{nth}: {after}"
        time.sleep(0.05)


def debug_broker(leaf: certs.Leaf, volume: SecretVolume) -> TLSHutchBroker:
    """A broker on the volume's files, logging at DEBUG: its checks, counted."""
    return TLSHutchBroker(
        leaf=leaf, config_lines=volume.lines(), extra_args=["--log-level", "DEBUG"]
    )


@pytest.fixture
def authority() -> certs.Authority:
    return certs.Authority()


def test_a_renewed_certificate_serves_new_connections_with_no_failed_connect(
    tmp_path: Path, authority: certs.Authority
) -> None:
    old, new = authority.issue("hutch-old", hosts=HOSTS), authority.issue("hutch-new", hosts=HOSTS)
    volume = SecretVolume(tmp_path / "secret")
    volume.install(old)
    context = client_context(authority.pem)
    with debug_broker(old, volume) as broker:
        before = pika.BlockingConnection(
            pika.ConnectionParameters(
                host=broker.host,
                port=broker.amqps_port,
                ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
                connection_attempts=1,
            )
        )
        channel = before.channel()
        channel.queue_declare("renewal.q")
        with ConnectLoop(broker.host, broker.amqps_port, context) as loop:
            loop.wait_for(leaf_serial(old), timeout=10)
            volume.install(new)
            delay = loop.wait_for(leaf_serial(new), timeout=SEEN_WITHIN_S)
            wait_for_checks_after(broker, "certificate reloaded")  # and keeps serving it
        assert delay <= SEEN_WITHIN_S
        assert loop.failures == []
        # Old until the swap, new from then on: never back to the old one.
        assert loop.distinct_in_order() == [leaf_serial(old), leaf_serial(new)]
        assert len(loop.serials) > 20  # the loop really ran through the renewal
        # The connection made before the renewal still works.
        channel.basic_publish("", "renewal.q", b"still here")
        assert channel.basic_get("renewal.q", auto_ack=True)[2] == b"still here"
        before.close()
        assert https_serial(broker.host, broker.https_port, context) == leaf_serial(new)
        reloaded = log_lines(broker, "certificate reloaded")
        assert len(reloaded) == 2  # AMQPS and HTTPS, once each
        assert any("AMQPS" in line and "CN=hutch-new" in line for line in reloaded)
        assert all("notAfter" in line for line in reloaded)


def test_a_pair_that_does_not_serve_keeps_the_old_certificate_and_says_why_once(
    tmp_path: Path, authority: certs.Authority
) -> None:
    old, new = authority.issue("hutch-old", hosts=HOSTS), authority.issue("hutch-new", hosts=HOSTS)
    other_key = authority.issue("someone-else", hosts=HOSTS).key_pem
    volume = SecretVolume(tmp_path / "secret")
    volume.install(old)
    context = client_context(authority.pem)
    with debug_broker(old, volume) as broker:
        with ConnectLoop(broker.host, broker.amqps_port, context) as loop:
            volume.write(new.cert_pem, other_key, new.ca_pem)  # the key is not the cert's
            wait_for_checks_after(broker, "certificate not reloaded")
        assert loop.failures == []
        assert loop.distinct_in_order() == [leaf_serial(old)]
        errors = log_lines(broker, "certificate not reloaded")
        assert len(errors) == 2, errors  # one per listener, not one per check
        assert all("is not the key of" in line and "ERROR" in line for line in errors)
        # Half-written: a certificate cut short. Still the old one, one more line each.
        volume.write(new.cert_pem[: len(new.cert_pem) // 2], new.key_pem, new.ca_pem)
        wait_for_checks_after(broker, "certificate not reloaded", nth=2)
        assert served_serial(broker.host, broker.amqps_port, context, "localhost") == leaf_serial(
            old
        )
        assert len(log_lines(broker, "certificate not reloaded")) == 4
        # The next good pair is loaded.
        with ConnectLoop(broker.host, broker.amqps_port, context) as loop:
            volume.install(new)
            loop.wait_for(leaf_serial(new), timeout=SEEN_WITHIN_S)
        assert loop.failures == []
        # One timer checks the AMQPS listener's files, then the HTTPS listener's, each in a
        # thread: between the two the AMQPS one serves the new pair and the HTTPS one the old,
        # a window a loaded machine widens. So the HTTPS one is asked once it said it reloaded.
        wait_for_checks_after(broker, "certificate reloaded")
        assert https_serial(broker.host, broker.https_port, context) == leaf_serial(new)
