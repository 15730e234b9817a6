"""What a chain needs from the local plane's real node before its Brokers can start.

Why: the examples' Broker names no storage class, as users write it, and the node tier has no
provisioner (docs/real-node.md). So, as a cluster admin would, the harness makes ``hutch-test``
the default class and pre-makes one ``local`` PV per Broker volume on the node's disk; the
kubelet really mounts it into the broker Pod.
"""

from __future__ import annotations

import json

from hutch_testing import clusters


def provide_volumes(cluster: clusters.Cluster, sizes: list[str]) -> list[str]:
    """``hutch-test`` becomes the default class, with one local PV per size; their names."""
    if cluster.plane is None:
        raise clusters.ClusterError("local PVs exist only on the local plane's node tier")
    patch = json.dumps({"metadata": {"annotations": {clusters.DEFAULT_CLASS_ANNOTATION: "true"}}})
    cluster.kubectl("patch", "storageclass", clusters.STORAGE_CLASS, "--type=merge", "-p", patch)
    names: list[str] = []
    for size in sizes:
        names += cluster.plane.make_local_pvs(1, size=size)
    return names
