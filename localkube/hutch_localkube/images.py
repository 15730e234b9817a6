"""Container images without Docker: the node tier's pause and Hutch images, from our Dockerfiles.

Why: no image registry is reachable and there is no Docker, yet the node tier must run the very
images a user builds with ``docker build -f docker/broker.Dockerfile``. So this module *reads*
those Dockerfiles (one recipe) and executes them itself: each ``FROM`` stage starts from a
debootstrapped bookworm rootfs with python3 (standing in for ``python:3.11-slim-bookworm``),
``RUN`` runs in a chroot inside a private mount namespace, ``COPY`` copies from the build
context or an earlier stage, and the final stage is packed as a one-layer OCI image layout.
Everything is cached under ``~/.cache/hutch/`` keyed by content. What differs from Docker is in
docs/real-node.md.

A ``FROM`` may also name one of our own images (``localhost/hutch/hutch-spark:0.1.0``): it is
built first, and the new image is its layers plus one of what the Dockerfile changed. A
``COPY --from=NAME`` may take a named build context (``docker build --build-context NAME=DIR``),
for things built outside Dockerfiles (the Spark Operator's Go binary, NAMED_CONTEXTS).

CLI (``make images``): ``python -m hutch_localkube.images build
[broker|operator|spark|spark-operator|pause]`` prints each layout dir; a cold Dockerfile build
logs each step with its time (the Spark image's take minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hutch_localkube import binaries

log = logging.getLogger("hutch.k8s.images")

REPO_ROOT = binaries.REPO_ROOT  # the build context of every Dockerfile
PAUSE_SOURCE = binaries.GO_BUILD / "pause" / "pause.go"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-pip and python-is-python3 stand in for what python:3.11-slim has: pip and `python`.
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3")
BASE_IMAGES = {"python:3.11-slim-bookworm"}  # FROM names our base rootfs replaces
DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
SKIP_NAMES = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
IMAGE_TAG = "0.1.0"
# Part of every image's cache key in place of this file's text: bump it when a change here makes
# a build from the same inputs produce a different image (an instruction's semantics, the
# layout). A change that does not (a log line, a docstring) then rebuilds nothing, not the
# ~5-minute Spark image.
BUILDER_VERSION = 2
KEEP_IMAGES = 3  # per kind, least recently used removed first
IMAGES = {
    "broker": ("docker/broker.Dockerfile", f"localhost/hutch/hutch-broker:{IMAGE_TAG}"),
    "operator": ("docker/operator.Dockerfile", f"localhost/hutch/hutch-operator:{IMAGE_TAG}"),
    # Java 17, pyspark and pyarrow: ~1 GB, so only the Spark node tests import it (not every
    # node start), and its recipe lives beside the job it runs.
    "spark": ("spark/jobs/Dockerfile", f"localhost/hutch/hutch-spark:{IMAGE_TAG}"),
    # The Kubeflow Spark Operator's controller over hutch-spark: it runs spark-submit, so it needs
    # the very Spark the jobs run (`FROM` our own image, below).
    "spark-operator": (
        "docker/spark-operator.Dockerfile",
        f"localhost/hutch/hutch-spark-operator:{IMAGE_TAG}",
    ),
}
SPARK_OPERATOR_SCRIPT = binaries.GO_BUILD / "build-spark-operator.sh"
PAUSE_NAME = "localhost/hutch/pause:3.10"


def spark_operator_bin() -> Path:
    """The controller binary's dir, built from the Go module proxy (cached per version)."""
    done = subprocess.run(
        ["bash", str(SPARK_OPERATOR_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True
    )
    return Path(done.stdout.strip().splitlines()[-1]) / "bin"


# Named build contexts, as `docker build --build-context NAME=DIR` gives them to
# `COPY --from=NAME`: things the Dockerfile takes that are built outside it.
NAMED_CONTEXTS: dict[str, dict[str, Any]] = {
    "spark-operator": {"spark-operator-bin": spark_operator_bin},
}


def digest_of(*parts: str | bytes) -> str:
    """A short content key for cache directory names."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialises builders of one cache entry (pytest-xdist, two shells)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def cached_dir(final: Path, build: Any) -> Path:
    """Returns ``final`` if complete, else builds it in a stage dir and renames it in place."""
    if (final / ".complete").is_file():
        return final
    with locked(final.parent / f".{final.name}.lock"):
        if (final / ".complete").is_file():
            return final
        stage = Path(tempfile.mkdtemp(prefix=".stage-", dir=final.parent))
        stage.chmod(0o755)  # mkdtemp makes it 0700; the cache is read by all
        try:
            build(stage)
            shutil.rmtree(final, ignore_errors=True)
            stage.rename(final)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        (final / ".complete").touch()
    return final


# --- the base rootfs ----------------------------------------------------------------------------


def base_rootfs_name() -> str:
    """The base rootfs's cache name: what it is made of, known before it is built."""
    return f"{SUITE}-minbase-python3-{digest_of(SUITE, 'minbase', ','.join(BASE_PACKAGES), MIRROR)}"


def base_rootfs() -> Path:
    """A debootstrapped bookworm minbase with python3 and pip (cold ~1 min, then cached)."""
    return cached_dir(binaries.cache_root() / "rootfs" / base_rootfs_name(), _debootstrap)


def _debootstrap(stage: Path) -> None:
    """debootstrap into stage/rootfs, then make pip behave as in python:3.11-slim."""
    began = time.monotonic()
    rootfs = stage / "rootfs"
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        check=True,
        capture_output=True,
    )
    # python:3.11-slim has no PEP 668 marker: `pip install` as root installs system-wide.
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    (rootfs / "etc/resolv.conf").write_text("")  # the runtime mounts one; the host's stays out
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
    (stage / "timing").write_text(f"debootstrap seconds={time.monotonic() - began:.0f}\n")


# --- Dockerfile interpretation --------------------------------------------------------------------


@dataclass
class Stage:
    """One FROM stage: its rootfs and the image config it accumulates."""

    name: str
    rootfs: Path
    log: Path  # the RUN steps' output, kept beside the image
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV))
    user: str = ""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    exposed: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    parent: ParentImage | None = None  # FROM one of our own images: its layers and rootfs


