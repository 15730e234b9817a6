"""The Dockerfile interpreter behind the node tier's images (hutch_localkube.images).

Why: the node tier's claim is "one recipe": the images tested on the real node are built by
reading docker/*.Dockerfile and spark/jobs/Dockerfile. Most tests here pin, without root, the
parts that decide what an image is: the instruction parser, Docker's COPY semantics, the OCI
config, and a loud failure on anything the interpreter does not know (so a Dockerfile change can
never silently build a different image). The hutch-spark image is also run on the real node
(node tier): its user, Java, pyspark and its entrypoint, as Spark's Pods will meet them.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import waiting
from hutch_localkube import dockerfiles, images, ocilayout

REPO = Path(__file__).resolve().parents[2]


def test_broker_dockerfile_parses_into_the_instructions_we_execute():
    parsed = dockerfiles.instructions((REPO / "docker" / "broker.Dockerfile").read_text())
    keywords = [keyword for keyword, _ in parsed]
    assert keywords.count("FROM") == 2
    assert set(keywords) <= {
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "ENV",
        "USER",
        "EXPOSE",
        "VOLUME",
        "ENTRYPOINT",
        "CMD",
    }
    run_steps = [args for keyword, args in parsed if keyword == "RUN"]
    # The backslash continuation is one RUN, as Docker sees it.
    assert any("pip install" in step and "useradd --uid 1000" in step for step in run_steps)


def test_runtime_settings_become_the_oci_config(tmp_path: Path):
    stage = dockerfiles.Stage(name="final", rootfs=tmp_path, log=tmp_path / "log")
    text = """
    ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
    USER 1000:1000
    EXPOSE 5672 15672
    VOLUME ["/var/lib/hutch"]
    ENTRYPOINT ["hutch-broker"]
    CMD ["--data-dir", "/var/lib/hutch"]
    """
    for keyword, args in dockerfiles.instructions(text):
        dockerfiles.apply(stage, keyword, args, {}, tmp_path)
    config = dockerfiles.image_config(stage)
    assert config["User"] == "1000:1000"
    assert "PYTHONUNBUFFERED=1" in config["Env"]
    assert config["ExposedPorts"] == {"5672/tcp": {}, "15672/tcp": {}}
    assert config["Volumes"] == {"/var/lib/hutch": {}}
    assert (config["Entrypoint"], config["Cmd"]) == (
        ["hutch-broker"],
        ["--data-dir", "/var/lib/hutch"],
    )


def test_copy_follows_docker_semantics(tmp_path: Path):
    context = tmp_path / "ctx"
    (context / "broker" / "pkg" / "__pycache__").mkdir(parents=True)
    (context / "broker" / "pkg" / "a.py").write_text("a")
    (context / "broker" / "pkg" / "__pycache__" / "a.pyc").write_text("x")
    (context / "pyproject.toml").write_text("p")
    (context / "README.md").write_text("r")
    rootfs = tmp_path / "rootfs"
    stage = dockerfiles.Stage(name="build", rootfs=rootfs, log=tmp_path / "log")
    for keyword, args in dockerfiles.instructions(
        "WORKDIR /src\nCOPY pyproject.toml README.md ./\nCOPY broker/ broker/\n"
    ):
        dockerfiles.apply(stage, keyword, args, {}, context)
    src = rootfs / "src"
    assert sorted(p.name for p in src.iterdir()) == ["README.md", "broker", "pyproject.toml"]
    # A directory source copies its contents; .dockerignore'd caches stay out.
    assert (src / "broker" / "pkg" / "a.py").read_text() == "a"
    assert not (src / "broker" / "pkg" / "__pycache__").exists()


@pytest.mark.parametrize("line", ["ADD x /x", "HEALTHCHECK CMD true", "ARG BASE"])
def test_an_unknown_instruction_fails_instead_of_building_something_else(tmp_path: Path, line: str):
    stage = dockerfiles.Stage(name="s", rootfs=tmp_path, log=tmp_path / "log")
    ((keyword, args),) = dockerfiles.instructions(line)
    with pytest.raises(ValueError, match="unsupported Dockerfile instruction"):
        dockerfiles.apply(stage, keyword, args, {}, tmp_path)


def test_dockerignore_and_the_interpreter_skip_the_same_names():
    ignored = (REPO / ".dockerignore").read_text()
    for name in dockerfiles.SKIP_NAMES:
        assert f"**/{name}" in ignored
    for suffix in dockerfiles.SKIP_SUFFIXES:
        assert f"**/*{suffix}" in ignored


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_layout_is_an_oci_image_containerd_can_import(tmp_path: Path):
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "pause").write_text("#!/bin/true\n")
    layout = tmp_path / "oci"
    ocilayout.write_layout(layout, rootfs, {"Entrypoint": ["/pause"]}, "localhost/x/y:1", ["COPY"])
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/x/y:1"
    manifest = json.loads((layout / "blobs" / "sha256" / entry["digest"].split(":")[1]).read_text())
    (layer,) = manifest["layers"]
    config_blob = layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]
    config = json.loads(config_blob.read_text())
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]  # uncompressed: digest = diff_id
    assert (layout / "blobs" / "sha256" / layer["digest"].split(":")[1]).stat().st_size == layer[
        "size"
    ]


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_a_layer_over_the_base_holds_only_what_the_build_changed(tmp_path: Path):
    lower = tmp_path / "lower"
    (lower / "etc").mkdir(parents=True)
    (lower / "etc" / "passwd").write_text("root:x:0:0\n")
    (lower / "etc" / "hostname").write_text("base\n")
    (lower / "usr" / "share" / "doc").mkdir(parents=True)
    (lower / "usr" / "share" / "doc" / "README").write_text("docs\n")
    (lower / "bin").mkdir()
    (lower / "bin" / "sh").symlink_to("dash")
    upper = tmp_path / "upper"
    subprocess.run(["cp", "-a", str(lower), str(upper)], check=True)  # as a FROM stage starts
    with (upper / "etc" / "passwd").open("a") as passwd:  # RUN useradd
        passwd.write("hutch:x:1000:1000\n")
    (upper / "usr" / "local").mkdir()
    (upper / "usr" / "local" / "app.py").write_text("print()\n")
    shutil.rmtree(upper / "usr" / "share" / "doc")

    added, whiteouts = ocilayout.layer_changes(lower, upper)
    assert added == ["etc/passwd", "usr", "usr/local", "usr/local/app.py", "usr/share"]
    assert whiteouts == ["usr/share/.wh.doc"]  # not one per file inside it

    layer = tmp_path / "layer.tar"
    ocilayout.pack_changes(lower, upper, layer)
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {f"./{p}" for p in added + whiteouts}
        assert members["./usr/share/.wh.doc"].size == 0
        passwd = tar.extractfile("./etc/passwd")
        assert passwd is not None
        assert passwd.read() == b"root:x:0:0\nhutch:x:1000:1000\n"
        assert members["./etc/passwd"].uname == ""  # numeric owners only


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_a_layout_over_a_base_lists_the_shared_base_layer_first(tmp_path: Path):
    lower = tmp_path / "base"
    lower.mkdir()
    (lower / "base.txt").write_text("shared\n")
    base_tar = tmp_path / "base.tar"
    ocilayout.pack_rootfs(lower, base_tar)
    digest = hashlib.sha256(base_tar.read_bytes()).hexdigest()
    base = ocilayout.BaseLayer(lower, base_tar, digest)
    upper = tmp_path / "upper"
    subprocess.run(["cp", "-a", str(lower), str(upper)], check=True)
    (upper / "app").write_text("mine\n")
    layout = tmp_path / "oci"
    ocilayout.write_layout(layout, upper, {}, "localhost/x/y:1", ["COPY"], base)
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((layout / "blobs" / "sha256" / entry["digest"][7:]).read_text())
    first, second = manifest["layers"]
    assert first["digest"] == f"sha256:{digest}"
    with tarfile.open(layout / "blobs" / "sha256" / second["digest"][7:]) as tar:
        assert tar.getnames() == ["./app"]
    assert base_tar.is_file()  # the cached base tar is shared, never moved


def test_copy_from_a_named_build_context(tmp_path: Path):
    """``COPY --from=NAME`` takes a ``--build-context NAME=DIR``; an unknown name fails."""
    named = tmp_path / "bin"
    named.mkdir()
    (named / "tool").write_text("#!/bin/true\n")
    stage = dockerfiles.Stage(name="s", rootfs=tmp_path / "rootfs", log=tmp_path / "log")
    dockerfiles.apply(
        stage, "COPY", "--from=tools tool /usr/bin/tool", {}, tmp_path, {"tools": named}
    )
    assert (tmp_path / "rootfs" / "usr" / "bin" / "tool").read_text() == "#!/bin/true\n"
    with pytest.raises(ValueError, match="no such stage or named build context"):
        dockerfiles.apply(stage, "COPY", "--from=other tool /x", {}, tmp_path, {"tools": named})


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_an_image_from_our_own_image_reuses_its_layers_and_config(tmp_path: Path):
    """FROM localhost/hutch/...: the parent's layers (whiteouts applied) are the new rootfs,
    its config the stage's start, and the new layout lists its layers, then ours."""
    base = tmp_path / "base"
    (base / "etc").mkdir(parents=True)
    (base / "etc" / "gone").write_text("deleted by the parent\n")
    (base / "etc" / "kept").write_text("kept\n")
    base_tar = tmp_path / "base.tar"
    ocilayout.pack_rootfs(base, base_tar)
    digest = hashlib.sha256(base_tar.read_bytes()).hexdigest()
    upper = tmp_path / "parent-rootfs"
    subprocess.run(["cp", "-a", str(base), str(upper)], check=True)
    (upper / "etc" / "gone").unlink()
    (upper / "opt").mkdir()
    (upper / "opt" / "spark").write_text("spark\n")
    parent_layout = tmp_path / "parent-oci"
    config = {"Env": ["SPARK_HOME=/opt/spark"], "User": "185:185", "WorkingDir": "/opt",
              "Entrypoint": ["/usr/bin/tini"]}  # fmt: skip
    ocilayout.write_layout(parent_layout, upper, config, "localhost/hutch/p:1", ["RUN x"],
                        ocilayout.BaseLayer(base, base_tar, digest))  # fmt: skip

    parent = ocilayout.parent_image(parent_layout, tmp_path / "unpacked")
    assert (parent.rootfs / "etc" / "kept").read_text() == "kept\n"
    assert not (parent.rootfs / "etc" / "gone").exists()  # the whiteout applied
    assert (parent.rootfs / "opt" / "spark").read_text() == "spark\n"
    stage = dockerfiles.stage_from_config("0", tmp_path / "child", tmp_path / "log", parent)
    assert (stage.user, stage.workdir, stage.entrypoint) == ("185:185", "/opt", ["/usr/bin/tini"])
    assert stage.env == {"SPARK_HOME": "/opt/spark"}

    subprocess.run(["cp", "-a", str(parent.rootfs), str(stage.rootfs)], check=True)
    (stage.rootfs / "usr").mkdir()
    (stage.rootfs / "usr" / "operator").write_text("bin\n")
    child = tmp_path / "child-oci"
    ocilayout.write_layout(child, stage.rootfs, {}, "localhost/hutch/c:1", ["COPY"], parent)
    (entry,) = json.loads((child / "index.json").read_text())["manifests"]
    manifest = json.loads((child / "blobs" / "sha256" / entry["digest"][7:]).read_text())
    assert [layer["digest"][7:] for layer in manifest["layers"][:2]] == [
        d for _, d in parent.layers
    ]
    with tarfile.open(child / "blobs" / "sha256" / manifest["layers"][2]["digest"][7:]) as tar:
        assert tar.getnames() == ["./usr", "./usr/operator"]


