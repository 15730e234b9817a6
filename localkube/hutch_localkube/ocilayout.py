"""OCI image layouts: a rootfs packed as layers, written as ``ctr images import`` takes them,
and read back when one of our images is the base of another.

Why a module of its own: this code and the Dockerfile interpreter (``dockerfiles``) decide an
image's bytes, so the image cache key (``images.context_key``) covers their source text: an
edit here rebuilds the images, one anywhere else in the builder does not need to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _blob(layout: Path, data: bytes, media_type: str) -> dict[str, Any]:
    """Writes a JSON blob by digest; returns its descriptor."""
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


LAYER_MEDIA = "application/vnd.oci.image.layer.v1.tar"
WHITEOUT = ".wh."  # OCI image spec: an empty file .wh.<name> deletes <name> of the layer below


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def pack_rootfs(rootfs: Path, tar_path: Path) -> None:
    """A rootfs as one uncompressed, name-sorted, numeric-owner tar (deterministic bytes)."""
    subprocess.run(
        ["tar", "--numeric-owner", "--sort=name", "--xattrs", "-C", str(rootfs), "-cf",
         str(tar_path), "."],
        check=True,
    )  # fmt: skip


@dataclass(frozen=True)
class BaseLayer:
    """The base rootfs packed once, shared as the first layer of every Dockerfile image.

    Why: containerd stores and unpacks a layer once per digest, so the broker and operator
    images share ~250 MB instead of each carrying a copy; every node start imports them.
    """

    rootfs: Path
    tar: Path
    digest: str


@dataclass(frozen=True)
class ParentImage:
    """One of our own images as the base of another (``FROM localhost/hutch/...``): its layers,
    reused by digest (containerd stores them once), and its rootfs, unpacked from them, which
    the new layer is the difference to."""

    rootfs: Path
    layers: tuple[tuple[Path, str], ...]  # (blob, sha256 hex), lowest first
    config: dict[str, Any]
    history: tuple[str, ...]


def parent_image(layout: Path, rootfs: Path) -> ParentImage:
    """Unpacks an OCI layout's layers in order into ``rootfs``, applying whiteouts."""
    blobs = layout / "blobs/sha256"
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    image = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    layers = tuple(
        (blobs / layer["digest"].split(":")[1], layer["digest"].split(":")[1])
        for layer in manifest["layers"]
    )
    rootfs.mkdir(parents=True)
    for blob, _ in layers:
        unpack_layer(blob, rootfs)
    history = tuple(h.get("created_by", "") for h in image.get("history", []))
    return ParentImage(rootfs, layers, image.get("config", {}), history)


def unpack_layer(blob: Path, rootfs: Path) -> None:
    """One uncompressed layer over ``rootfs``: whiteouts delete what is below, the rest is
    extracted with numeric owners, modes and times (as containerd's snapshotter applies it)."""
    with tarfile.open(blob) as tar:
        whiteouts = [m.name for m in tar if Path(m.name).name.startswith(WHITEOUT)]
    for name in whiteouts:
        path = Path(name)
        target = rootfs / path.parent / path.name[len(WHITEOUT) :]
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif os.path.lexists(target):
            target.unlink()
    subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "--same-permissions", "-C", str(rootfs),
         f"--exclude={WHITEOUT}*", "-xf", str(blob)],
        check=True,
    )  # fmt: skip


def _changed(path: Path, below: Path) -> bool:
    """Whether ``path`` differs from the same entry of the layer below (absent counts)."""
    try:
        old = os.lstat(below)
    except FileNotFoundError:
        return True
    new = os.lstat(path)
    same = (new.st_mode, new.st_uid, new.st_gid, new.st_size, new.st_mtime_ns) == (
        old.st_mode, old.st_uid, old.st_gid, old.st_size, old.st_mtime_ns,
    )  # fmt: skip
    if same and stat.S_ISLNK(new.st_mode):
        return os.readlink(path) != os.readlink(below)
    return not same


def layer_changes(lower: Path, upper: Path) -> tuple[list[str], list[str]]:
    """What a layer over ``lower`` must hold to give ``upper``: (entries to add, whiteouts).

    Entries are relative paths, parents before children; an entry is added when it is new or
    its type, mode, owner, size, mtime or link target changed (``cp -a`` keeps them for the
    rest). A path of ``lower`` missing in ``upper`` becomes ``<dir>/.wh.<name>``.
    """
    added: list[str] = []
    for dirpath, dirnames, filenames in os.walk(upper):
        rel = Path(dirpath).relative_to(upper)
        for name in dirnames + filenames:
            if _changed(Path(dirpath, name), lower / rel / name):
                added.append(str(rel / name))
    whiteouts: list[str] = []
    for dirpath, dirnames, filenames in os.walk(lower):
        rel = Path(dirpath).relative_to(lower)
        for name in list(dirnames) + filenames:
            if not os.path.lexists(upper / rel / name):
                whiteouts.append(str(rel / f"{WHITEOUT}{name}"))
                if name in dirnames:
                    dirnames.remove(name)  # its contents go with it
    return sorted(added), sorted(whiteouts)


def pack_changes(lower: Path, upper: Path, tar_path: Path) -> None:
    """The layer that turns ``lower`` into ``upper``, as a deterministic numeric-owner tar."""
    added, whiteouts = layer_changes(lower, upper)
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in added:
            info = tar.gettarinfo(str(upper / rel), arcname=f"./{rel}")
            info.uname = info.gname = ""  # numeric owners, as tar --numeric-owner
            if info.isreg():
                with (upper / rel).open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
        for rel in whiteouts:
            tar.addfile(tarfile.TarInfo(f"./{rel}"))


def _add_layer(layout: Path, tar: Path, digest: str | None = None) -> dict[str, Any]:
    """Moves (or, for a shared cached tar, hard-links) a layer tar into the blobs by digest."""
    digest = digest or sha256_file(tar)
    blob = layout / "blobs/sha256" / digest
    if tar.parent == blob.parent:
        tar.rename(blob)
    else:
        try:
            os.link(tar, blob)
        except OSError:
            shutil.copyfile(tar, blob)
    return {"mediaType": LAYER_MEDIA, "digest": f"sha256:{digest}", "size": blob.stat().st_size}


def write_layout(
    layout: Path,
    rootfs: Path,
    config: dict[str, Any],
    name: str,
    history: list[str],
    base: BaseLayer | ParentImage | None = None,
) -> None:
    """An OCI image layout importable by ``ctr images import``: one layer holding ``rootfs``,
    or, over a ``base``, the shared base layer(s) plus one layer of what the build changed."""
    (layout / "blobs/sha256").mkdir(parents=True)
    staging = layout / "blobs/sha256/layer.tmp"
    if base is None:
        pack_rootfs(rootfs, staging)
        layers = [_add_layer(layout, staging)]
    else:
        below = base.layers if isinstance(base, ParentImage) else ((base.tar, base.digest),)
        pack_changes(base.rootfs, rootfs, staging)
        layers = [_add_layer(layout, tar, digest) for tar, digest in below]
        layers.append(_add_layer(layout, staging))
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
        "history": [{"created_by": h} for h in history],
    }
    config_desc = _blob(
        layout, json.dumps(image_config).encode(), "application/vnd.oci.image.config.v1+json"
    )
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": layers,
    }
    manifest_desc = _blob(layout, json.dumps(manifest).encode(), manifest["mediaType"])
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    manifest_desc["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
    }
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest_desc],
    }
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "image-name").write_text(name)
