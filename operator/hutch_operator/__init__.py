"""hutch_operator: the Kopf operator that runs hutch-broker instances and reconciles topology.

Two halves that never import each other: ``instances`` (a Broker CR → a running hutch-broker)
and ``topology`` (every other kind, over the management API), both on ``core``; ``handlers``
above them wires Kopf to both. Start it with ``python -m hutch_operator`` or
``kopf run -m hutch_operator.handlers``; the design contract is docs/contracts/operator.md and
the user guide docs/operator.md.
"""
