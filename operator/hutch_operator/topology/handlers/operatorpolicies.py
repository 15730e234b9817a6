"""OperatorPolicy handlers: the same as Policy against /api/operator-policies."""

from __future__ import annotations

from hutch_operator.models import kinds
from hutch_operator.topology.handlers import policies, registration

OPS = policies.policy_ops(kinds.OPERATOR_POLICY, operator=True)
registration.register(OPS)