# -- each image from only what it runs -----------------------------------------------------------

PRODUCTS = {"broker": "hutch_broker", "operator": "hutch_operator", "spark": "hutch_spark"}
# What each image is built from: its product, and for the broker's the CLI (hutchctl, and the
# perf-test generator `kubectl hutch perf-test` runs as a Job in the broker image).
SOURCES = {"broker": ("broker", "cli"), "operator": ("operator",), "spark": ("spark",)}


def a_context(tmp_path: Path) -> Path:
    """A copy of the build context's parts any image could take: Dockerfiles, every product's
    package, the root pyproject and the README."""
    root = tmp_path / "context"
    for part in ("docker", "broker", "operator", "spark", "cli"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, root / name)
    return root


def test_an_image_key_changes_with_its_own_files_only(tmp_path: Path):
    root = a_context(tmp_path)

    def keys() -> dict[str, str]:
        return {kind: images.image_key(kind, root) for kind in PRODUCTS}

    before = keys()
    assert len(set(before.values())) == 3
    # Not the README, the root pyproject or the tests.
    (root / "README.md").write_text("rewritten")
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# edit\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("# edit\n")
    assert keys() == before
    # An edit to one package changes the keys of exactly the images built from it.
    for part in ("broker", "operator", "spark", "cli"):
        (root / part / f"hutch_{part}" / "__init__.py").write_text(f"# an edit to {part}/\n")
        after = keys()
        changed = {kind for kind in PRODUCTS if after[kind] != before[kind]}
        assert changed == {kind for kind, parts in SOURCES.items() if part in parts}, part
        before = after
    # Its Dockerfile, its distribution's pyproject and the builder's version are part of it.
    (root / "docker" / "broker.Dockerfile").write_text(
        (root / "docker" / "broker.Dockerfile").read_text() + "# edit\n"
    )
    (root / "spark" / "pyproject.toml").write_text("# edit\n")
    after = keys()
    assert after["broker"] != before["broker"] and after["spark"] != before["spark"]
    assert after["operator"] == before["operator"]


