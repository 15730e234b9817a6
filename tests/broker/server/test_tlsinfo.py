"""OpenSSL's names for what a TLS connection negotiated, translated into RabbitMQ's (Erlang's).

The live values (a real handshake, side by side with RabbitMQ 3.10.8) are checked in
tests/sidebyside/test_tls.py; these pin the translation for suites a live test here cannot
force (TLS 1.2, CBC, ECDSA).
"""

import pytest
from hutch_broker.server import tlsinfo


@pytest.mark.parametrize(
    ("name", "version", "expected"),
    [
        ("TLS_AES_256_GCM_SHA384", "TLSv1.3", ("any", "aes_256_gcm", "aead")),
        ("TLS_AES_128_GCM_SHA256", "TLSv1.3", ("any", "aes_128_gcm", "aead")),
        ("TLS_CHACHA20_POLY1305_SHA256", "TLSv1.3", ("any", "chacha20_poly1305", "aead")),
        ("ECDHE-RSA-AES256-GCM-SHA384", "TLSv1.2", ("ecdhe_rsa", "aes_256_gcm", "aead")),
        ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2", ("ecdhe_ecdsa", "aes_128_gcm", "aead")),
        ("ECDHE-RSA-CHACHA20-POLY1305", "TLSv1.2", ("ecdhe_rsa", "chacha20_poly1305", "aead")),
        ("DHE-RSA-AES256-SHA256", "TLSv1.2", ("dhe_rsa", "aes_256_cbc", "sha256")),
        ("ECDHE-RSA-AES128-SHA", "TLSv1.2", ("ecdhe_rsa", "aes_128_cbc", "sha")),
        ("AES256-GCM-SHA384", "TLSv1.2", ("rsa", "aes_256_gcm", "aead")),
    ],
)
def test_suite_names_as_rabbitmq_reports_them(name, version, expected):
    assert tlsinfo.suite(name, version) == expected


def test_distinguished_names_are_rfc_4514_last_rdn_first():
    subject = ((("countryName", "DE"),), (("organizationName", "team"),), (("commonName", "app"),))
    assert tlsinfo.distinguished_name(subject) == "CN=app,O=team,C=DE"
    multi = ((("organizationName", "t"),), (("commonName", "a"), ("emailAddress", "a@t")))
    assert tlsinfo.distinguished_name(multi) == "CN=a+emailAddress=a@t,O=t"
    assert tlsinfo.distinguished_name(None) is None
    assert tlsinfo.distinguished_name(()) is None


def test_validity_is_a_utc_range():
    got = tlsinfo.validity("Nov 26 10:00:00 2026 GMT", "Nov 26 10:00:00 2027 GMT")
    assert got == "2026-11-26T10:00:00Z - 2027-11-26T10:00:00Z"
    assert tlsinfo.validity(None, "Nov 26 10:00:00 2027 GMT") is None


def test_a_plain_connection_has_no_tls_info():
    assert tlsinfo.describe(None) is None
