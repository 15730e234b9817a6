"""The contracts the code cites live in the repository (docs/contracts/), and nothing points outside.

Why: comments, docstrings and test names explain behaviour by naming a contract ("ML-4",
``docs/contracts/operator.md#deletion``). A name that resolves nowhere in a clone explains
nothing, and a path of one development machine means nothing on another. This reads the
repository's text files (no process, no socket) and fails listing every place that breaks one of
the rules in docs/contracts/README.md.

Not flagged: ``/tmp/...`` paths. Hutch really uses some (the node lock, example checkpoint
directories in command lines), and a temporary path is not a machine's layout. Section signs
after an external specification ("AMQP 0-9-1" followed by the section number) cite a document
every reader has.
"""

from __future__ import annotations

import functools
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = REPO / "docs" / "contracts"
REGISTRY_FILE = CONTRACTS / "README.md"
THIS_FILE = Path(__file__).resolve()

#: Folders that are not the project's text: tool caches, build output, local run state.
SKIPPED_DIRS = {"__pycache__", "node_modules", "build", "dist", "test-artifacts"}
SKIPPED_PATHS = {"bench/results"}
TEXT_SUFFIXES = {
    ".py", ".md", ".rst", ".txt", ".sh", ".yaml", ".yml", ".tpl", ".toml", ".cfg", ".ini",
    ".json", ".go", ".mod", ".conf",
}  # fmt: skip
TEXT_NAMES = {"Makefile", "Dockerfile", ".importlinter", ".gitignore", ".dockerignore", "run"}

#: Files that still cite a design-note section and had uncommitted work of other engineers in
#: them when the references were rewritten (issue 29), so they were left alone. Each entry must
#: still have such a reference: once it is fixed, the entry goes, so this list only shrinks.
PENDING_OUTSIDE_REFERENCES: dict[str, str] = {}

ANCHOR = re.compile(r'<a id="([a-z0-9][a-z0-9-]*)"></a>')
REGISTRY_ROW = re.compile(r"^\| `([A-Z]+)` \| \[[^\]]*\]\(([\w.-]+\.md)\)", re.MULTILINE)
CONTRACT_PATH = re.compile(r"docs/contracts/([\w.-]+\.md)(?:#([\w-]+))?")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")
#: A design note that only ever lived beside the repository.
OUTSIDE_DOCUMENT = re.compile(r"shared/design|\.\./shared/")
SECTION_SIGN = re.compile(r"§")
EXTERNAL_SPEC_BEFORE = re.compile(r"(?:AMQP 0-9-1|RFC ?\d+),? $")
MACHINE_PATH = re.compile(r"(?<![\w.~-])(?:/(?:work|root)/|/home/[a-z_][\w-]*/|/Users/\w)")


def _skipped_dir(name: str) -> bool:
    return (
        (name.startswith(".") and name != ".ci")
        or name in SKIPPED_DIRS
        or name.endswith(".egg-info")
    )


def text_files() -> Iterator[Path]:
    """Every text file of the project, in a stable order; hidden folders except ``.ci``.

    The walk prunes the skipped folders instead of filtering what it found in them: the
    repository holds the virtualenv (``.venv``, over 1 GB) and ``.git``, which cost a walk of
    everything seconds for each test that reads the text.
    """
    found: list[Path] = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [name for name in dirs if not _skipped_dir(name)]
        rel = Path(folder).relative_to(REPO).as_posix()
        if any(f"{rel}/".startswith(skipped + "/") for skipped in SKIPPED_PATHS):
            dirs[:] = []
            continue
        found.extend(Path(folder, name) for name in files)
    for path in sorted(found):
        if path == THIS_FILE or not path.is_file():
            continue
        if (
            path.suffix in TEXT_SUFFIXES
            or path.name in TEXT_NAMES
            or path.name.startswith("Dockerfile")
        ):
            yield path


def lines() -> tuple[tuple[str, int, str], ...]:
    """(repository-relative path, line number, line) over every text file.

    Read once for the module's tests (they only read it): the tests run in one process.
    """
    return _lines()


@functools.cache
def _lines() -> tuple[tuple[str, int, str], ...]:
    found: list[tuple[str, int, str]] = []
    for path in text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(REPO).as_posix()
        found.extend((rel, number, line) for number, line in enumerate(text.splitlines(), 1))
    return tuple(found)


def registry() -> dict[str, str]:
    """Family prefix → the contract document that defines its IDs (the README's table)."""
    assert REGISTRY_FILE.is_file(), "docs/contracts/README.md (the ID registry) is missing"
    families = dict(REGISTRY_ROW.findall(REGISTRY_FILE.read_text(encoding="utf-8")))
    assert families, "docs/contracts/README.md registers no ID family"
    return families


