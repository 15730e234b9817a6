"""Kopf handlers, one module per kind; ``kopf run -m hutch_operator.handlers`` loads them all.

Explicit imports (not a wildcard) so the set of registered handlers is visible here.
"""

from hutch_operator.handlers import (
    bindings,
    brokers,
    exchanges,
    operatorpolicies,
    permissions,
    policies,
    queues,
    startup,
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
