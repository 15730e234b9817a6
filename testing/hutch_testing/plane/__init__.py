"""The local Kubernetes control plane behind Hutch's k8s tests, e2e, quickstart and benchmarks.

Why a package: what used to be three files under tests/k8s/ loaded by path is split by concern,
lowest layer first: ``binaries`` (pins, the built binaries, kubectl), ``pki`` (per-run
certificates), ``realnode`` (the node tier's host side) and ``images`` (our Dockerfiles built
without Docker), ``supervision`` (PID records, stopping by PID, stale runs), ``planes`` (``Plane``
and the process's ``REGISTRY``), then the two faces: ``pytest_plugin`` (fixtures and hooks, the
``pytest11`` entry point) and ``cli`` (``python -m hutch_testing.plane up|down``). The layers are
a contract in .importlinter. Operator notes: docs/control-plane.md, docs/real-node.md.
"""
