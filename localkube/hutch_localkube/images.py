"""Container images without Docker: the node tier's pause and Hutch images, from our Dockerfiles.

Why: no image registry is reachable and there is no Docker, yet the node tier must run the very
images a user builds with ``docker build -f docker/broker.Dockerfile``. So this module *reads*
those Dockerfiles (one recipe) and executes them itself: each ``FROM`` stage starts from a
debootstrapped bookworm rootfs with python3 (standing in for ``python:3.11-slim-bookworm``),
``RUN`` runs in a chroot inside a private mount namespace, ``COPY`` copies from the build
context or an earlier stage, and the final stage is packed as a one-layer OCI image layout.
Everything is cached under ``~/.cache/hutch/`` keyed by content. What differs from Docker is in
docs/real-node.md. The interpreter lives in ``dockerfiles`` and the layout writer in
``ocilayout``: the two modules that decide an image's bytes, whose source is part of every
image's key (``BUILDER_SOURCES``); this module resolves, keys, caches and imports images.

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
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hutch_localkube import binaries, dockerfiles, ocilayout

log = logging.getLogger("hutch.k8s.images")

REPO_ROOT = binaries.REPO_ROOT  # the build context of every Dockerfile
PAUSE_SOURCE = binaries.GO_BUILD / "pause" / "pause.go"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-pip and python-is-python3 stand in for what python:3.11-slim has: pip and `python`.
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3")
IMAGE_TAG = "0.1.0"
# The builder's modules that decide an image's bytes (an instruction's semantics, the layout):
# their text is part of every image's cache key, so a change to them rebuilds the images and
# cannot be forgotten. This module is not among them: a change to its caching, keying, logs or
# CLI rebuilds nothing, not the ~5-minute Spark image.
BUILDER_SOURCES = (Path(dockerfiles.__file__), Path(ocilayout.__file__))
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


def base_layer() -> ocilayout.BaseLayer:
    """The cached base rootfs and its layer tar (packed on first use, then cached beside it)."""
    base = base_rootfs()
    tar, digest_file = base / "layer.tar", base / "layer.sha256"
    if not digest_file.is_file():
        with locked(base.parent / f".{base.name}.layer.lock"):
            if not digest_file.is_file():
                staging = base / "layer.tar.tmp"
                ocilayout.pack_rootfs(base / "rootfs", staging)
                digest = ocilayout.sha256_file(staging)
                staging.rename(tar)
                digest_file.write_text(digest)
    return ocilayout.BaseLayer(base / "rootfs", tar, digest_file.read_text().strip())


# --- the images -----------------------------------------------------------------------------------


def own_kind(reference: str) -> str | None:
    """The kind of IMAGES a FROM names (``localhost/hutch/hutch-spark:0.1.0``), if any."""
    return next((kind for kind, (_, name) in IMAGES.items() if name == reference), None)


def builder_digest() -> str:
    """The text of the builder's modules that decide an image's bytes (``BUILDER_SOURCES``)."""
    h = hashlib.sha256()
    for source in BUILDER_SOURCES:
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    return h.hexdigest()


def context_key(
    dockerfile: Path, named: dict[str, Path] | None = None, root: Path = REPO_ROOT
) -> str:
    """Content key: the Dockerfile, the files its COPY steps take from the build context ``root``
    (named contexts' too) and nothing else of it, the base (our own base image's key, when FROM
    names one) and the builder's own source (``builder_digest``). So an image is rebuilt when
    what it is made of or how it is made changes, not when the README or another product's
    package does."""
    h = hashlib.sha256(dockerfile.read_bytes())
    h.update(base_rootfs_name().encode())
    h.update(f"builder {builder_digest()}".encode())
    for keyword, args in dockerfiles.instructions(dockerfile.read_text()):
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
        if any(dockerfiles.skipped(part) for part in rel.parts):
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
        last = dockerfiles.build_stages(dockerfile, REPO_ROOT, workspace, _bases(), named)
        packing = time.monotonic()
        base = last.parent or base_layer()
        config = dockerfiles.image_config(last)
        ocilayout.write_layout(stage_dir / "oci", last.rootfs, config, name, last.history, base)
        shutil.rmtree(workspace)
        seconds = time.monotonic() - began
        log.info("%s: packed in %.1fs; built in %.1fs", name, time.monotonic() - packing, seconds)
        (stage_dir / "timing").write_text(f"build seconds={seconds:.0f}\n")

    layout = cached_dir(final, build) / "oci"
    final.touch()  # mtime = last use, for prune_images
    prune_images(kind)
    return layout


def _bases() -> dockerfiles.Bases:
    """What a FROM may name: the base rootfs, and our own images (built first, cached)."""
    own = {
        name: functools.partial(build_dockerfile_image, kind) for kind, (_, name) in IMAGES.items()
    }
    return dockerfiles.Bases(rootfs=lambda: base_rootfs() / "rootfs", own=own)


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
        ocilayout.write_layout(stage_dir / "oci", rootfs, config, PAUSE_NAME, ["COPY pause /pause"])
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
