"""Certificates made in the test: a CA and the leaves it signs, as PEM files and bytes.

Why generated, not checked in: an expired or leaked fixture key would make TLS tests fail (or
pass) for reasons unrelated to the code; a fresh CA per test also makes "the wrong CA" a real,
independent authority. cert-manager's Secret shape is ``tls.crt``, ``tls.key`` and ``ca.crt``,
which ``Leaf.secret_data`` returns.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class Leaf:
    """A certificate, its key and the CA that signed it (PEM)."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path, Path]:
        """(cert, key, CA) files under ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = (directory / f"{stem}.crt", directory / f"{stem}.key", directory / f"{stem}-ca.crt")
        for path, data in zip(paths, (self.cert_pem, self.key_pem, self.ca_pem), strict=True):
            path.write_bytes(data)
        return paths

    def secret_data(self, *, with_ca: bool = True) -> dict[str, str]:
        """``data`` of a ``kubernetes.io/tls`` Secret as cert-manager writes it."""
        data = {"tls.crt": self.cert_pem, "tls.key": self.key_pem}
        if with_ca:
            data["ca.crt"] = self.ca_pem
        return {key: base64.b64encode(value).decode() for key, value in data.items()}


class Authority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str = "Hutch test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, hosts: tuple[str, ...] = (), client: bool = False) -> Leaf:
        """A leaf for ``hosts`` (DNS names or IP addresses); ``client`` for client auth."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Leaf(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key), self.pem)
