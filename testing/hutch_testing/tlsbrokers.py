"""hutch-broker with AMQPS and HTTPS listeners from a certificate made in the test.

Why a launcher of its own: the config must name the certificate files and two more ports, and
with the plain listeners off the readiness probe has to speak TLS (trusting the test's CA). The
broker is configured exactly as the operator renders it: ``listeners.ssl.default``,
``management.ssl.port`` and ``ssl_options.*`` lines in the ``--config`` file.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import tempfile
from pathlib import Path
from typing import Unpack

from hutch_demo import ports, probes
from hutch_demo.certs import Leaf
from hutch_demo.processes import ProcessOptions

from hutch_testing.brokers import HutchBroker, HutchBrokerOptions
from hutch_testing.rabbitmq import RabbitMQ

PLAIN_FLAGS = ("--amqp-port", "--http-port")


def client_context(ca_pem: bytes, client: Leaf | None = None) -> ssl.SSLContext:
    """A client context trusting ``ca_pem`` (and presenting ``client``, for mutual TLS)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    if client is not None:
        with tempfile.TemporaryDirectory(prefix="hutch-client-cert-") as directory:
            cert, key, _ = client.write(Path(directory), "client")
            context.load_cert_chain(cert, key)
    return context


def tls_lines(work_dir: Path, leaf: Leaf, amqps_port: int, https_port: int) -> list[str]:
    """The rabbitmq.conf lines for AMQPS and HTTPS with ``leaf``: the same for both brokers."""
    cert, key, ca = leaf.write(work_dir / "tls", "server")
    return [
        f"listeners.ssl.default = {amqps_port}",
        f"management.ssl.port = {https_port}",
        f"ssl_options.certfile = {cert}",
        f"ssl_options.keyfile = {key}",
        f"ssl_options.cacertfile = {ca}",
        f"management.ssl.certfile = {cert}",
        f"management.ssl.keyfile = {key}",
        f"management.ssl.cacertfile = {ca}",
    ]


class TLSRabbitMQ(RabbitMQ):
    """RabbitMQ 3.10.8 given the very lines TLSHutchBroker gets (plain listeners kept)."""

    kind = "rabbitmq-tls"

    def __init__(
        self, *, leaf: Leaf, config_lines: tuple[str, ...] = (), **kwargs: Unpack[ProcessOptions]
    ) -> None:
        super().__init__(**kwargs)
        self.leaf = leaf
        self.config_lines = config_lines
        self.amqps_port, self.https_port = ports.free_ports(2)

    @property
    def https_url(self) -> str:
        return f"https://{self.host}:{self.https_port}"

    def _config(self) -> str:
        tls = tls_lines(self.work_dir, self.leaf, self.amqps_port, self.https_port)
        return super()._config() + "\n".join([*tls, *self.config_lines]) + "\n"


class TLSHutchBroker(HutchBroker):
    """A HutchBroker whose config serves TLS with ``leaf``; ``plain=False`` turns TCP off."""

    kind = "hutch-tls"

    def __init__(
        self,
        *,
        leaf: Leaf,
        plain: bool = True,
        config_lines: tuple[str, ...] = (),
        **kwargs: Unpack[HutchBrokerOptions],
    ) -> None:
        super().__init__(**kwargs)
        self.leaf = leaf
        self.plain = plain
        self.config_lines = config_lines
        self.amqps_port, self.https_port = ports.free_ports(2)
        self.config_file = self.work_dir / "hutch-broker.conf"
        self.extra_args = [*self.extra_args, "--config", str(self.config_file)]

    @property
    def https_url(self) -> str:
        return f"https://{self.host}:{self.https_port}"

    def _prepare(self) -> None:
        super()._prepare()
        lines = tls_lines(self.work_dir, self.leaf, self.amqps_port, self.https_port)
        if not self.plain:
            lines += ["listeners.tcp = none", "management.tcp = none"]
        self.config_file.write_text("\n".join([*lines, *self.config_lines]) + "\n")

    def _command(self) -> list[str]:
        command = super()._command()
        if self.plain:
            return command
        kept: list[str] = []
        skip = False
        for arg in command:
            if skip:
                skip = False
            elif arg in PLAIN_FLAGS:
                skip = True
            else:
                kept.append(arg)
        return kept

    def _answers(self) -> bool:
        if self.plain:
            # The TLS ports listening too: the HTTPS site starts after the plain HTTP one, so
            # "the plain ones answer" did not mean HTTPS was up (a test once had its HTTPS
            # connect refused right after its AMQPS round trips). Only listening: a broker
            # that asks for client certificates answers no probe without one.
            return super()._answers() and all(
                map(self._listens, (self.amqps_port, self.https_port))
            )
        return self._tls_amqp_answers() and self._tls_overview_answers()

    def _listens(self, port: int) -> bool:
        try:
            with socket.create_connection((self.host, port), timeout=1.0):
                return True
        except OSError:
            return False

    def _tls_amqp_answers(self) -> bool:
        context = client_context(self.leaf.ca_pem)
        try:
            with (
                socket.create_connection((self.host, self.amqps_port), timeout=1.0) as raw,
                context.wrap_socket(raw, server_hostname=self.host) as sock,
            ):
                sock.sendall(probes.AMQP_PROTOCOL_HEADER)
                return sock.recv(1) == b"\x01"
        except OSError:
            return False

    def _tls_overview_answers(self) -> bool:
        connection = http.client.HTTPSConnection(
            self.host, self.https_port, timeout=2.0, context=client_context(self.leaf.ca_pem)
        )
        auth = probes.basic_auth(self.username, self.password)
        try:
            connection.request("GET", "/api/overview", headers={"Authorization": auth})
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()
