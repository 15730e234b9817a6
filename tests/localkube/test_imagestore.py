"""The node's image store kept between starts (hutch_localkube.imagestore).

Why: a node start imports only the images whose digest changed, and never lets a container of
an earlier run reach the new kubelet. The decision is pure and pinned first; then the same
functions the plane calls run against a real containerd (its CRI plugin off, so no kubelet,
bridge or node lock is needed): a second load imports nothing, a changed image replaces the
stored one, and containers left in the store are removed with their snapshots.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hutch_localkube import binaries, imagestore, ocilayout, realnode

LISTING = """\
REF                               TYPE                                       DIGEST                                                                  SIZE     PLATFORMS   LABELS
localhost/hutch/pause:3.10        application/vnd.oci.image.manifest.v1+json sha256:9076502b276be095fd3e95f2d02b6dd394c00a28a0425faae1b4f8ad7b3ec3a1 1.4 MiB  linux/amd64 -
localhost/hutch/hutch-spark:0.1.0 application/vnd.oci.image.manifest.v1+json sha256:d42ae8556c364f09545ff3b4922fc9fe20f9bf3e27fdce7cf9fc65809e40fea9 978 MiB  linux/amd64 -
"""


def layout(tmp: Path, name: str, content: str) -> Path:
    """A one-file OCI layout named ``name``; another ``content`` gives another digest."""
    rootfs = tmp / f"rootfs-{content}"
    rootfs.mkdir()
    (rootfs / "pause").write_text(content)
    oci = tmp / f"oci-{content}"
    ocilayout.write_layout(oci, rootfs, {"Entrypoint": ["/pause"]}, name, ["COPY pause /pause"])
    return oci


def test_the_listing_parses_into_references_and_digests():
    assert imagestore.parse_images(LISTING) == {
        "localhost/hutch/pause:3.10": "sha256:"
        "9076502b276be095fd3e95f2d02b6dd394c00a28a0425faae1b4f8ad7b3ec3a1",
        "localhost/hutch/hutch-spark:0.1.0": "sha256:"
        "d42ae8556c364f09545ff3b4922fc9fe20f9bf3e27fdce7cf9fc65809e40fea9",
    }
    assert imagestore.parse_images(LISTING.splitlines()[0]) == {}


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_the_plan_imports_what_is_missing_or_changed_and_removes_the_old_version(
    tmp_path: Path,
):
    same, changed, new = (
        layout(tmp_path, f"localhost/x/{n}:1", n) for n in ("same", "changed", "new")
    )
    stored = {
        "localhost/x/same:1": imagestore.layout_digest(same),
        "localhost/x/changed:1": "sha256:" + "0" * 64,
        "localhost/x/unused:1": "sha256:" + "1" * 64,  # not wanted now: stays (hutch-spark)
    }
    wanted = {"localhost/x/same:1": same, "localhost/x/changed:1": changed,
              "localhost/x/new:1": new}  # fmt: skip
    plan = imagestore.plan(stored, wanted)
    assert plan.remove == ("localhost/x/changed:1",)
    assert plan.load == (changed, new)
    assert imagestore.plan({**stored, "localhost/x/changed:1": imagestore.layout_digest(changed),
                            "localhost/x/new:1": imagestore.layout_digest(new)},
                           wanted) == imagestore.Plan((), ())  # fmt: skip


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_the_plan_removes_the_cri_plugins_id_references_to_versions_no_name_holds(
    tmp_path: Path,
):
    """The CRI plugin names a reference of its own by image ID; left alone, it kept every
    old version of hutch-spark (1 GB of layers each) in the store after its name moved on."""
    same, changed = (layout(tmp_path, f"localhost/x/{n}:1", n) for n in ("same", "changed"))
    old, unused = "sha256:" + "0" * 64, "sha256:" + "1" * 64
    ids = {f"sha256:{n}" + "a" * 63: digest for n, digest in enumerate(
        [old, imagestore.layout_digest(same), unused, imagestore.layout_digest(changed)])}  # fmt: skip
    stored = {
        "localhost/x/same:1": imagestore.layout_digest(same),
        "localhost/x/changed:1": old,
        "localhost/x/unused:1": unused,  # not wanted now, still named: its ID stays
        **ids,
    }
    wanted = {"localhost/x/same:1": same, "localhost/x/changed:1": changed}
    plan = imagestore.plan(stored, wanted)
    # Only the old version's ID goes; the new version's ID (already there) stays.
    assert plan.remove == ("localhost/x/changed:1", "sha256:0" + "a" * 63)
    assert plan.load == (changed,)
    orphan = {"sha256:" + "b" * 64: "sha256:" + "2" * 64}  # a version removed by an earlier start
    assert imagestore.plan({**stored, **orphan}, wanted).remove == (
        "localhost/x/changed:1", "sha256:0" + "a" * 63, "sha256:" + "b" * 64)  # fmt: skip
    assert not imagestore.is_id_reference("localhost/x/sha256:1")
    assert not imagestore.is_id_reference("sha256:" + "A" * 64)


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_the_digest_is_the_one_the_layouts_index_names(tmp_path: Path):
    oci = layout(tmp_path, "localhost/x/y:1", "a")
    index = json.loads((oci / "index.json").read_text())
    assert imagestore.layout_digest(oci) == index["manifests"][0]["digest"]
    assert imagestore.layout_digest(oci) != imagestore.layout_digest(
        layout(tmp_path, "localhost/x/y:1", "b")
    )


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_the_store_is_under_the_cache_and_keyed_by_containerd_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fake = tmp_path / "containerd"
    fake.write_text("#!/bin/sh\necho containerd x 1.6.20\n")
    fake.chmod(0o755)
    monkeypatch.setenv("HUTCH_CACHE", str(tmp_path / "cache"))
    first = imagestore.root_dir(fake)
    assert first.parent == tmp_path / "cache" / "containerd"
    fake.write_text("#!/bin/sh\necho containerd x 2.0.0\n")
    assert imagestore.root_dir(fake) != first


@contextlib.contextmanager
def containerd() -> Iterator[tuple[imagestore.Ctr, Path]]:
    """A containerd of its own (root, state and socket in a temp dir, no CRI plugin)."""
    if not realnode.CONTAINERD.exists():
        message = "containerd is not installed (scripts/install-node-deps.sh)"
        if binaries.k8s_required():
            pytest.fail(message)
        pytest.skip(message)
    base = Path(tempfile.mkdtemp(prefix="hutch-store-"))
    socket = base / "c.sock"
    (base / "c.toml").write_text(
        f'version = 2\nroot = "{base / "root"}"\nstate = "{base / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{socket}"\n'
    )

    def ctr(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(realnode.CTR), "--address", str(socket), "-n", "k8s.io", *args],
            capture_output=True, text=True, check=True,
        )  # fmt: skip

    with (base / "containerd.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(realnode.CONTAINERD), f"--config={base / 'c.toml'}"], stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([str(realnode.CTR), "--address", str(socket), "version"],
                             capture_output=True, check=False).returncode != 0:  # fmt: skip
            assert proc.poll() is None, (base / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer in 30 s"
            time.sleep(0.1)
        yield ctr, socket
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.k8s
def test_a_real_containerd_loads_once_replaces_a_changed_image_and_drops_left_containers(
    tmp_path: Path,
):
    name = "localhost/x/store:1"
    old, new = layout(tmp_path, name, "old"), layout(tmp_path, name, "new")
    with containerd() as (ctr, socket):
        assert imagestore.load(ctr, socket, [old]) == [name]
        assert imagestore.load(ctr, socket, [old]) == []  # stored: nothing imported again
        stored = imagestore.parse_images(ctr("images", "ls").stdout)
        assert stored == {name: imagestore.layout_digest(old)}
        # What the node's CRI plugin adds to every image: a reference by image ID.
        ctr("images", "tag", name, "sha256:" + "c" * 64)

        assert imagestore.load(ctr, socket, [new]) == [name]
        stored = imagestore.parse_images(ctr("images", "ls").stdout)
        assert stored == {name: imagestore.layout_digest(new)}
        # The old version's content went with it (one version per image in the store).
        content = ctr("content", "ls", "-q").stdout.split()
        assert imagestore.layout_digest(old) not in content
        assert imagestore.layout_digest(new) in content

        for cid in ("left-1", "left-2"):  # what an earlier run's Pods leave in the metadata
            ctr("containers", "create", name, cid)
        assert len(ctr("snapshots", "ls").stdout.splitlines()) > 2  # 1 image layer + 2 active
        assert imagestore.remove_containers(ctr) == 2
        assert ctr("containers", "ls", "-q").stdout.split() == []
        active = [line for line in ctr("snapshots", "ls").stdout.splitlines() if "Active" in line]
        assert active == []
        assert imagestore.remove_containers(ctr) == 0
