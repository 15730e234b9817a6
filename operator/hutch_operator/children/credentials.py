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
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta.metadata(broker, broker.secret_name),
        "type": "Opaque",
        "stringData": {
            "username": username,
            "password": password,
            "uri": f"http://{broker.host}:{meta.MANAGEMENT_PORT}",
            "amqp-uri": f"amqp://{username}:{password}@{broker.host}:{meta.AMQP_PORT}/%2F",
            "host": broker.host,
            "amqp-port": str(meta.AMQP_PORT),
            "management-port": str(meta.MANAGEMENT_PORT),
        },
    }
