"""The node's containerd image store, kept between node starts under ``~/.cache/hutch``.

Why: every node start used to import the pause, broker and operator images into an empty
containerd root (7-21 s), and the first Spark Pod waited for hutch-spark's (~1 GB: 14 s to
ingest its content alone, more to unpack it, all of it competing for the two cores with the
operator and the broker starting). Those images change only when their Dockerfile's inputs do,
so containerd's ``root`` (content store, snapshots, metadata) is a cache like the image layouts
are, and a start imports only an image whose digest differs from the one stored.

What must not carry over is everything a run made: containers and Pod sandboxes. Their records
are in the same metadata database, so a start removes every container an earlier run left
(``ctr containers rm``, which also drops their writable snapshots), then restarts containerd so
its CRI plugin, which loaded them at start, begins with none; their files under the root (the
CRI's per-Pod directories, the shims' work dirs) go too. Everything volatile (``state``: tasks,
mounts, netns, the runc root, the socket) stays under the run dir and goes with it, as before.

One containerd uses a root at a time: the node lock (``realnode.acquire_lock``) is taken before
containerd starts, and there is one node plane per machine. The root is keyed by containerd's
version, so an upgraded containerd starts a fresh store instead of reading an old one.
``planes`` starts containerd and calls ``remove_containers`` and ``load``; ``plan`` is the pure
decision between them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hutch_localkube import binaries, images

log = logging.getLogger(__name__)

# ``ctr`` against one containerd, namespace k8s.io; raises when ctr fails.
Ctr = Callable[..., subprocess.CompletedProcess[str]]

# Per-container files under the root, written by a run for its own Pods and never read by a
# later one: the CRI plugin's (status, hostname, resolv.conf) and the runc shims' work dirs.
RUN_DIRS = (
    "io.containerd.grpc.v1.cri/containers",
    "io.containerd.grpc.v1.cri/sandboxes",
    "io.containerd.runtime.v2.task",
)


def root_dir(containerd: Path) -> Path:
    """``~/.cache/hutch/containerd/<version key>``: one store per containerd release."""
    version = subprocess.run(
        [str(containerd), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    key = hashlib.sha256(version.encode()).hexdigest()[:12]
    return binaries.cache_root() / "containerd" / key


def remove_run_files(root: Path) -> None:
    """The per-container files an earlier run left (containerd must be stopped)."""
    for name in RUN_DIRS:
        shutil.rmtree(root / name, ignore_errors=True)


def layout_digest(layout: Path) -> str:
    """The manifest digest an OCI layout's index names: what ``ctr images ls`` shows after
    its import."""
    index = json.loads((layout / "index.json").read_text())
    return str(index["manifests"][0]["digest"])


def parse_images(listing: str) -> dict[str, str]:
    """``ctr images ls`` output -> {reference: digest}."""
    images = {}
    for line in listing.splitlines()[1:]:  # the header: REF TYPE DIGEST SIZE ...
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            images[fields[0]] = fields[2]
    return images


@dataclass(frozen=True)
class Plan:
    """What a start does to the store: images to remove first, then layouts to import."""

    remove: tuple[str, ...]
    load: tuple[Path, ...]


def plan(stored: dict[str, str], wanted: dict[str, Path]) -> Plan:
    """``stored``: reference -> digest in the store; ``wanted``: reference -> its layout now.

    An image whose stored digest differs is removed, then imported again: removing it first
    makes containerd collect the old content and snapshots, so the store holds one version of
    each image. Images not wanted now stay (hutch-spark is wanted only by the runs that use it).

    The CRI plugin adds a reference of its own to every image it sees, named by the image's
    ID (``sha256:<config digest>``, labelled ``io.cri-containerd.image=managed``). Removing
    the name leaves that reference, and it keeps the old version's content and snapshots
    (2 GB for one hutch-spark rebuild). So an ID reference whose image is no longer the
    target of any named one goes too.
    """
    digests = {ref: layout_digest(layout) for ref, layout in wanted.items()}
    stale = [ref for ref, digest in digests.items() if ref in stored and stored[ref] != digest]
    load = [layout for ref, layout in wanted.items() if stored.get(ref) != digests[ref]]
    kept = {digest for ref, digest in stored.items() if not is_id_reference(ref)}
    kept = kept - {stored[ref] for ref in stale} | set(digests.values())
    orphans = [ref for ref, digest in stored.items() if is_id_reference(ref) and digest not in kept]
    return Plan(tuple(sorted(stale + orphans)), tuple(load))


def is_id_reference(ref: str) -> bool:
    """The CRI plugin's reference by image ID: ``sha256:`` and 64 hex digits."""
    name, _, hexdigits = ref.partition(":")
    return (
        name == "sha256"
        and len(hexdigits) == 64
        and all(c in "0123456789abcdef" for c in hexdigits)
    )


def remove_containers(ctr: Ctr) -> int:
    """Removes every container record (with its snapshot); how many there were.

    Run right after containerd starts, before kubelet: none of them has a task (``state`` is
    new), and the caller restarts containerd when this returns more than 0.
    """
    left = ctr("containers", "ls", "-q").stdout.split()
    if left:
        ctr("containers", "rm", *left)
    return len(left)


def load(ctr: Ctr, socket: Path, layouts: list[Path]) -> list[str]:
    """Imports the layouts the store lacks or holds another version of; the references
    imported (empty when the store had them all)."""
    stored = parse_images(ctr("images", "ls").stdout)
    wanted = {images.image_name(layout): layout for layout in layouts}
    todo = plan(stored, wanted)
    if todo.remove:  # one call: one garbage collection, which takes their content with them
        ctr("images", "rm", "--sync", *todo.remove)
        log.info("image store: removed %s", ", ".join(todo.remove))
    for layout in todo.load:
        images.import_image(layout, socket)
    return [ref for ref, layout in wanted.items() if layout in todo.load]
