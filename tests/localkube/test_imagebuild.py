"""The quickstart's image phases (hutch_demo.imagebuild): what each run builds, and its bar.

Pure: a stand-in for hutch_localkube.images records the calls, so no image is built here.
"""

from __future__ import annotations

from types import SimpleNamespace

from hutch_demo import imagebuild


def recorder() -> tuple[SimpleNamespace, list[str]]:
    calls: list[str] = []
    images = SimpleNamespace(
        base_rootfs=lambda: calls.append("base rootfs"),
        build_pause=lambda: calls.append("pause"),
        build_dockerfile_image=calls.append,
    )
    return images, calls


def test_make_run_builds_every_image_and_spark_last() -> None:
    images, calls = recorder()
    builder = imagebuild.Builder(images)
    builder.run()
    assert builder.error is None
    assert calls == ["base rootfs", "pause", "broker", "operator", "spark"]
    assert builder.fraction(0.0) == 1.0


def test_spark_local_skips_the_spark_image_and_its_weight_in_the_bar() -> None:
    images, calls = recorder()
    builder = imagebuild.Builder(images, phases=["base rootfs", "pause", "broker", "operator"])
    builder.current, builder.since = "base rootfs", 0.0
    without_spark = builder.fraction(30.0)
    assert without_spark == 30 / (60 + 2 + 20 + 30)  # the Spark image's 210 s are not waited for
    builder.current = None
    builder.run()
    assert calls == ["base rootfs", "pause", "broker", "operator"]
    assert builder.label() == "images ready"
