"""The per-run PKI of a plane: a CA, the serving and client certificates, kubeconfigs.

Why: every plane run gets fresh credentials (nothing long-lived on disk, no collisions between
runs), and the node tier issues more certificates from the same CA after start (kubelet,
kube-proxy, CoreDNS). Pure file writing with ``cryptography``: no process is started here.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _new_key() -> rsa.RSAPrivateKey:
    """RSA-2048 keeps every client (kubectl, urllib3, Go) happy."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    """Private keys are written 0600: they grant system:masters on this plane."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _cert_builder(
    subject: x509.Name, issuer: x509.Name, public_key: Any
) -> x509.CertificateBuilder:
    """Common validity: from an hour ago (clock skew) to 30 days (long dev sessions)."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )


@dataclass(frozen=True)
class CertAuthority:
    """The per-run CA that signs the serving and admin certs and is trusted by all clients."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    def issue(
        self,
        path_stem: Path,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName] | None = None,
    ) -> None:
        """Writes <stem>.crt/<stem>.key for a leaf with one extended key usage."""
        key = _new_key()
        builder = (
            _cert_builder(subject, self.cert.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        path_stem.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(path_stem.with_suffix(".key"), key)


def load_ca(pki_dir: Path) -> CertAuthority:
    """The run's CA from disk, to issue the node's certificates after make_pki."""
    key = load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise TypeError(f"{pki_dir / 'ca.key'} is not the RSA key make_pki writes")
    return CertAuthority(key, x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes()))


def subject_name(common_name: str, org: str | None = None) -> x509.Name:
    """Subject names: CN is the Kubernetes user, O its group."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(pki_dir: Path, node_ip: str) -> None:
    """CA, serving cert, admin client cert (system:masters) and the service-account key pair.

    ``node_ip`` is a SAN of the serving cert: the node tier's Pods dial the apiserver there."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_cert = (
        _cert_builder(
            subject_name("hutch-test-ca"), subject_name("hutch-test-ca"), ca_key.public_key()
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (pki_dir / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki_dir / "ca.key", ca_key)
    ca = CertAuthority(ca_key, ca_cert)
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(node_ip)),
        *(
            x509.DNSName(n)
            for n in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    ca.issue(
        pki_dir / "serving", subject_name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans
    )
    ca.issue(
        pki_dir / "admin", subject_name("admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH
    )
    sa_key = _new_key()
    _write_key(pki_dir / "sa.key", sa_key)
    (pki_dir / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def kubeconfig_text(server: str, pki_dir: Path, user: str = "admin") -> str:
    """A kubeconfig with absolute paths (admin: for kubectl, Kopf, the client; or the node's)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: hutch
  cluster:
    server: {server}
    certificate-authority: {pki_dir / "ca.crt"}
users:
- name: admin
  user:
    client-certificate: {pki_dir / f"{user}.crt"}
    client-key: {pki_dir / f"{user}.key"}
contexts:
- name: hutch
  context:
    cluster: hutch
    user: admin
    namespace: default
current-context: hutch
"""
