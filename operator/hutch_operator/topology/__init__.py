"""Topology reconciliation: Queues, Exchanges, Bindings, Policies and the tenancy kinds.

Every kind goes through one skeleton (``reconciling``) over pure translators (``translators``,
``tenancy``), and one drift sweep (``sweeping`` over ``snapshots``) keeps them in step; a kind's
module in ``handlers/`` supplies only its own operations. It reaches brokers through
``hutch_operator.core`` and never imports ``instances``: a topology object may name a broker the
operator does not run (a ``connectionSecret``).
"""
