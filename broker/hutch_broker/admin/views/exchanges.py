"""``/api/exchanges`` items (API-5).

The default exchange is ``""`` in bodies and ``amq.default`` in paths; the
path mapping is the handlers' job, the body keeps the model's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from hutch_broker.admin.views import formatting
from hutch_broker.model.exchanges import Exchange


def is_builtin(exchange: Exchange) -> bool:
    return exchange.name == "" or exchange.name.startswith("amq.")


def exchange_item(exchange: Exchange) -> dict[str, Any]:
    item = {
        "name": exchange.name,
        "vhost": exchange.vhost,
        "type": exchange.kind,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": formatting.jsonable(exchange.arguments),
        "user_who_performed_action": (
            "rmq-internal" if is_builtin(exchange) else exchange.declared_by
        ),
    }
    if exchange.policy_name is not None:
        item["policy"] = exchange.policy_name
    stats = formatting.activity(
        {"publish_in": exchange.stats_publish_in, "publish_out": exchange.stats_publish_out}
    )
    if stats:
        item["message_stats"] = stats
    return item


def exchange_detail(exchange: Exchange) -> dict[str, Any]:
    """The single-exchange form adds per-link rate lists (always empty in Hutch)."""
    item = exchange_item(exchange)
    item["incoming"] = []
    item["outgoing"] = []
    return item


# The item keys a listing reads straight from the exchange, so a page renders only itself
# (``paced.Fields``): ``vhost`` and ``name`` are the default sort.
FIELDS: Final[Mapping[str, Callable[[Exchange], Any]]] = {
    "name": lambda exchange: exchange.name,
    "vhost": lambda exchange: exchange.vhost,
}
