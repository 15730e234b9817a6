"""Spark's Python archives with their bytecode inside, compiled once when the image is built.

Why: every Python process Spark starts (the driver's, each executor's worker daemon, and the
streaming source's runner, one per query) gets ``$SPARK_HOME/python/lib/pyspark.zip`` and
py4j's zip at the front of its PYTHONPATH (Spark's ``PythonUtils.sparkPythonPath``, merged
first by ``PythonWorkerFactory``), so it imports pyspark from the zip, not from the installed
package. The zips hold sources only, and zipimport never writes bytecode, so each of those
processes compiled every pyspark module it imported: about half of a streaming runner's
start-up CPU, paid again by every query (docs/spark.md). This rewrites a zip with a ``.pyc``
beside each ``.py``, where zipimport looks first.

The ``.pyc`` files are unchecked hash-based ones (PEP 552): zipimport's timestamp check compares
the entry's DOS time, read in the local time zone, so a timestamp ``.pyc`` could be judged stale
in another zone, and the image never edits the zip after the build. A process on another
Python (another magic number) ignores them and compiles the sources, as before. Code objects
carry the name zipimport itself compiles with (``<archive>/<member>``), so tracebacks and their
source lines read as before.

    python3 -m hutch_spark.zipbytecode "$SPARK_HOME"/python/lib/*.zip
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

UNCHECKED_HASH = (0b01).to_bytes(4, "little")  # PEP 552 flags: hash-based, source not checked


class ZipBytecodeError(ValueError):
    """The path is not a zip archive this can rewrite; the file is left as it was."""


@dataclass(frozen=True)
class Compiled:
    """What one archive got: the modules compiled, and those left as source (they do not
    compile, so their import fails as it did before)."""

    compiled: int
    skipped: tuple[str, ...]


def pyc(source: bytes, filename: str) -> bytes:
    """An unchecked hash-based ``.pyc`` of ``source`` for this interpreter. The line endings
    are normalised as zipimport does before it compiles, so the code is the same."""
    text = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    code = compile(text, filename, "exec", dont_inherit=True, optimize=0)
    header = importlib.util.MAGIC_NUMBER + UNCHECKED_HASH + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def _copy_with_bytecode(source: zipfile.ZipFile, target: zipfile.ZipFile, archive: str) -> Compiled:
    """Every member of ``source`` into ``target``, each ``.py`` followed by its ``.pyc`` (an
    older ``.pyc`` of a ``.py`` is dropped, so running this twice gives the same archive)."""
    names = set(source.namelist())
    compiled, skipped = 0, []
    for info in source.infolist():
        if info.filename.endswith(".pyc") and info.filename[:-1] in names:
            continue
        data = source.read(info)
        target.writestr(info, data)
        if not info.filename.endswith(".py"):
            continue
        try:
            code = pyc(data, f"{archive}{os.sep}{info.filename}")
        except (SyntaxError, ValueError):
            skipped.append(info.filename)
            continue
        entry = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
        entry.compress_type = zipfile.ZIP_DEFLATED
        entry.external_attr = info.external_attr
        target.writestr(entry, code)
        compiled += 1
    return Compiled(compiled, tuple(skipped))


def add_bytecode(path: Path) -> Compiled:
    """Rewrites the zip at ``path`` with bytecode beside its sources, atomically (a temp file
    renamed over it, with the same mode). ``path`` is named as the processes name it on their
    PYTHONPATH, since the code objects carry it."""
    if not zipfile.is_zipfile(path):
        raise ZipBytecodeError(f"{path}: not a zip archive")
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:
        with zipfile.ZipFile(path) as source, zipfile.ZipFile(temp, "w") as target:
            result = _copy_with_bytecode(source, target, str(path))
        os.chmod(temp, path.stat().st_mode & 0o7777)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return result


def main(argv: Sequence[str] | None = None) -> None:
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        sys.stderr.write("usage: zipbytecode ARCHIVE.zip...\n")
        raise SystemExit(2)
    not_zips = [name for name in paths if not zipfile.is_zipfile(name)]
    if not_zips:  # checked before any is rewritten: a wrong argument changes nothing
        sys.stderr.write(f"zipbytecode: not zip archives: {', '.join(not_zips)}\n")
        raise SystemExit(1)
    for name in paths:
        try:
            result = add_bytecode(Path(name))
        except (OSError, zipfile.BadZipFile, ZipBytecodeError) as exc:
            sys.stderr.write(f"zipbytecode: {exc}\n")
            raise SystemExit(1) from None
        left = f", left as source: {', '.join(result.skipped)}" if result.skipped else ""
        sys.stderr.write(f"zipbytecode: {name}: {result.compiled} modules compiled{left}\n")


if __name__ == "__main__":
    main()
