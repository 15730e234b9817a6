"""A TLS connection's negotiated parameters, named as RabbitMQ's management API names them.

Why: monitoring and audits read ``ssl``, ``ssl_protocol``, ``ssl_cipher``, ``ssl_key_exchange``,
``ssl_hash`` and ``peer_cert_*`` from ``/api/connections`` to check that clients use TLS, and
with which client certificate. RabbitMQ reports them in Erlang's vocabulary (``tlsv1.3``,
``ecdhe_rsa``, ``aes_256_gcm``, ``aead``; RFC 4514 distinguished names; a validity range), while
Python's ``ssl`` module speaks OpenSSL's (``TLSv1.3``, ``ECDHE-RSA-AES256-GCM-SHA384``). The
translation is pure (``suite``, ``distinguished_name``, ``validity``) and tested on its own;
``describe`` only reads the socket's ``SSLObject``.
"""

from __future__ import annotations

import datetime
import ssl
from typing import Any

from hutch_broker.dispatch.context import TLSInfo

# OpenSSL's key-exchange prefixes of TLS 1.2 suite names, as Erlang names them.
_KEY_EXCHANGES = {
    "ECDHE-RSA": "ecdhe_rsa",
    "ECDHE-ECDSA": "ecdhe_ecdsa",
    "DHE-RSA": "dhe_rsa",
    "DHE-DSS": "dhe_dss",
}
# Cipher parts, longest first so AES256-GCM is not read as AES256.
_CIPHERS = [
    ("CHACHA20-POLY1305", "chacha20_poly1305"),
    ("CHACHA20_POLY1305", "chacha20_poly1305"),
    ("AES256-GCM", "aes_256_gcm"),
    ("AES128-GCM", "aes_128_gcm"),
    ("AES_256_GCM", "aes_256_gcm"),
    ("AES_128_GCM", "aes_128_gcm"),
    ("AES_128_CCM", "aes_128_ccm"),
    ("AES256", "aes_256_cbc"),
    ("AES128", "aes_128_cbc"),
]
_AEAD = ("_gcm", "_ccm", "chacha20_poly1305")
# X.509 attribute names as getpeercert() gives them, and their RFC 4514 short forms.
_ATTRIBUTES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "emailAddress": "emailAddress",
}


def suite(name: str, version: str) -> tuple[str, str, str]:
    """(key exchange, cipher, hash) of an OpenSSL suite name, in Erlang's names.

    TLS 1.3 suites do not name a key exchange (Erlang says ``any``); AEAD ciphers have no
    separate MAC (``aead``). An unknown name is reported lower-cased rather than guessed.
    """
    if version == "TLSv1.3":
        key_exchange = "any"
    else:
        prefix = next((k for k in _KEY_EXCHANGES if name.startswith(k + "-")), None)
        key_exchange = _KEY_EXCHANGES[prefix] if prefix else "rsa"
    cipher = next((ours for theirs, ours in _CIPHERS if theirs in name), name.lower())
    if cipher.endswith(_AEAD):
        digest = "aead"
    else:
        tail = name.rsplit("-", 1)[-1].lower()
        digest = "sha" if tail == "sha" else tail
    return key_exchange, cipher, digest


def distinguished_name(rdns: Any) -> str | None:
    """``CN=app,O=team`` (RFC 4514: the last RDN first) from getpeercert()'s subject or issuer."""
    if not rdns:
        return None
    parts = []
    for rdn in reversed(rdns):
        parts.append("+".join(f"{_ATTRIBUTES.get(key, key)}={value}" for key, value in rdn))
    return ",".join(parts)


def validity(not_before: object, not_after: object) -> str | None:
    """``2026-11-26T10:00:00Z - 2027-11-26T10:00:00Z`` from OpenSSL's ``notBefore``/``notAfter``."""
    if not isinstance(not_before, str) or not isinstance(not_after, str):
        return None

    def iso(stamp: str) -> str:
        seconds = ssl.cert_time_to_seconds(stamp)
        moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    return f"{iso(not_before)} - {iso(not_after)}"


def describe(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> TLSInfo | None:
    """The facts of an established TLS connection; ``None`` for plain TCP."""
    if ssl_object is None:
        return None
    version = ssl_object.version() or ""
    cipher = ssl_object.cipher()
    name = cipher[0] if cipher else ""
    key_exchange, cipher_name, digest = suite(name, version)
    peer = ssl_object.getpeercert() or {}  # {} when a client certificate was not asked for
    return TLSInfo(
        protocol=version.lower(),
        key_exchange=key_exchange,
        cipher=cipher_name,
        hash=digest,
        peer_cert_subject=distinguished_name(peer.get("subject")),
        peer_cert_issuer=distinguished_name(peer.get("issuer")),
        peer_cert_validity=validity(peer.get("notBefore"), peer.get("notAfter")),
    )
