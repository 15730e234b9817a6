"""hutch_operator: the Kopf operator that runs hutch-broker instances and reconciles topology.

Start it with ``python -m hutch_operator`` or ``kopf run -m hutch_operator.handlers``; the design
contract is docs/contracts/operator.md and the user guide docs/operator.md.
"""
