"""ConfigMap ``<broker>-config``: operator-owned lines first, then ``additionalConfig``.

The watermark and disk limit are computed here (``memory``), so the broker never applies its own
default ratio inside a container; reserved keys in ``additionalConfig`` are refused instead of
silently overriding them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hutch_operator.core import errors
from hutch_operator.instances import memory
from hutch_operator.instances.children import meta

CONFIG_KEY = "hutch-broker.conf"
RESERVED_PREFIXES = (
    "vm_memory_high_watermark",
    "disk_free_limit",
    "total_memory_available_override_value",
    "listeners.",
    "management.tcp",
    "management.ssl.",
    "ssl_options.certfile",
    "ssl_options.keyfile",
    "ssl_options.cacertfile",
)
TLS_DIR = "/etc/hutch-tls"  # secretName, mounted beside (not inside) the ConfigMap's /etc/hutch
TLS_CA_DIR = "/etc/hutch-tls-ca"  # caSecretName's ca.crt


class ReservedConfigKeyError(errors.SpecError):
    reason = "ReservedConfigKey"


def check_additional_config(text: str) -> None:
    for number, raw in enumerate(text.splitlines(), start=1):
        key = raw.split("#", 1)[0].partition("=")[0].strip()
        if key and key.startswith(RESERVED_PREFIXES):
            raise ReservedConfigKeyError(
                f"additionalConfig line {number} sets {key}, which the operator owns"
            )


def config_text(broker: meta.BrokerObject) -> str:
    spec = broker.spec
    plan = memory.watermark(spec.resources.model_dump(), spec.memory_high_watermark)
    disk = memory.disk_free_limit(spec.persistence.size)
    lines = [
        "# written by hutch-operator; edit spec.additionalConfig instead",
        plan.config_line(),
        f"disk_free_limit.absolute = {disk}",
    ]
    lines += tls_lines(broker)
    if spec.additional_config.strip():
        lines += ["# spec.additionalConfig", spec.additional_config.rstrip("\n")]
    return "\n".join(lines) + "\n"


def tls_lines(broker: meta.BrokerObject) -> list[str]:
    """RabbitMQ's TLS keys for ``spec.tls``; ``ssl_options.verify`` stays the user's to add.

    The CA bundle is configured only from ``caSecretName``: a cert-manager Secret's ``ca.crt``
    is optional, and naming a file that may not exist would refuse the start.
    """
    tls = broker.tls
    if tls is None:
        return []
    lines = [
        "# spec.tls",
        f"listeners.ssl.default = {meta.AMQPS_PORT}",
        f"management.ssl.port = {meta.MANAGEMENT_TLS_PORT}",
        f"ssl_options.certfile = {TLS_DIR}/tls.crt",
        f"ssl_options.keyfile = {TLS_DIR}/tls.key",
        f"management.ssl.certfile = {TLS_DIR}/tls.crt",
        f"management.ssl.keyfile = {TLS_DIR}/tls.key",
    ]
    if tls.ca_secret_name:
        lines.append(f"ssl_options.cacertfile = {TLS_CA_DIR}/ca.crt")
        lines.append(f"management.ssl.cacertfile = {TLS_CA_DIR}/ca.crt")
    if not broker.plain_listeners:
        lines += ["listeners.tcp = none", "management.tcp = none"]
    return lines


def build(broker: meta.BrokerObject) -> dict[str, Any]:
    check_additional_config(broker.spec.additional_config)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta.metadata(broker, broker.config_name),
        "data": {CONFIG_KEY: config_text(broker)},
    }


def data_hash(configmap: dict[str, Any]) -> str:
    """sha256 of the ConfigMap data: a pod-template annotation, so a change rolls the pod."""
    canonical = json.dumps(configmap["data"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