def instructions(text: str) -> list[tuple[str, str]]:
    """Dockerfile lines as (KEYWORD, rest), continuations joined and comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in joined]


def run_in_chroot(stage: Stage, command: str) -> None:
    """A RUN step: /bin/sh -c in a chroot, with /proc and /dev in a mount namespace that dies
    with the step, so no mount outlives it. The host's network (PyPI) is used, as docker's is."""
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in {**stage.env, "HOME": "/root"}.items())
    inner = f"cd {shlex.quote(stage.workdir)} && {command}"
    # The host's CA bundle is bind-mounted for the step only (this machine's HTTPS to PyPI goes
    # through a proxy with its own CA); like a build secret, it never enters the image.
    # /etc/hosts too, as docker gives a RUN step one: a step that binds to "localhost" (a JVM,
    # a test server) must resolve it, and debootstrap's rootfs has no /etc/hosts. Its mount
    # point is removed afterwards, so the layer keeps none (a Pod's comes from the kubelet).
    hosts = stage.rootfs / "etc/hosts"
    made_hosts = not hosts.exists()
    if made_hosts:
        hosts.touch()
    script = (
        f'mount -t proc proc "$R/proc" && mount --rbind /dev "$R/dev" && '
        f'mount --bind {HOST_CA} "$R{HOST_CA}" && '
        f'mount --bind /etc/resolv.conf "$R/etc/resolv.conf" && '
        f'mount --bind /etc/hosts "$R/etc/hosts" && '
        f'exec chroot "$R" /usr/bin/env -i {env} /bin/sh -c {shlex.quote(inner)}'
    )
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script],
            env={**os.environ, "R": str(stage.rootfs)},
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        if made_hosts:
            hosts.unlink(missing_ok=True)
    with stage.log.open("a") as out:
        out.write(f"### RUN {command}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise RuntimeError(f"RUN {command} failed ({result.returncode}):\n{tail}")


def copy_into(sources: list[Path], target: Path, into_dir: bool) -> None:
    """Docker COPY semantics: a directory's *contents* are copied; files go into a dir dest."""
    for src in sources:
        if src.is_dir():
            shutil.copytree(
                src, target, dirs_exist_ok=True, symlinks=True, ignore=_ignored, copy_function=_cp
            )
            continue
        dst = target / src.name if into_dir or len(sources) > 1 else target
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _cp(src: str, dst: str) -> None:
    shutil.copy2(src, dst)


def _ignored(_directory: str, names: list[str]) -> set[str]:
    """Mirrors the repository's .dockerignore: caches and build leftovers stay out."""
    return {n for n in names if n in SKIP_NAMES or n.endswith(".egg-info")}


