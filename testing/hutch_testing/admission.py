"""The chart's finalizer MutatingAdmissionPolicy, for the scale bench and the chart tests.

Why here: bench/operator_bench.py runs the operator from source, not from the chart, yet should
measure what a chart user gets; so it renders the chart's policy with the pinned helm and applies
it. An apiserver starts enforcing a new policy only after its informer has seen it (well under a
second here), so ``await_finalizer`` probes with dry-run creates until the finalizer appears:
dry-run runs admission without storing anything.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "hutch-operator"
FINALIZER = "hutch.dev/finalizer"
POLICY_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
TEMPLATE = "templates/finalizer-policy.yaml"

Api = Callable[[str, str, Any], tuple[int, dict[str, Any]]]  # Plane.api: method, path, JSON body


def render_finalizer_policy(helm: Path, watch_namespaces: Sequence[str] = ()) -> str:
    """The policy and its binding as the chart renders them on a cluster that serves the API."""
    args = [str(helm), "template", "hutch", str(CHART), "--kube-version", "1.36.4",
            "--api-versions", POLICY_API, "--show-only", TEMPLATE]  # fmt: skip
    if watch_namespaces:
        args += ["--set", "watchNamespaces={" + ",".join(watch_namespaces) + "}"]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout  # noqa: S603


def dry_run_finalizers(api: Api, namespace: str) -> list[str]:
    """The finalizers admission gives a new Queue in ``namespace`` (nothing is stored)."""
    probe = {"apiVersion": "hutch.dev/v1alpha1", "kind": "Queue",
             "metadata": {"name": "admission-probe"},
             "spec": {"brokerRef": {"name": "probe"}}}  # fmt: skip
    path = f"/apis/hutch.dev/v1alpha1/namespaces/{namespace}/queues?dryRun=All"
    status, body = api("POST", path, probe)
    if status != 201:
        raise RuntimeError(f"dry-run create in {namespace} -> {status}: {body.get('message')}")
    return list(body.get("metadata", {}).get("finalizers") or [])


def await_finalizer(api: Api, namespace: str, timeout: float = 15.0) -> None:
    """Returns once a Queue created in ``namespace`` would get the finalizer at admission."""
    deadline = time.monotonic() + timeout
    while FINALIZER not in dry_run_finalizers(api, namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the finalizer policy did not take effect in {timeout}s")
        time.sleep(0.1)
