"""``/api/connections`` and ``/api/channels`` items: who is connected, and how.

Only the basic fields: identity (name, user, vhost, peer), state and
counts.  Traffic counters RabbitMQ keeps per socket (``recv_oct`` …) are not
tracked by Hutch and are reported as 0 so dashboards do not break.  Sessions
and channels are dispatch objects; they are read through ``getattr`` with
defaults so this module depends only on the attributes it shows.
"""

from __future__ import annotations

from typing import Any

from hutch_broker.admin.views import formatting


def connection_name(session: Any, local_address: str) -> str:
    """RabbitMQ's ``peer -> local`` form, e.g. ``127.0.0.1:50342 -> 127.0.0.1:5672``."""
    return f"{session.peer_host}:{session.peer_port} -> {local_address}"


def _user(session: Any) -> str:
    user = getattr(session, "user", None)
    return str(user.name) if user is not None else ""


def _vhost(session: Any) -> str:
    vhost = getattr(session, "vhost", None)
    return str(vhost.name) if vhost is not None else ""


def _client_properties(session: Any) -> Any:
    proto = getattr(session, "proto", None)
    return formatting.jsonable(getattr(proto, "client_properties", None) or {})


def connection_item(session: Any, *, node: str, local_address: str) -> dict[str, Any]:
    host, _, port = local_address.rpartition(":")
    item: dict[str, Any] = {
        "name": connection_name(session, local_address),
        "node": node,
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "state": "blocked" if getattr(session, "blocked", False) else "running",
        "user": _user(session),
        "user_who_performed_action": _user(session),
        "vhost": _vhost(session),
        "peer_host": session.peer_host,
        "peer_port": session.peer_port,
        "host": host,
        "port": int(port) if port.isdigit() else 0,
        "ssl": False,
        "auth_mechanism": "PLAIN",
        "channels": len(getattr(session, "channels", {})),
        "connected_at": getattr(session, "connected_at_ms", 0),
        "client_properties": _client_properties(session),
    }
    item.update(formatting.with_details({"recv_oct": 0, "send_oct": 0}))
    return item


def channel_item(session: Any, channel: Any, *, node: str, local_address: str) -> dict[str, Any]:
    name = connection_name(session, local_address)
    return {
        "name": f"{name} ({channel.number})",
        "number": channel.number,
        "node": node,
        "user": _user(session),
        "user_who_performed_action": _user(session),
        "vhost": _vhost(session),
        "state": "running" if getattr(channel, "flow_active", True) else "flow",
        "connection_details": {
            "name": name,
            "peer_host": session.peer_host,
            "peer_port": session.peer_port,
        },
        "consumer_count": len(getattr(channel, "consumers", {})),
        "messages_unacknowledged": len(getattr(channel, "unacked", {})),
        "prefetch_count": getattr(channel, "consumer_prefetch", 0),
        "global_prefetch_count": getattr(channel, "prefetch_count", 0),
        "confirm": getattr(channel, "confirm_mode", False),
        "transactional": getattr(channel, "transactional", False),
    }