def test_the_builders_own_source_is_in_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An edit to a module that decides an image's bytes changes every image's key, so it
    rebuilds them: there is no version to bump by hand and forget (it was BUILDER_VERSION)."""
    assert set(images.BUILDER_SOURCES) == {
        Path(inspect.getsourcefile(code) or "")
        for code in (dockerfiles.build_stages, dockerfiles.apply, ocilayout.write_layout)
    }
    root = a_context(tmp_path)
    copies = []
    for source in images.BUILDER_SOURCES:
        copy = tmp_path / "builder" / source.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copy2(source, copy)
        copies.append(copy)
    monkeypatch.setattr(images, "BUILDER_SOURCES", tuple(copies))

    def keys() -> dict[str, str]:
        return {kind: images.image_key(kind, root) for kind in PRODUCTS}

    before = keys()
    for copy in copies:
        copy.write_text(copy.read_text().replace('"""', '"""An edit. ', 1))
        after = keys()
        assert all(after[kind] != before[kind] for kind in PRODUCTS), copy.name
        before = after
    assert keys() == before  # and nothing else moves it


def requirement_names(requirements: list[str]) -> dict[str, str]:
    """``{name: requirement}`` of PEP 508 strings, comments already stripped by TOML."""
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower(): r for r in requirements}


def test_each_product_distribution_pins_what_the_development_install_pins():
    root = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pinned = requirement_names(root["dependencies"])
    for extra in ("operator", "spark"):
        pinned.update(requirement_names(root["optional-dependencies"][extra]))
    for part in ("broker", "operator", "spark", "cli"):
        package = f"hutch_{part}"
        project = tomllib.loads((REPO / part / "pyproject.toml").read_text())["project"]
        assert project["version"] == root["version"], part
        for name, requirement in requirement_names(project["dependencies"]).items():
            assert pinned[name] == requirement, f"{part}/pyproject.toml: {requirement}"
        # Every third-party module the package imports is one of its dependencies.
        third_party = top_level_imports(REPO / part / package) - set(sys.stdlib_module_names)
        third_party -= {package, "__future__"}
        modules = {"pyyaml": "yaml", "prometheus-client": "prometheus_client"}
        provided = {
            modules.get(name, name.replace("-", "_"))
            for name in requirement_names(project["dependencies"])
        }
        assert third_party <= provided, f"{part}: imports {sorted(third_party - provided)}"


def top_level_imports(package: Path) -> set[str]:
    """The first name of every absolute import in a package's modules."""
    names: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_spark_operator_dockerfile_builds_on_hutch_spark():
    parsed = dockerfiles.instructions((REPO / "docker" / "spark-operator.Dockerfile").read_text())
    (base,) = [args for keyword, args in parsed if keyword == "FROM"]
    assert images.own_kind(base) == "spark"  # the jobs' Spark is the controller's spark-submit
    assert "COPY" in dict(parsed) and "--from=spark-operator-bin" in dict(parsed)["COPY"]
    assert set(images.NAMED_CONTEXTS["spark-operator"]) == {"spark-operator-bin"}
    spark = dockerfiles.instructions((REPO / "spark" / "jobs" / "Dockerfile").read_text())
    assert ("ENV", "SPARK_HOME=/opt/spark") in spark  # the operator runs $SPARK_HOME/bin/...


