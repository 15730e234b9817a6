"""Kopf handlers of the topology kinds, one module per kind, each registered from its ``KindOps``.

``hutch_operator.handlers`` imports every module here, so ``kopf run -m hutch_operator.handlers``
registers them with the Broker's handlers and the operator-wide settings.
"""
