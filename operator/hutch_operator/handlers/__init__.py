"""Every Kopf handler; ``kopf run -m hutch_operator.handlers`` loads them all.

The Broker's handlers (``brokers``) and the operator-wide settings (``startup``) live here, above
both halves, because they use both: the Broker's timer refreshes the instance and then wakes the
topology objects waiting on it, and start-up runs the topology's drift sweep. The topology kinds'
handlers are in ``hutch_operator.topology.handlers``. Explicit imports (not a wildcard) so the
set of registered handlers is visible here.
"""

from hutch_operator.handlers import brokers, startup
from hutch_operator.topology.handlers import (
    bindings,
    exchanges,
    operatorpolicies,
    permissions,
    policies,
    queues,
    topicpermissions,
    users,
    vhosts,
)

__all__ = [
    "bindings",
    "brokers",
    "exchanges",
    "operatorpolicies",
    "permissions",
    "policies",
    "queues",
    "startup",
    "topicpermissions",
    "users",
    "vhosts",
]
