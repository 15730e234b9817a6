"""Secret ``<broker>-default-user``: created once, never overwritten, never in the spec.

Its keys make it usable as a topology ``connectionSecret`` as it is.
"""

from __future__ import annotations

import secrets
from typing import Any

from hutch_operator.children import meta


def build(broker: meta.BrokerObject, password: str | None = None) -> dict[str, Any]:
    password = password or secrets.token_urlsafe(24)
    username = meta.DEFAULT_USERNAME
    # Written once (never overwritten): a Broker created with spec.tls gets its TLS addresses.
    http, amqp, management_port, amqp_port = (
        ("https", "amqps", meta.MANAGEMENT_TLS_PORT, meta.AMQPS_PORT)
        if broker.tls is not None
        else ("http", "amqp", meta.MANAGEMENT_PORT, meta.AMQP_PORT)
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta.metadata(broker, broker.secret_name),
        "type": "Opaque",
        "stringData": {
            "username": username,
            "password": password,
            "uri": f"{http}://{broker.host}:{management_port}",
            "amqp-uri": f"{amqp}://{username}:{password}@{broker.host}:{amqp_port}/%2F",
            "host": broker.host,
            "amqp-port": str(amqp_port),
            "management-port": str(management_port),
        },
    }
