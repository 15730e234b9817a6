"""What ``make run ARGS=--keep`` prints: the Web UI's URL through the quickstart's port-forward.

The Broker's Service exposes the management port (``management`` 15672, ``management-tls`` 15671
with TLS: tests/operator/test_tls_children.py), the quickstart forwards it to loopback, and the
Web UI is served at ``/`` of that port, so the URL printed is the forward's, logged in as the
Broker's default user; ``kubectl hutch manage`` is the way to the same page later.
"""

from types import SimpleNamespace

from hutch_demo import summaries


def test_keep_prints_the_web_ui_url_and_how_to_log_in() -> None:
    summary = summaries.Summary(
        namespace="quickstart", broker="hutch", kubeconfig="/k", amqp_uri="amqp://a",
        management_url="http://127.0.0.1:31234", watermark_bytes=None,
        status_watermark_bytes=None, queues=[], published=0, duplicates=0, consumed=0,
        dead_lettered=0, expected_events=0, results=[], parquet="",
    )  # fmt: skip
    line = SimpleNamespace(
        endpoint=SimpleNamespace(credentials=("hutch", "s3cret")),
        main=SimpleNamespace(pod_name="hutch-server-0"),
    )
    said = summaries.connection_help(line, summary).splitlines()  # type: ignore[arg-type]
    [ui] = [text for text in said if text.strip().startswith("Web UI:")]
    assert "http://127.0.0.1:31234/ " in ui
    assert "(user hutch, password s3cret;" in ui
    assert "kubectl hutch manage -n quickstart hutch" in ui
    assert any("http://127.0.0.1:31234/api/overview" in text for text in said)
