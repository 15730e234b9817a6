"""Pydantic models of every kind's spec and status: the single source of truth.

The CRD YAML in crds/ is generated from these (``hutch_operator.crdgen``) and the handlers parse
``spec`` with the same classes, so the schema the apiserver enforces and the one the operator
assumes cannot drift apart.
"""