def do_copy(
    stage: Stage,
    args: str,
    stages: dict[str, Stage],
    context: Path,
    named: dict[str, Path] | None = None,
) -> None:
    """COPY [--from=stage|named context] src... dest, relative to WORKDIR."""
    words = args.split()
    origin = context
    if words[0].startswith("--from="):
        source = words.pop(0).split("=", 1)[1]
        if source in stages:
            origin = stages[source].rootfs
        elif named and source in named:
            origin = named[source]
        else:
            raise ValueError(f"COPY --from={source}: no such stage or named build context")
    *srcs, dest = words
    dest_path = dest if dest.startswith("/") else f"{stage.workdir.rstrip('/')}/{dest}"
    target = stage.rootfs / dest_path.lstrip("/")
    copy_into([origin / s.lstrip("/") for s in srcs], target, dest_path.endswith("/"))


def apply(
    stage: Stage,
    keyword: str,
    args: str,
    stages: dict[str, Stage],
    context: Path,
    named: dict[str, Path] | None = None,
) -> None:
    """One instruction of a stage; unknown keywords fail loudly rather than build a wrong image."""
    stage.history.append(f"{keyword} {args}")
    if keyword == "WORKDIR":
        stage.workdir = args.strip()
        (stage.rootfs / stage.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    elif keyword == "ENV":
        stage.env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    elif keyword == "COPY":
        do_copy(stage, args, stages, context, named)
    elif keyword == "RUN":
        run_in_chroot(stage, args)
    elif keyword == "USER":
        stage.user = args.strip()
    elif keyword == "EXPOSE":
        stage.exposed += [p if "/" in p else f"{p}/tcp" for p in args.split()]
    elif keyword == "VOLUME":
        stage.volumes += json.loads(args)
    elif keyword == "ENTRYPOINT":
        stage.entrypoint = json.loads(args)
    elif keyword == "CMD":
        stage.cmd = json.loads(args)
    else:
        raise ValueError(f"unsupported Dockerfile instruction {keyword}")


def own_kind(reference: str) -> str | None:
    """The kind of IMAGES a FROM names (``localhost/hutch/hutch-spark:0.1.0``), if any."""
    return next((kind for kind, (_, name) in IMAGES.items() if name == reference), None)


def new_stage(args: str, workspace: Path, index: int) -> Stage:
    """FROM <base> [AS name]: a fresh copy of the base rootfs, or of one of our own images
    (built first if not cached), with that image's config, as Docker starts a stage."""
    words = args.split()
    name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(index)
    rootfs = workspace / f"stage-{index}"
    build_log = workspace.parent / "build.log"
    kind = own_kind(words[0])
    if kind is not None:
        parent = parent_image(build_dockerfile_image(kind), workspace / f"parent-{index}")
        subprocess.run(["cp", "-a", str(parent.rootfs), str(rootfs)], check=True)
        return stage_from_config(name, rootfs, build_log, parent)
    if words[0] not in BASE_IMAGES:
        raise ValueError(
            f"FROM {words[0]}: only {sorted(BASE_IMAGES)} (our base rootfs) and our own images "
            f"{sorted(n for _, n in IMAGES.values())} are known"
        )
    subprocess.run(["cp", "-a", str(base_rootfs() / "rootfs"), str(rootfs)], check=True)
    return Stage(name=name, rootfs=rootfs, log=build_log)


def stage_from_config(name: str, rootfs: Path, build_log: Path, parent: ParentImage) -> Stage:
    """A stage that inherits its base image's Env, User, WorkingDir, Entrypoint and Cmd."""
    config = parent.config
    env = dict(item.split("=", 1) for item in config.get("Env", []))
    return Stage(
        name=name,
        rootfs=rootfs,
        log=build_log,
        workdir=config.get("WorkingDir") or "/",
        env=env or dict(DEFAULT_ENV),
        user=config.get("User", ""),
        entrypoint=list(config.get("Entrypoint") or []),
        cmd=list(config.get("Cmd") or []),
        exposed=sorted(config.get("ExposedPorts", {})),
        volumes=sorted(config.get("Volumes", {})),
        history=list(parent.history),
        parent=parent,
    )


def build_stages(
    dockerfile: Path, context: Path, workspace: Path, named: dict[str, Path] | None = None
) -> Stage:
    """Executes every stage in order; returns the last (the image). Each step is logged with
    its time, so a cold build (minutes for the Spark image) shows where it is."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    steps = instructions(dockerfile.read_text())
    for number, (keyword, args) in enumerate(steps, 1):
        began = time.monotonic()
        if keyword == "FROM":
            current = new_stage(args, workspace, len(stages))
            stages[current.name] = current
        elif current is None:
            raise ValueError(f"{dockerfile}: {keyword} before FROM")
        else:
            apply(current, keyword, args, stages, context, named)
        log.info(
            "%s step %d/%d %s %s: %.1fs",
            dockerfile.name, number, len(steps), keyword, args[:60], time.monotonic() - began,
        )  # fmt: skip
    if current is None:
        raise ValueError(f"{dockerfile}: no FROM")
    return current


# --- OCI layout ---------------------------------------------------------------------------------


def _blob(layout: Path, data: bytes, media_type: str) -> dict[str, Any]:
    """Writes a JSON blob by digest; returns its descriptor."""
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


LAYER_MEDIA = "application/vnd.oci.image.layer.v1.tar"
WHITEOUT = ".wh."  # OCI image spec: an empty file .wh.<name> deletes <name> of the layer below


def _sha256_file(path: Path) -> str:
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


def base_layer() -> BaseLayer:
    """The cached base rootfs and its layer tar (packed on first use, then cached beside it)."""
    base = base_rootfs()
    tar, digest_file = base / "layer.tar", base / "layer.sha256"
    if not digest_file.is_file():
        with locked(base.parent / f".{base.name}.layer.lock"):
            if not digest_file.is_file():
                staging = base / "layer.tar.tmp"
                pack_rootfs(base / "rootfs", staging)
                digest = _sha256_file(staging)
                staging.rename(tar)
                digest_file.write_text(digest)
    return BaseLayer(base / "rootfs", tar, digest_file.read_text().strip())


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
    digest = digest or _sha256_file(tar)
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


def image_config(stage: Stage) -> dict[str, Any]:
    """The Dockerfile's runtime settings, as the OCI config Docker would have written."""
    config: dict[str, Any] = {
        "Env": [f"{k}={v}" for k, v in stage.env.items()],
        "WorkingDir": stage.workdir,
        "Entrypoint": stage.entrypoint,
        "Cmd": stage.cmd,
    }
    if stage.user:
        config["User"] = stage.user
    if stage.exposed:
        config["ExposedPorts"] = {p: {} for p in stage.exposed}
    if stage.volumes:
        config["Volumes"] = {v: {} for v in stage.volumes}
    return config


# --- the images -----------------------------------------------------------------------------------


def context_key(
    dockerfile: Path, named: dict[str, Path] | None = None, root: Path = REPO_ROOT
) -> str:
    """Content key: the Dockerfile, the files its COPY steps take from the build context ``root``
    (named contexts' too) and nothing else of it, the base (our own base image's key, when FROM
    names one) and this builder's version. So an image is rebuilt when what it is made of
    changes, not when the README or another product's package does."""
    h = hashlib.sha256(dockerfile.read_bytes())
    h.update(base_rootfs_name().encode())
    h.update(f"builder {BUILDER_VERSION}".encode())
    for keyword, args in instructions(dockerfile.read_text()):
        kind = own_kind(args.split()[0]) if keyword == "FROM" else None
        if kind is not None:
            h.update(image_key(kind, root).encode())
        if keyword != "COPY":
            continue
        words = args.split()
        origin = root
        if words[0].startswith("--from="):
            source = words.pop(0).split("=", 1)[1]
            if not named or source not in named:
                continue  # an earlier stage: its inputs are keyed already
            origin = named[source]
        for src in words[:-1]:
            h.update(_tree_digest(origin / src).encode())
    return h.hexdigest()[:16]


def image_key(kind: str, root: Path = REPO_ROOT) -> str:
    """The cache name of ``kind``'s image built from the context ``root`` (``broker-<key>``);
    named contexts (the Spark Operator's binary) are made first, as their content is keyed."""
    named = {key: make() for key, make in NAMED_CONTEXTS.get(kind, {}).items()}
    return f"{kind}-{context_key(root / IMAGES[kind][0], named, root)}"


def _tree_digest(path: Path) -> str:
    """Names and contents of the files a COPY would take (the ignore rules applied)."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        rel = file.relative_to(path.parent)
        if any(part in SKIP_NAMES or part.endswith(".egg-info") for part in rel.parts):
            continue
        h.update(str(rel).encode() + b"\0" + file.read_bytes())
    return h.hexdigest()


def build_dockerfile_image(kind: str) -> Path:
    """hutch-broker, hutch-operator, hutch-spark or hutch-spark-operator, built from its
    Dockerfile (cached by content); returns the OCI layout dir."""
    rel, name = IMAGES[kind]
    dockerfile = REPO_ROOT / rel
    named = {key: make() for key, make in NAMED_CONTEXTS.get(kind, {}).items()}
    final = binaries.cache_root() / "images" / f"{kind}-{context_key(dockerfile, named)}"

    def build(stage_dir: Path) -> None:
        began = time.monotonic()
        workspace = stage_dir / "work"
        workspace.mkdir()
        last = build_stages(dockerfile, REPO_ROOT, workspace, named)
        packing = time.monotonic()
        base = last.parent or base_layer()
        write_layout(stage_dir / "oci", last.rootfs, image_config(last), name, last.history, base)
        shutil.rmtree(workspace)
        seconds = time.monotonic() - began
        log.info("%s: packed in %.1fs; built in %.1fs", name, time.monotonic() - packing, seconds)
        (stage_dir / "timing").write_text(f"build seconds={seconds:.0f}\n")

    layout = cached_dir(final, build) / "oci"
    final.touch()  # mtime = last use, for prune_images
    prune_images(kind)
    return layout


def prune_images(kind: str, keep: int = KEEP_IMAGES) -> None:
    """Every source change makes a new ~280 MB image; the least recently used beyond ``keep``
    go (several worktrees on one machine each keep theirs among the newest)."""
    dirs = [
        d
        for d in (binaries.cache_root() / "images").glob(f"{kind}-*")
        if (d / ".complete").is_file() and len(d.name) == len(kind) + 17  # not spark-operator-*
    ]
    for stale in sorted(dirs, key=lambda d: d.stat().st_mtime, reverse=True)[keep:]:
        shutil.rmtree(stale, ignore_errors=True)


def build_pause() -> Path:
    """The sandbox image: our static Go pause as /pause, uid 65535, nothing else."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    version = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()
    final = (
        binaries.cache_root() / "images" / f"pause-{digest_of(PAUSE_SOURCE.read_bytes(), version)}"
    )

    def build(stage_dir: Path) -> None:
        rootfs = stage_dir / "rootfs"
        rootfs.mkdir()
        env = {
            **os.environ,
            "CGO_ENABLED": "0",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-buildvcs=false",
            "GOCACHE": str(binaries.cache_root() / "go" / "build"),
            "GO111MODULE": "off",
        }
        subprocess.run(
            [
                go,
                "build",
                "-trimpath",
                "-ldflags",
                "-s -w",
                "-o",
                str(rootfs / "pause"),
                str(PAUSE_SOURCE),
            ],
            check=True,
            env=env,
            cwd=stage_dir,
        )
        config = {"Entrypoint": ["/pause"], "User": "65535:65535", "WorkingDir": "/"}
        write_layout(stage_dir / "oci", rootfs, config, PAUSE_NAME, ["COPY pause /pause"])
        shutil.rmtree(rootfs)

    return cached_dir(final, build) / "oci"


def image_name(layout: Path) -> str:
    """The reference an OCI layout was written for."""
    return (layout / "image-name").read_text().strip()


def import_image(layout: Path, socket: Path) -> None:
    """``ctr -n k8s.io images import`` of a layout streamed as a tar (nothing written twice)."""
    tar = subprocess.Popen(["tar", "-C", str(layout), "-cf", "-", "."], stdout=subprocess.PIPE)
    try:
        subprocess.run(
            [
                "ctr",
                "--address",
                str(socket),
                "-n",
                "k8s.io",
                "images",
                "import",
                "--no-unpack=false",
                "-",
            ],
            stdin=tar.stdout,
            check=True,
            capture_output=True,
        )
    finally:
        if tar.stdout:
            tar.stdout.close()
        tar.wait()


def main(argv: list[str] | None = None) -> int:
    """``build [broker|operator|spark|spark-operator|pause]...``: builds (or finds) and prints
    layouts."""
    parser = argparse.ArgumentParser(
        prog="python -m hutch_localkube.images", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["build"])
    parser.add_argument("kinds", nargs="*", default=["pause", "broker"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    for kind in args.kinds:
        began = time.monotonic()
        layout = build_pause() if kind == "pause" else build_dockerfile_image(kind)
        sys.stdout.write(f"{kind} {layout} {time.monotonic() - began:.1f}s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
