"""Every package of Hutch is the container of an exhaustive layers contract in ``.importlinter``.

Why: a contract that names every module makes a new module choose its place, and a module that
imports against the layers fails ``lint-imports`` in CI. A package under no such contract grows
imports in any direction unnoticed, which is how the operator's flat package ended up mixing
instance management with topology (issue 29). This reads the configuration and walks the source
folders (no process, no socket): a new sub-package with no contract fails here, naming it.
"""

from __future__ import annotations

import configparser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Where each root package's source lives (one product or tool per folder).
SOURCES = ("broker", "operator", "spark", "cli", "localkube", "demo", "testing")


def packages() -> set[str]:
    """Dotted names of every package (a folder with ``__init__.py`` holding modules)."""
    found = set()
    for folder in SOURCES:
        for init in (REPO / folder).glob("hutch_*/**/__init__.py"):
            package = init.parent
            if any(p.name != "__init__.py" for p in package.glob("*.py")) or any(
                (child / "__init__.py").exists() for child in package.iterdir()
            ):
                found.add(".".join(package.relative_to(REPO / folder).parts))
    return found


def exhaustive_containers(config: configparser.ConfigParser) -> set[str]:
    return {
        container
        for section in config.sections()
        if config[section].get("type") == "layers"
        and config[section].get("exhaustive", "").strip() == "true"
        for container in config[section].get("containers", "").split()
    }


def config() -> configparser.ConfigParser:
    parsed = configparser.ConfigParser()
    parsed.read(REPO / ".importlinter")
    return parsed


def test_every_package_is_placed_module_by_module() -> None:
    parsed = config()
    roots = set(parsed["importlinter"]["root_packages"].split())
    found = packages()
    assert roots <= found, f"root packages with no source folder: {sorted(roots - found)}"
    assert found <= {p for p in found if p.split(".")[0] in roots}, "a package outside the roots"
    missing = sorted(found - exhaustive_containers(parsed))
    assert not missing, f"packages under no exhaustive layers contract: {missing}"


def test_the_check_sees_a_package_with_no_contract() -> None:
    parsed = config()
    section = next(
        s for s in parsed.sections() if "hutch_spark.jobs" in parsed[s].get("containers", "")
    )
    parsed.remove_section(section)
    assert "hutch_spark.jobs" in packages() - exhaustive_containers(parsed)
