"""The one thing pyproject.toml cannot declare stably: hutch-spark's C extension.

``hutch_spark._framescan`` is framescan.scan_python's loop in C (docs/spark.md, "Native code").
It is optional: without a C compiler the install still succeeds and the executors run the
loop's Python twin. The image's build stage has gcc, so the image has it. The repository's root
setup.py (the development install of every package) takes ``extensions`` from here, so the
extension is declared once.
"""

from setuptools import Extension, setup


def extensions(prefix: str = "") -> list[Extension]:
    """hutch-spark's C extensions, their sources under ``prefix`` (this directory's path)."""
    return [
        Extension(
            "hutch_spark._framescan",
            sources=[f"{prefix}hutch_spark/_framescan.c"],
            optional=True,
        )
    ]


if __name__ == "__main__":  # as setuptools' build backend runs it
    setup(ext_modules=extensions())