# -- hutch-spark (spark/jobs/Dockerfile), built and run on the real node ------------------------


def oci_config(layout: Path) -> dict[str, Any]:
    """The image config of a one-manifest OCI layout."""
    blobs = layout / "blobs" / "sha256"
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    return dict(json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text()))


def layer_members(layout: Path) -> set[str]:
    """Every path in the layers of a one-manifest OCI layout."""
    blobs = layout / "blobs" / "sha256"
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    members: set[str] = set()
    for layer in manifest["layers"]:
        with tarfile.open(blobs / layer["digest"].split(":")[1]) as tar:
            members.update(tar.getnames())
    return members


def test_spark_dockerfile_is_one_recipe_the_interpreter_executes():
    parsed = dockerfiles.instructions((REPO / "spark" / "jobs" / "Dockerfile").read_text())
    froms = [args for keyword, args in parsed if keyword == "FROM"]
    assert [f.split()[0] for f in froms] == ["python:3.11-slim-bookworm"] * 2
    assert images.IMAGES["spark"] == ("spark/jobs/Dockerfile", "localhost/hutch/hutch-spark:0.1.0")
    run_steps = " ".join(args for keyword, args in parsed if keyword == "RUN")
    assert "openjdk-17-jre-headless" in run_steps
    # hutch_spark's own distribution: pyspark and pyarrow at spark/pyproject.toml's pins, from PyPI
    assert "./spark" in run_steps and "hutch_spark-" in run_steps


