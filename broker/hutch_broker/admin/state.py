"""What every handler can reach: the dispatch context, the memory monitor, node facts.

Kept in its own module so handlers and ``app`` can share the typed keys
without importing each other.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from aiohttp import web

from hutch_broker.admin.memory import MemoryMonitor
from hutch_broker.admin.paced import ListingGate, SharedRender
from hutch_broker.admin.views.overview import NodeInfo
from hutch_broker.dispatch.context import Context
from hutch_broker.model import access
from hutch_broker.model.broker import Broker

WriteKey = tuple[str, str, str]  # method, route template, status class ("2xx")


class WriteCounter:
    """Management writes by (method, route template, status class) since the broker started
    (``admin/audit.py`` records them, ``/metrics`` exports them)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[WriteKey] = collections.Counter()

    def record(self, method: str, route: str, status: int) -> None:
        self.counts[(method, route, f"{status // 100}xx")] += 1


@dataclass(slots=True)
class AdminState:
    context: Context
    memory: MemoryMonitor
    node: NodeInfo
    operator_policy_changes_disabled: bool = False  # config: management.restrictions.*
    writes: WriteCounter = field(default_factory=WriteCounter)
    listings: ListingGate = field(default_factory=ListingGate)  # paced listings at once
    # A client that reads nothing of a response for this long is disconnected (admin/paced.py).
    send_stall_s: float = 30.0
    metrics: SharedRender = field(default_factory=SharedRender)  # /metrics, at most 1 s old

    @property
    def broker(self) -> Broker:
        return self.context.broker

    @property
    def node_name(self) -> str:
        return self.context.broker.cluster_name

    @property
    def local_address(self) -> str:
        port = self.node.amqp_port if self.node.amqp_port is not None else self.node.amqps_port
        return f"{self.node.listen_host}:{port}"

    def now_ms(self) -> int:
        return self.context.clock()


STATE = web.AppKey("hutch_admin_state", AdminState)
USER = web.RequestKey("hutch_admin_user", access.User)