def anchors() -> dict[str, list[str]]:
    """Contract document name → the explicit anchors it defines, in order."""
    return {
        page.name: ANCHOR.findall(page.read_text(encoding="utf-8"))
        for page in sorted(CONTRACTS.glob("*.md"))
    }


def cited_ids(families: dict[str, str]) -> dict[str, list[str]]:
    """Contract ID → where it is cited: written out (``ML-4``) or first in a test's name."""
    prefixes = "|".join(sorted(families, key=len, reverse=True))
    written = re.compile(rf"(?<![\w-])({prefixes})-(\d+)(?![\w-])")
    test_name = re.compile(rf"\bdef test_({prefixes.lower()})_(\d+)(?=[_(])")
    places: dict[str, list[str]] = defaultdict(list)
    for rel, number, line in lines():
        for prefix, digits in written.findall(line):
            places[f"{prefix}-{digits}"].append(f"{rel}:{number}")
        if rel.endswith(".py"):
            for prefix, digits in test_name.findall(line):
                places[f"{prefix.upper()}-{digits}"].append(f"{rel}:{number}")
    return places


def test_every_registered_family_names_an_existing_document() -> None:
    missing = {
        prefix: page for prefix, page in registry().items() if not (CONTRACTS / page).is_file()
    }
    assert not missing, f"families registered to a missing document: {missing}"


def test_every_anchor_is_defined_once_per_document() -> None:
    repeated = {
        page: sorted({name for name in names if names.count(name) > 1})
        for page, names in anchors().items()
        if len(set(names)) != len(names)
    }
    assert not repeated, f"anchors defined more than once: {repeated}"


def test_every_cited_contract_id_has_an_anchor() -> None:
    families = registry()
    defined = anchors()
    missing = {
        contract: where
        for contract, where in sorted(cited_ids(families).items())
        if contract.lower() not in defined.get(families[contract.split("-")[0]], [])
    }
    report = "\n".join(
        f"  {contract} (docs/contracts/{families[contract.split('-')[0]]}): "
        + ", ".join(where[:3])
        + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        for contract, where in missing.items()
    )
    assert not missing, f"{len(missing)} cited contract IDs have no anchor:\n{report}"


def test_every_link_into_docs_contracts_resolves() -> None:
    defined = anchors()
    broken = []
    for rel, number, line in lines():
        targets = [(page, anchor) for page, anchor in CONTRACT_PATH.findall(line)]
        if rel.endswith(".md"):
            base = (REPO / rel).parent
            for target, anchor in MARKDOWN_LINK.findall(line):
                if not target or "://" in target:
                    resolved = (REPO / rel) if not target else None
                else:
                    resolved = (base / target).resolve()
                if (
                    resolved is not None
                    and resolved.parent == CONTRACTS
                    and resolved.suffix == ".md"
                ):
                    targets.append((resolved.name, anchor))
        for page, anchor in targets:
            if page not in defined:
                broken.append(f"{rel}:{number}: no page docs/contracts/{page}")
            elif anchor and anchor not in defined[page]:
                broken.append(f"{rel}:{number}: no anchor #{anchor} in docs/contracts/{page}")
    assert not broken, "broken links into docs/contracts:\n" + "\n".join(sorted(set(broken)))


def outside_references() -> dict[str, list[str]]:
    """File → its lines that cite a design document the repository does not have."""
    found: dict[str, list[str]] = defaultdict(list)
    for rel, number, line in lines():
        hit = OUTSIDE_DOCUMENT.search(line) is not None or any(
            not EXTERNAL_SPEC_BEFORE.search(line[: sign.start()])
            for sign in SECTION_SIGN.finditer(line)
        )
        if hit:
            found[rel].append(f"{rel}:{number}: {line.strip()}")
    return found


def test_no_reference_to_a_document_outside_the_repository() -> None:
    found = outside_references()
    offending = [
        line
        for rel, hits in found.items()
        if rel not in PENDING_OUTSIDE_REFERENCES
        for line in hits
    ]
    assert not offending, (
        "references to design documents a clone does not have (cite docs/contracts/ instead):\n"
        + "\n".join(offending)
    )
    stale = sorted(set(PENDING_OUTSIDE_REFERENCES) - set(found))
    assert not stale, f"fixed, so remove from PENDING_OUTSIDE_REFERENCES: {stale}"


def test_no_absolute_path_of_a_development_machine() -> None:
    found = [
        f"{rel}:{number}: {line.strip()}"
        for rel, number, line in lines()
        if MACHINE_PATH.search(line)
    ]
    assert not found, "absolute paths of a development machine:\n" + "\n".join(found)