@pytest.mark.k8s  # explicit: the plugin marks plane users after `-m` selection (make unit)
def test_spark_image_runs_java_pyspark_and_our_entrypoint_as_uid_185(
    node: Any, spark_image: str, k8s_namespace: str
):
    """In the node's containerd, through the image's own ENTRYPOINT: a pass-through command
    sees uid 185, Java 17 and pyspark 4.3.0 with hutch_spark, and a JVM that must use the
    class-data archive (``-Xshare:on``) starts with it, as unpacked on the node (the JVM
    checks each jar's size and time); the ``executor`` role without the environment Spark
    gives it fails with our message (the entrypoint is ours). No layer holds an /etc/hosts:
    the build's RUN steps get one mounted, as docker's do, and a Pod's comes from the kubelet."""
    layout = images.build_dockerfile_image("spark")
    config = oci_config(layout)["config"]
    assert "./etc/hosts" not in layer_members(layout)
    assert config["User"] == "185:185"
    assert config["Entrypoint"] == [
        "/usr/bin/tini", "-s", "--", "python3", "-m", "hutch_spark.entrypoint",
    ]  # fmt: skip
    probe = (
        "id -u; java -version 2>&1 | head -1; "
        "python3 -c 'import pyspark, hutch_spark; print(pyspark.__version__)'; "
        'java -Xshare:on -XX:SharedArchiveFile="$HUTCH_SPARK_CLASS_DATA" '
        '-cp "$(cat "$HUTCH_SPARK_CLASS_DATA.classpath")" -version 2>&1 | head -1'
    )
    containers = [
        {"name": "probe", "image": spark_image, "args": ["sh", "-c", probe]},
        {"name": "executor", "image": spark_image, "args": ["executor"]},
    ]
    for container in containers:
        container["imagePullPolicy"] = "Never"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "spark-image"},
        "spec": {"restartPolicy": "Never", "containers": containers},
    }
    node.create(f"/api/v1/namespaces/{k8s_namespace}/pods", pod)

    def finished() -> dict[str, Any] | None:
        _, got = node.api("GET", f"/api/v1/namespaces/{k8s_namespace}/pods/spark-image")
        statuses = got.get("status", {}).get("containerStatuses") or []
        done = {s["name"]: s["state"].get("terminated") for s in statuses}
        return done if len(done) == 2 and all(done.values()) else None

    done = waiting.wait_for(finished, timeout=180, interval=0.5, what="both containers to end")
    logs = {
        name: node.kubectl("logs", "-n", k8s_namespace, "spark-image", "-c", name).stdout
        for name in ("probe", "executor")
    }
    assert done["probe"]["exitCode"] == 0, logs
    assert done["probe"]["containerID"].startswith("containerd://")
    uid, java, version, shared = logs["probe"].strip().splitlines()
    assert uid == "185"
    assert java.startswith('openjdk version "17.')
    assert shared == java, logs["probe"]  # not "Unable to use shared archive"
    assert version == "4.3.0"
    assert done["executor"]["exitCode"] == 2, logs
    assert "executor: SPARK_DRIVER_URL" in logs["executor"]


