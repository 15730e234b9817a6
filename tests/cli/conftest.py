"""Helpers for hutchctl's unit tests: a Context built from a command line, with fake inputs."""

import pytest
from hutch_cli import arguments
from hutch_cli.verbs.common import Context


@pytest.fixture
def context():
    def make(*argv: str, files: dict[str, str] | None = None, password: str | None = None):
        def read_file(path: str) -> str:
            if files is None or path not in files:
                raise FileNotFoundError(2, "No such file or directory", path)
            return files[path]

        return Context(arguments.parse(list(argv)), read_file, lambda: password)

    return make
