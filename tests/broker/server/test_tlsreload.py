"""The reload decision on its own (no sockets): when a new context is built, kept or retried.

tests/broker/amqp/test_tls_reload.py proves the served certificate with real clients; this
covers what is hard to time there: files that change again while a context is being built.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hutch_broker.config import TLSOptions
from hutch_broker.server import tls, tlsreload
from hutch_demo import certs


@pytest.fixture
def files(tmp_path: Path) -> tuple[certs.Authority, TLSOptions]:
    authority = certs.Authority()
    cert, key, ca = authority.issue("one", hosts=("localhost",)).write(tmp_path, "server")
    return authority, TLSOptions(certfile=str(cert), keyfile=str(key), cacertfile=str(ca))


def rewrite(options: TLSOptions, leaf: certs.Leaf) -> None:
    Path(options.certfile).write_bytes(leaf.cert_pem)
    Path(options.keyfile).write_bytes(leaf.key_pem)


def test_unchanged_files_are_not_loaded_again(files, caplog):
    _, options = files
    reloader = tlsreload.Reloader(options, prefix="ssl_options", label="AMQPS")
    first = reloader.current
    with caplog.at_level(logging.DEBUG, logger=tlsreload.__name__):
        assert [reloader.check() for _ in range(3)] == [False, False, False]
    assert reloader.current is first
    assert reloader.reloads == reloader.failures == 0
    # Every check counts, and says so at DEBUG only: what a test of an absence waits for.
    assert reloader.checks == 3
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, f"AMQPS: certificate files checked: {count}") for count in (1, 2, 3)
    ]


def test_a_bad_pair_is_tried_once_per_change(files, caplog):
    authority, options = files
    reloader = tlsreload.Reloader(options, prefix="ssl_options", label="AMQPS")
    first = reloader.current
    Path(options.keyfile).write_bytes(authority.issue("other").key_pem)
    with caplog.at_level(logging.INFO):
        assert [reloader.check() for _ in range(3)] == [False, False, False]
    assert reloader.current is first
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert "AMQPS: certificate not reloaded, still serving the previous one" in record.message
    assert "is not the key of ssl_options.certfile" in record.message
    rewrite(options, authority.issue("two", hosts=("localhost",)))
    with caplog.at_level(logging.INFO):
        assert reloader.check() is True
    assert reloader.current is not first
    assert "CN=two" in caplog.records[-1].message


def test_files_changed_while_loading_are_loaded_at_the_next_check(files, monkeypatch):
    authority, options = files
    reloader = tlsreload.Reloader(options, prefix="ssl_options", label="AMQPS")
    first = reloader.current
    build = tls.server_context
    third = authority.issue("three", hosts=("localhost",))

    def build_then_change(opts: TLSOptions, *, prefix: str):
        context = build(opts, prefix=prefix)
        rewrite(opts, third)  # the kubelet swapped again meanwhile
        return context

    rewrite(options, authority.issue("two", hosts=("localhost",)))
    monkeypatch.setattr(tls, "server_context", build_then_change)
    assert reloader.check() is False  # built from files that are no longer there
    assert reloader.current is first
    monkeypatch.setattr(tls, "server_context", build)
    assert reloader.check() is True
    assert "CN=three" in tlsreload.describe_certificate(options.certfile)
    assert reloader.reloads == 1
