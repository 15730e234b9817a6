"""What ``connection.start`` says about the broker: its ``server_properties``.

Why: clients and tools read these to decide what they talk to (some branch on ``product`` or
``version``), so an operator must be able to set them, as RabbitMQ allows. RabbitMQ 3.10.8
(``rabbit_reader``) puts the configured ``rabbit.server_properties`` (advanced.config) over its
own ``product``, ``version``, ``platform``, ``cluster_name``, ``copyright`` and ``information``,
keeps any extra keys, and always sends its own ``capabilities``: a configured one is dropped,
because the capabilities say what the broker does and a client relies on them. Hutch builds the
table the same way; its config file refuses a ``capabilities`` entry outright (config.py) rather
than drop it in silence.

``cluster_name`` is the cluster's current name, so a rename through the management API shows in
the next connection's properties, as in RabbitMQ, unless a configured ``cluster_name`` pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

PRODUCT: Final = "Hutch"
# A cluster name travels in every connection.start, which must fit the 4,096-byte frame a
# client accepts before tune; the configured entries have their own 2,048-byte budget
# (config.py), so a name gets a shortstr's 255 bytes. RabbitMQ bounds neither; a name past
# this is refused by the management API and never sent (model/broker.py).
MAX_CLUSTER_NAME_BYTES: Final = 255
PLATFORM: Final = "Python"
COPYRIGHT: Final = "Hutch authors"
INFORMATION: Final = "Licensed under the Apache License 2.0"

# What this broker does; the same set RabbitMQ 3.10.8 announces.
CAPABILITIES: Final[Mapping[str, bool]] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


def server_properties(
    *, version: str, cluster_name: str, configured: Mapping[str, str]
) -> dict[str, Any]:
    """The broker's own properties, the configured ones over them, then the capabilities."""
    properties: dict[str, Any] = {
        "product": PRODUCT,
        "version": version,
        "platform": PLATFORM,
        "cluster_name": cluster_name,
        "copyright": COPYRIGHT,
        "information": INFORMATION,
    }
    properties.update(configured)
    properties["capabilities"] = dict(CAPABILITIES)
    return properties
