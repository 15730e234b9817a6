"""``/api/connections`` and ``/api/channels`` items: who is connected, and how.

Identity (name, user, vhost, peer and the listener it came in on), state, the negotiated
limits, and for TLS what was negotiated (``server/tlsinfo.py``).  Traffic counters RabbitMQ
keeps per socket (``recv_oct``, ``send_cnt`` …) are not tracked by Hutch and are reported as 0
so dashboards do not break.  Sessions
and channels are dispatch objects; ``SessionInfo`` and ``ChannelInfo`` name
exactly what is read of them, so mypy catches a renamed field instead of the
API silently reporting a default.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, Protocol, runtime_checkable

from hutch_broker.admin.views import formatting
from hutch_broker.dispatch.context import TLSInfo
from hutch_broker.model import access
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import connection as proto_connection


class SessionInfo(Protocol):
    """What the views read of a dispatch ``Session``."""

    peer_host: str | None
    peer_port: int
    blocked: bool
    connected_at_ms: int
    user: access.User | None
    vhost: VirtualHost | None
    proto: proto_connection.Connection
    local_address: str | None  # the listener's host:port; None from an in-memory client
    tls: TLSInfo | None

    @property
    def channels(self) -> Sized: ...


class Outstanding(Protocol):
    """A channel's unacked deliveries (dispatch ``Unacked``): a stream's run is one item of
    many deliveries, so the count is asked for, not ``len()``."""

    def outstanding(self) -> int: ...


class ChannelInfo(Protocol):
    """What the views read of a dispatch ``Channel``."""

    number: int
    flow_active: bool
    consumer_prefetch: int
    prefetch_count: int
    confirm_mode: bool
    transactional: bool

    @property
    def consumers(self) -> Sized: ...

    @property
    def unacked(self) -> Outstanding: ...


@runtime_checkable
class ConnectedChannel(ChannelInfo, Protocol):
    """A consumer's channel that belongs to a client connection (a dispatch ``Channel``)."""

    session: SessionInfo


def connection_name(session: SessionInfo, local_address: str) -> str:
    """RabbitMQ's ``peer -> local`` form, e.g. ``127.0.0.1:50342 -> 127.0.0.1:5672``."""
    return f"{session.peer_host}:{session.peer_port} -> {local_address}"


def _user(session: SessionInfo) -> str:
    return session.user.name if session.user is not None else ""


def _vhost(session: SessionInfo) -> str:
    return session.vhost.name if session.vhost is not None else ""


def _client_properties(session: SessionInfo) -> Any:
    return formatting.jsonable(session.proto.client_properties or {})


def _tls_fields(tls: TLSInfo | None) -> dict[str, Any]:
    """RabbitMQ's TLS keys: all present on every connection, null on plain TCP."""
    return {
        "ssl": tls is not None,
        "ssl_protocol": tls.protocol if tls else None,
        "ssl_key_exchange": tls.key_exchange if tls else None,
        "ssl_cipher": tls.cipher if tls else None,
        "ssl_hash": tls.hash if tls else None,
        "peer_cert_subject": tls.peer_cert_subject if tls else None,
        "peer_cert_issuer": tls.peer_cert_issuer if tls else None,
        "peer_cert_validity": tls.peer_cert_validity if tls else None,
    }


def connection_item(session: SessionInfo, *, node: str, local_address: str) -> dict[str, Any]:
    """``local_address`` is the broker's main listener, for sessions that do not know theirs."""
    local_address = session.local_address or local_address
    host, _, port = local_address.rpartition(":")
    item: dict[str, Any] = {
        "name": connection_name(session, local_address),
        "node": node,
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "state": "blocked" if session.blocked else "running",
        "user": _user(session),
        "user_who_performed_action": _user(session),
        "vhost": _vhost(session),
        "peer_host": session.peer_host,
        "peer_port": session.peer_port,
        "host": host,
        "port": int(port) if port.isdigit() else 0,
        **_tls_fields(session.tls),
        "auth_mechanism": "PLAIN",
        "channels": len(session.channels),
        "channel_max": session.proto.channel_max,
        "frame_max": session.proto.frame_max,
        "timeout": session.proto.heartbeat,
        "connected_at": session.connected_at_ms,
        "client_properties": _client_properties(session),
        "recv_cnt": 0,
        "send_cnt": 0,
        "send_pend": 0,
    }
    item.update(formatting.with_details({"recv_oct": 0, "send_oct": 0}))
    return item


def channel_item(
    session: SessionInfo, channel: ChannelInfo, *, node: str, local_address: str
) -> dict[str, Any]:
    name = connection_name(session, session.local_address or local_address)
    return {
        "name": f"{name} ({channel.number})",
        "number": channel.number,
        "node": node,
        "user": _user(session),
        "user_who_performed_action": _user(session),
        "vhost": _vhost(session),
        "state": "running" if channel.flow_active else "flow",
        "connection_details": {
            "name": name,
            "peer_host": session.peer_host,
            "peer_port": session.peer_port,
        },
        "consumer_count": len(channel.consumers),
        "messages_unacknowledged": channel.unacked.outstanding(),
        "prefetch_count": channel.consumer_prefetch,
        "global_prefetch_count": channel.prefetch_count,
        "confirm": channel.confirm_mode,
        "transactional": channel.transactional,
    }
