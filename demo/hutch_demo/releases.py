"""The operator as users install it: ``helm install`` of charts/hutch-operator, running as a Pod.

Why: the chart's Deployment, ServiceAccount, RBAC and metrics Service are what a user gets, so
the chain installs exactly that chart, with the images built on this machine from
``docker/*.Dockerfile`` (hutch_localkube.images; with Docker: ``docker build`` + ``kind load``).
The operator then runs in its own container under the chart's restricted security context and
reaches each broker the way it does in production, through ``<broker>.<ns>.svc``.

Only the values a test run needs differ from the chart's defaults: the image names, the one
watched namespace (a Role, not a ClusterRole, so releases of parallel runs never share
cluster-wide RBAC), plain logs, and short status and sweep periods so a Broker turns
Available within seconds of its broker answering.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hutch_demo import clusters, pods

CHART = clusters.REPO_ROOT / "charts" / "hutch-operator"
IMAGE_REPOSITORY = "localhost/hutch"  # hutch_localkube.images names its images so
IMAGE_TAG = "0.1.0"
OPERATOR_IMAGE = f"{IMAGE_REPOSITORY}/hutch-operator:{IMAGE_TAG}"
BROKER_IMAGE = f"{IMAGE_REPOSITORY}/hutch-broker:{IMAGE_TAG}"
RELEASE = "hutch"
FULLNAME = "hutch-operator"  # the chart's fullname for release "hutch" (_helpers.tpl)
METRICS_PORT = 8080  # values.yaml metrics.port
INSTALL_TIMEOUT = 180  # seconds; the image is local, so this is start-up, never a pull


def find_helm(cluster: clusters.Cluster) -> Path:
    """The plane's pinned helm, else one on PATH (kind users have their own)."""
    if cluster.plane is not None:
        return Path(cluster.plane.helm_path)
    found = shutil.which("helm")
    if found is None:
        raise clusters.ClusterError("no helm on PATH (https://helm.sh/docs/intro/install/)")
    return Path(found)


def values(namespace: str, *, status_period: float, sync_period: float) -> dict[str, Any]:
    """The chart values of a chain run; everything else is the chart's default."""
    return {
        "image": {
            "repository": f"{IMAGE_REPOSITORY}/hutch-operator",
            "tag": IMAGE_TAG,
            "pullPolicy": "IfNotPresent",  # imported, never pulled: a missing image fails loudly
        },
        "broker": {"image": {"repository": f"{IMAGE_REPOSITORY}/hutch-broker", "tag": IMAGE_TAG}},
        "watchNamespaces": [namespace],
        "operator": {"syncPeriod": sync_period, "logFormat": "plain"},
        "extraEnv": [{"name": "HUTCH_BROKER_STATUS_PERIOD", "value": str(status_period)}],
    }


@dataclass
class OperatorRelease:
    """One installed release of the chart and the Pod it runs."""

    cluster: clusters.Cluster
    namespace: str
    helm: Path
    name: str = RELEASE

    def helm_run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [str(self.helm), *args, "-n", self.namespace]
        command += ["--kubeconfig", str(self.cluster.kubeconfig)]
        result = subprocess.run(  # noqa: S603 - the pinned helm with our own arguments
            command, capture_output=True, text=True, check=False, timeout=timeout
        )
        if result.returncode != 0:
            raise clusters.ClusterError(f"helm {' '.join(args)}: {result.stderr.strip()}")
        return result

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name={FULLNAME},app.kubernetes.io/instance={self.name}"

    def pod(self) -> dict[str, Any] | None:
        """The operator's running Pod (the newest one when a replacement is starting)."""
        listed = pods.list_pods(self.cluster, self.namespace, self.selector)
        live = [p for p in listed if not p["metadata"].get("deletionTimestamp")]
        return max(live, key=lambda p: p["metadata"]["creationTimestamp"]) if live else None

    def wait_ready(self, timeout: float = INSTALL_TIMEOUT) -> dict[str, Any]:
        """The operator Pod Ready, with its liveness endpoint answering in the container."""
        try:
            pod: dict[str, Any] = clusters.wait_for(
                lambda: (p := self.pod()) is not None and pods.is_ready(p) and p,
                f"operator Pod ({self.selector}) Ready",
                timeout=timeout,
                interval=0.5,
            )
        except clusters.ClusterError as exc:
            raise clusters.ClusterError(f"{exc}\n{self.diagnosis()}") from exc
        return pod

    def diagnosis(self) -> str:
        """The Pod's container states and the tail of its (previous) log, for a failed wait."""
        pod = self.pod()
        if pod is None:
            return "no operator Pod"
        statuses = pod.get("status", {}).get("containerStatuses") or []
        name = pod["metadata"]["name"]
        logs = self.cluster.kubectl("logs", "-n", self.namespace, name, "--tail=20", check=False)
        if statuses and statuses[0].get("restartCount"):
            args = ("logs", "-n", self.namespace, name, "--previous", "--tail=20")
            logs = self.cluster.kubectl(*args, check=False)
        return f"containers: {statuses}\nlog tail:\n{logs.stdout or logs.stderr}"

    def metrics_url(self) -> str:
        """The metrics Service by its ClusterIP: reachable from this host on the node tier."""
        path = f"/api/v1/namespaces/{self.namespace}/services/{FULLNAME}-metrics"
        service = self.cluster.get(path)
        if service is None:
            raise clusters.ClusterError(f"Service {FULLNAME}-metrics not found")
        return f"http://{service['spec']['clusterIP']}:{METRICS_PORT}/metrics"

    def metrics(self, timeout: float = 60) -> str:
        """The operator's Prometheus text through its Service (it answers once Kopf is up)."""
        url = self.metrics_url()
        text: str = clusters.wait_for(
            lambda: _http_text(url), f"operator metrics at {url}", timeout=timeout, interval=0.5
        )
        return text

    def uninstall(self, timeout: float = 120) -> float:
        """``helm uninstall --wait``; returns the seconds it took."""
        began = time.monotonic()
        self.helm_run("uninstall", self.name, "--wait", f"--timeout={int(timeout)}s")
        return time.monotonic() - began


def install(
    cluster: clusters.Cluster,
    namespace: str,
    work_dir: Path,
    *,
    status_period: float = 2.0,
    sync_period: float = 30.0,
    overrides: dict[str, Any] | None = None,
) -> OperatorRelease:
    """``helm install hutch charts/hutch-operator -n <ns> -f values.json``; waits for its Pod.

    ``overrides`` replace top-level chart values (``resources``, for example)."""
    release = OperatorRelease(cluster, namespace, find_helm(cluster))
    work_dir.mkdir(parents=True, exist_ok=True)
    values_file = work_dir / "operator-values.json"
    chart_values = values(namespace, status_period=status_period, sync_period=sync_period)
    chart_values.update(overrides or {})
    values_file.write_text(json.dumps(chart_values, indent=1))
    release.helm_run("install", release.name, str(CHART), "-f", str(values_file))
    release.wait_ready()
    return release


def _http_text(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:  # noqa: S310 - a ClusterIP here
            return reply.read().decode() if reply.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None
