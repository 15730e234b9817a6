"""The one thing pyproject.toml cannot declare stably: the broker's C extensions.

``hutch_broker.store._runs`` is records.decode_run's loop in C, ``hutch_broker.protocol._content``
contentscan.scan_python in C (docs/broker.md, "Native code"). They are optional: without a C
compiler the install still succeeds and the broker runs their Python twins, and says so at
start. The image's build stage has gcc, so the image has it. The
repository's root setup.py (the development install of every package) takes ``extensions``
from here, so the extension is declared once.
"""

from setuptools import Extension, setup


def extensions(prefix: str = "") -> list[Extension]:
    """The broker's C extensions, their sources under ``prefix`` (this directory's path)."""
    return [
        Extension(
            "hutch_broker.store._runs",
            sources=[f"{prefix}hutch_broker/store/_runs.c"],
            libraries=["z"],
            optional=True,
        ),
        Extension(
            "hutch_broker.protocol._content",
            sources=[f"{prefix}hutch_broker/protocol/_content.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]


if __name__ == "__main__":  # as setuptools' build backend runs it
    setup(ext_modules=extensions())