# -- each image holds only its own product, as built for the node -------------------------------

FOREIGN = {  # what another product brings: its package, and the dependencies only it has
    "broker": {"hutch_operator", "hutch_spark", "kopf", "kubernetes", "pyspark", "pyarrow",
               "pika"},
    "operator": {"hutch_broker", "hutch_spark", "hutch_cli", "pamqp", "uvloop", "pyspark",
                 "pyarrow", "pika"},
    "spark": {"hutch_broker", "hutch_operator", "hutch_cli", "pamqp", "uvloop", "kopf",
              "kubernetes", "aiohttp"},
}  # fmt: skip


def installed_distributions(layout: Path) -> set[str]:
    """Top-level names under the image's site-/dist-packages: importable packages and modules,
    and distributions by their ``.dist-info`` (``hutch_broker-0.1.0.dist-info`` is hutch_broker)."""
    found: set[str] = set()
    for member in layer_members(layout):
        parts = Path(member).parts
        for index, part in enumerate(parts[:-1]):
            if part in {"site-packages", "dist-packages"}:
                name = parts[index + 1].split("-")[0].removesuffix(".py").lower()
                found.add(name)
    return found


def assert_only_its_own_product(kind: str) -> None:
    layout = images.build_dockerfile_image(kind)
    installed = installed_distributions(layout)
    assert {PRODUCTS[kind]} | {f"hutch_{part}" for part in SOURCES[kind]} <= installed, sorted(
        installed
    )
    assert installed & FOREIGN[kind] == set(), f"{kind} image holds {installed & FOREIGN[kind]}"
    build_stage = [m for m in layer_members(layout) if m == "./src" or m.startswith("./src/")]
    assert build_stage == []  # the build stage's sources stay in the build stage


@pytest.mark.k8s
@pytest.mark.parametrize("kind", ["broker", "operator"])
def test_broker_and_operator_images_hold_only_their_own_product(node: Any, kind: str):
    """The images the node runs (built and imported by ``node``): the broker's has the broker
    and the CLI (the perf-test Job runs in it) but no operator or Spark code nor their
    dependencies, and the operator's none of the broker's or the CLI's."""
    assert_only_its_own_product(kind)


@pytest.mark.k8s
def test_the_spark_image_holds_only_hutch_spark(spark_image: str):
    """hutch-spark as imported for the Spark Pods: hutch_spark, pyspark, pyarrow and pika, and
    no broker, operator or CLI code."""
    assert {"pyspark", "pyarrow", "pika"} <= installed_distributions(
        images.build_dockerfile_image("spark")
    )
    assert_only_its_own_product("spark")
