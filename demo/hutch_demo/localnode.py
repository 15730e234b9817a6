"""Pre-made volumes on the local plane's real node, for tests that pin their PVs.

Why: the node tier's default class ``hutch-local`` is served by its provisioner
(``hutch_localkube.provisioner``), so a Broker that names no class gets a volume as on any
cluster, and ``make run`` relies on that. Some node tests instead want to know the PV before the
Broker exists (its directory, to read the broker's files from the host): for them, as a
cluster admin would, ``hutch-test`` becomes the only default class and one ``local`` PV per
Broker volume is pre-made on the node's disk; the kubelet really mounts it into the broker Pod.
"""

from __future__ import annotations

import json

from hutch_localkube import provisioner

from hutch_demo import clusters


def provide_volumes(cluster: clusters.Cluster, sizes: list[str]) -> list[str]:
    """``hutch-test`` becomes the default class (``hutch-local`` no longer is), with one local
    PV per size; their names."""
    if cluster.plane is None:
        raise clusters.ClusterError("local PVs exist only on the local plane's node tier")
    make_default(cluster, clusters.STORAGE_CLASS)
    names: list[str] = []
    for size in sizes:
        names += cluster.plane.make_local_pvs(1, size=size)
    return names


def make_default(cluster: clusters.Cluster, name: str) -> None:
    """``name`` becomes the node's only default class: ``hutch-local`` (the provisioner's, as
    the node starts) or ``hutch-test`` (pre-made PVs). The plane outlives a test, so a chain
    after one that pre-made its PVs sets the provisioner's class back."""
    other = (
        clusters.STORAGE_CLASS if name == provisioner.STORAGE_CLASS else provisioner.STORAGE_CLASS
    )
    for each, default in ((other, "false"), (name, "true")):
        patch = json.dumps(
            {"metadata": {"annotations": {clusters.DEFAULT_CLASS_ANNOTATION: default}}}
        )
        cluster.kubectl("patch", "storageclass", each, "--type=merge", "-p", patch)
