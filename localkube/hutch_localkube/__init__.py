"""hutch-localkube: the local Kubernetes that ``make run``, the tests, e2e and the benchmarks use.

Why a package of its own (localkube/, not the test tooling): it is how Hutch runs on one machine
without Docker or a cloud, so a reader looking for that finds it beside the products, and it
depends on none of them (a contract in .importlinter). Its Go build inputs are in
localkube/gobuild/. The package is split by concern, lowest layer first: ``binaries`` (pins, the
built binaries, kubectl), ``pki`` (per-run certificates), ``realnode`` (the node tier's host side)
and ``images`` (our Dockerfiles built without Docker), ``supervision`` (PID records, stopping by
PID, stale runs) and ``provisioner`` (the node's volumes), ``planes`` (``Plane`` and the process's
``REGISTRY``), then its face ``cli`` (``python -m hutch_localkube up|down``). The test suites
reach it through hutch_testing.localkube_plugin (fixtures and hooks). The layers are a contract
in .importlinter. Operator notes: docs/control-plane.md, docs/real-node.md.
"""
