"""Dockerfiles executed without Docker: parsed, each FROM stage a rootfs, RUN in a chroot,
COPY with Docker's semantics, the final stage's config as Docker would write it.

Why a module of its own: this code and the OCI layout writer (``ocilayout``) decide an image's
bytes, so the image cache key (``images.context_key``) covers their source text: an edit here
rebuilds the images, one to the caching, keying or CLI around them (``images``) does not. What
a FROM may name is resolved by the caller (``Bases``): the base rootfs and our own images are
built and cached there.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hutch_localkube.ocilayout import ParentImage, parent_image

log = logging.getLogger("hutch.k8s.images")

BASE_IMAGES = {"python:3.11-slim-bookworm"}  # FROM names our base rootfs replaces
DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
SKIP_NAMES = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
# Build leftovers by suffix: setuptools' metadata, and the C extension the development install
# builds in place (broker/hutch_broker/store/_runs.*.so, for the host's Python): an image
# builds its own.
SKIP_SUFFIXES = (".egg-info", ".so")


def skipped(name: str) -> bool:
    """True for a file or directory name no COPY takes (the repository's .dockerignore)."""
    return name in SKIP_NAMES or name.endswith(SKIP_SUFFIXES)


@dataclass(frozen=True)
class Bases:
    """What a FROM may name, resolved by the caller: our base rootfs (for ``BASE_IMAGES``) and
    our own images by reference; each is built (or found cached) only when a FROM calls it."""

    rootfs: Callable[[], Path]  # the base rootfs directory
    own: Mapping[str, Callable[[], Path]]  # reference -> that image's OCI layout


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
    return {n for n in names if skipped(n)}


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


def new_stage(args: str, workspace: Path, index: int, bases: Bases) -> Stage:
    """FROM <base> [AS name]: a fresh copy of the base rootfs, or of one of our own images
    (built first if not cached), with that image's config, as Docker starts a stage."""
    words = args.split()
    name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(index)
    rootfs = workspace / f"stage-{index}"
    build_log = workspace.parent / "build.log"
    own = bases.own.get(words[0])
    if own is not None:
        parent = parent_image(own(), workspace / f"parent-{index}")
        subprocess.run(["cp", "-a", str(parent.rootfs), str(rootfs)], check=True)
        return stage_from_config(name, rootfs, build_log, parent)
    if words[0] not in BASE_IMAGES:
        raise ValueError(
            f"FROM {words[0]}: only {sorted(BASE_IMAGES)} (our base rootfs) and our own images "
            f"{sorted(bases.own)} are known"
        )
    subprocess.run(["cp", "-a", str(bases.rootfs()), str(rootfs)], check=True)
    return Stage(name=name, rootfs=rootfs, log=build_log)


def build_stages(
    dockerfile: Path,
    context: Path,
    workspace: Path,
    bases: Bases,
    named: dict[str, Path] | None = None,
) -> Stage:
    """Executes every stage in order; returns the last (the image). Each step is logged with
    its time, so a cold build (minutes for the Spark image) shows where it is."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    steps = instructions(dockerfile.read_text())
    for number, (keyword, args) in enumerate(steps, 1):
        began = time.monotonic()
        if keyword == "FROM":
            current = new_stage(args, workspace, len(stages), bases)
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
