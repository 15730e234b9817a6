"""Bytecode inside Spark's Python zips (hutch_spark.zipbytecode), imported the way Spark's
Python processes import pyspark: from a zip at the front of sys.path.

Why: the image's change is worth something only if zipimport really takes the ``.pyc`` and
compiles nothing. These count the interpreter's source compiles (zipimport compiles through the
builtin ``compile``) while a package is imported from a zip, before and after the rewrite; the
node test (tests/localkube/test_spark_zipbytecode_node.py) does the same with the image's own
pyspark.zip.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import traceback
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_spark import zipbytecode

MODULES = {
    "__init__.py": "from . import helper\nVALUE = helper.double(21)\n",
    "helper.py": (
        "def double(n):\n    return n * 2\n\n\ndef fail():\n    raise RuntimeError('from the zip')\n"
    ),
    "crlf.py": "X = 1\r\nY = X + 1\r\n",
}


def make_zip(path: Path, package: str, extra: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{package}/", "")
        for name, text in {**MODULES, **(extra or {})}.items():
            archive.writestr(f"{package}/{name}", text)
        archive.writestr(f"{package}/data.json", '{"kept": true}')
    return path


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The file names the interpreter compiles from source meanwhile; the test's packages (all
    named ``zb...``) leave sys.modules afterwards."""
    names: list[str] = []
    real = builtins.compile

    def counting(source: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(str(filename))
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    yield names
    monkeypatch.setattr(builtins, "compile", real)
    for name in [name for name in sys.modules if name.startswith("zb")]:
        del sys.modules[name]


def import_from(monkeypatch: pytest.MonkeyPatch, archive: Path, package: str) -> Any:
    monkeypatch.syspath_prepend(str(archive))
    module = importlib.import_module(package)
    importlib.import_module(f"{package}.crlf")
    return module


def test_a_source_zip_is_compiled_at_every_import(tmp_path, monkeypatch, compiles):
    """The control: what Spark's processes did with the zip as pyspark ships it (Python 3.11's
    zipimport even compiles each module twice: once to name its file, once to run it)."""
    archive = make_zip(tmp_path / "plain.zip", "zbplain")
    assert import_from(monkeypatch, archive, "zbplain").VALUE == 42
    assert sorted(set(compiles)) == [
        f"{archive}/zbplain/{name}" for name in ("__init__.py", "crlf.py", "helper.py")
    ]


def test_a_rewritten_zip_is_imported_without_compiling(tmp_path, monkeypatch, compiles):
    archive = make_zip(tmp_path / "compiled.zip", "zbdone")
    result = zipbytecode.add_bytecode(archive)
    assert result == zipbytecode.Compiled(compiled=3, skipped=())
    compiles.clear()  # the rewrite's own compiles
    module = import_from(monkeypatch, archive, "zbdone")
    assert compiles == []
    assert module.VALUE == 42
    assert sys.modules["zbdone.crlf"].Y == 2
    # The code carries the source's name in the zip, as zipimport's own compile gives it, and
    # a traceback still shows the source line (zipimport serves it from the .py).
    with pytest.raises(RuntimeError) as raised:
        module.helper.fail()
    (*_, last) = traceback.extract_tb(raised.value.__traceback__)
    assert last.filename == f"{archive}/zbdone/helper.py"
    assert last.line == "raise RuntimeError('from the zip')"


def test_the_rewrite_keeps_every_member_and_adds_a_pyc_beside_each_source(tmp_path):
    archive = make_zip(tmp_path / "members.zip", "zbm")
    archive.chmod(0o644)
    with zipfile.ZipFile(archive) as before:
        originals = {info.filename: before.read(info) for info in before.infolist()}
    zipbytecode.add_bytecode(archive)
    with zipfile.ZipFile(archive) as after:
        names = after.namelist()
        assert {name: after.read(name) for name in originals} == originals
        assert names.index("zbm/helper.pyc") == names.index("zbm/helper.py") + 1
        header = after.read("zbm/helper.pyc")[:8]
    assert set(names) - set(originals) == {f"zbm/{n}c" for n in MODULES}
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert header[4:8] == zipbytecode.UNCHECKED_HASH
    assert archive.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["members.zip"]  # no temp file left


def test_running_it_twice_gives_the_same_members(tmp_path):
    """The second run replaces each .pyc rather than adding another (marshal's output is not
    byte-stable between compiles, so the sources and the .pyc headers are compared)."""
    archive = make_zip(tmp_path / "twice.zip", "zbt")

    def members() -> list[tuple[str, bytes]]:
        with zipfile.ZipFile(archive) as read:
            return [(n, read.read(n)[:16] if n.endswith(".pyc") else read.read(n))
                    for n in read.namelist()]  # fmt: skip

    zipbytecode.add_bytecode(archive)
    first = members()
    assert zipbytecode.add_bytecode(archive).compiled == 3
    assert members() == first


def test_a_module_that_does_not_compile_stays_source_and_fails_as_before(
    tmp_path, monkeypatch, compiles
):
    archive = make_zip(tmp_path / "broken.zip", "zbb", {"broken.py": "def f(:\n"})
    assert zipbytecode.add_bytecode(archive).skipped == ("zbb/broken.py",)
    compiles.clear()
    import_from(monkeypatch, archive, "zbb")
    with pytest.raises(SyntaxError):
        importlib.import_module("zbb.broken")
    assert compiles == [f"{archive}/zbb/broken.py"]


def test_a_pyc_for_another_python_is_ignored_and_the_source_compiled(
    tmp_path, monkeypatch, compiles
):
    """A PYSPARK_PYTHON of another minor version meets another magic number: it must import
    as it did before the rewrite, not fail."""
    archive = make_zip(tmp_path / "other.zip", "zbo")
    with zipfile.ZipFile(archive, "a") as add:
        stale = b"\x00\x00\r\n" + zipbytecode.UNCHECKED_HASH + b"\x00" * 8 + b"junk"
        add.writestr("zbo/helper.pyc", stale)
    assert import_from(monkeypatch, archive, "zbo").VALUE == 42
    assert f"{archive}/zbo/helper.py" in compiles


def test_a_file_that_is_not_a_zip_is_refused_and_left_as_it_was(tmp_path, capsys):
    text = tmp_path / "pyspark.zip"
    text.write_bytes(b"not a zip")
    archive = make_zip(tmp_path / "good.zip", "zbg")
    kept = archive.read_bytes()
    with pytest.raises(zipbytecode.ZipBytecodeError, match="not a zip archive"):
        zipbytecode.add_bytecode(text)
    with pytest.raises(SystemExit) as exited:
        zipbytecode.main([str(archive), str(text)])
    assert exited.value.code == 1
    assert f"not zip archives: {text}" in capsys.readouterr().err
    assert text.read_bytes() == b"not a zip"
    assert archive.read_bytes() == kept  # checked before any was rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.zip", "pyspark.zip"]


def test_main_reports_each_archive(tmp_path, capsys):
    archive = make_zip(tmp_path / "lib.zip", "zbr")
    zipbytecode.main([str(archive)])
    assert capsys.readouterr().err == f"zipbytecode: {archive}: 3 modules compiled\n"
    with pytest.raises(SystemExit) as exited:
        zipbytecode.main([])
    assert exited.value.code == 2
