"""Secret ``<broker>-default-user``: created once; its password is never overwritten or in the spec.

Its keys make it usable as a topology ``connectionSecret`` as it is.
"""

from __future__ import annotations

import secrets
from typing import Any

from hutch_operator.instances.children import meta

ADDRESS_KEYS = ("uri", "amqp-uri", "host", "amqp-port", "management-port")


def address_update(broker: meta.BrokerObject, data: dict[str, str]) -> dict[str, str]:
    """The address keys of an operator-written Secret (``data`` decoded) that no longer match
    the Broker, e.g. after ``spec.tls`` was added; credentials are kept as they are.

    A Secret without ``uri`` was written by someone else (imported credentials): left alone.
    """
    if "uri" not in data or not data.get("username") or not data.get("password"):
        return {}
    wanted = build(broker, data["password"])["stringData"]
    wanted["amqp-uri"] = wanted["amqp-uri"].replace(
        f"{meta.DEFAULT_USERNAME}:", f"{data['username']}:", 1
    )
    return {key: wanted[key] for key in ADDRESS_KEYS if data.get(key) != wanted[key]}


def build(broker: meta.BrokerObject, password: str | None = None) -> dict[str, Any]:
    password = password or secrets.token_urlsafe(24)
    username = meta.DEFAULT_USERNAME
    # The TLS addresses when spec.tls is set (address_update keeps a written Secret in step).
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
