"""The real node as the node benchmarks use it: plane, CRDs, the Broker's volume, a namespace,
the operator by ``helm install`` and the hutch-spark image.

Why one context manager: bench/spark_node_bench.py and bench/stream_pods_bench.py need the
same set-up in the same order, and the same teardown in reverse (Pod logs kept on failure, the
operator uninstalled, the node lock released, even on Ctrl-C). Written twice, one script's
order or cleanup could drift from the other's and leave a node that the next run, or a test
waiting for the node lock, finds half taken.

The node's packages (hutch_localkube, hutch_demo) are imported when the node is entered, not
when this module is: tests/bench imports the benchmarks' pure parts without them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BROKER_VOLUME = "2Gi"
LOCK_WAIT_S = "3600"


@dataclass(frozen=True)
class Node:
    """What a benchmark needs of the node once the set-up is done."""

    plane: Any
    cluster: Any
    image: str


def node_packages() -> Any:
    """hutch_localkube's plane registry, with the demo's, the test tooling's and the local
    Kubernetes' packages made importable in a plain checkout."""
    try:
        from hutch_localkube import planes  # noqa: PLC0415
    except ImportError:
        sys.path[:0] = [str(REPO / "testing"), str(REPO / "localkube"), str(REPO / "demo")]
        from hutch_localkube import planes  # noqa: PLC0415
    return planes


@contextmanager
def node(namespace: str, work: Path) -> Iterator[Node]:
    """The node set up for one benchmark run in ``namespace`` (``work``: the run's scratch
    folder, where the operator's chart values and, on failure, the Pods' logs go)."""
    # A benchmark has no hurry: it waits up to an hour for another run's node (the tests' 300 s
    # would fail it while a CI run's node level holds the lock), unless HUTCH_NODE_LOCK_WAIT
    # says otherwise. Set here, not on import: tests/bench imports the benchmarks.
    os.environ.setdefault("HUTCH_NODE_LOCK_WAIT", LOCK_WAIT_S)
    planes = node_packages()
    from hutch_demo import clusters, localnode, pods, releases  # noqa: PLC0415

    print("starting the local plane's node tier (waits for the node lock)", flush=True)
    plane = planes.REGISTRY.acquire("node")
    try:
        cluster = clusters.local_cluster(plane)
        plane.apply_crds(REPO / "crds")
        localnode.provide_volumes(cluster, [BROKER_VOLUME])  # the Broker's
        cluster.create_namespace(namespace)
        print("helm install of the operator; hutch-spark into containerd", flush=True)
        operator = releases.install(cluster, namespace, work)
        try:
            yield Node(plane=plane, cluster=cluster, image=plane.add_image("spark"))
        except BaseException:
            pods.save_logs(cluster, namespace, work / "pod-logs")
            print(f"pod logs: {work / 'pod-logs'}", file=sys.stderr)
            raise
        finally:
            operator.uninstall()
    finally:
        planes.REGISTRY.release("node")
