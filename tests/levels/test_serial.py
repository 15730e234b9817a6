"""The broker level's serial pass (hutch_testing.serial): which modules it takes, and that the
list stays true to the tree.

Why: scripts/test.sh runs the broker level as ``broker and not serial`` on two workers, then
``broker and serial`` alone, so the rule that marks a test ``serial`` decides both what runs
beside another worker and that nothing falls between the two passes. The list is held to the
code: a module that judges by a measurement (``hutch_testing.measures``) and is not listed fails
here by name, before it can fail by chance beside another worker.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from hutch_testing import measures, pytest_plugin, serial

ENTRIES = ("tests/noisy/", "tests/broker/store/test_crash.py")


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("tests/noisy/test_cases.py", True),  # a folder entry takes every module under it
        ("tests/noisy/sub/test_x.py", True),
        ("tests/broker/store/test_crash.py", True),
        ("tests/broker/store/test_crash_child.py", False),  # a module entry is that file only
        ("tests/broker/store/test_crash.pyc", False),
        ("tests/noisyish/test_cases.py", False),  # a folder entry is a whole path segment
        ("other/tests/noisy/test_cases.py", False),
    ],
)
def test_a_module_is_serial_when_an_entry_names_it_or_a_folder_above_it(relpath, expected):
    assert serial.is_serial(relpath, ENTRIES) is expected


def test_every_entry_names_a_module_or_folder_of_the_tree():
    assert serial.missing(serial.REPO) == []
    assert all(
        entry.startswith("tests/") and (entry.endswith(("/", ".py"))) for entry in serial.SERIAL
    )


def test_a_stale_entry_is_reported(tmp_path: Path):
    (tmp_path / "tests" / "noisy").mkdir(parents=True)
    assert serial.missing(tmp_path, ENTRIES) == ["tests/broker/store/test_crash.py"]
    (tmp_path / "tests" / "broker" / "store").mkdir(parents=True)
    (tmp_path / "tests" / "broker" / "store" / "test_crash.py").write_text("")
    assert serial.missing(tmp_path, ENTRIES) == []


class _Item:
    """What the plugin reads of a collected test: its path; what it writes: markers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.markers: list[str] = []

    def add_marker(self, marker: str) -> None:
        self.markers.append(marker)


def test_collection_marks_the_listed_modules_tests_serial_and_no_other():
    listed = _Item(serial.REPO / "tests" / "noisy" / "test_cases.py")
    folder = _Item(serial.REPO / "tests" / "broker" / "fuzz" / "test_frames.py")
    other = _Item(serial.REPO / "tests" / "semantics" / "test_policies.py")
    outside = _Item(Path("/elsewhere/tests/noisy/test_cases.py"))
    pytest_plugin._mark_serial([listed, folder, other, outside])  # type: ignore[list-item]
    assert (listed.markers, folder.markers) == (["serial"], ["serial"])
    assert (other.markers, outside.markers) == ([], [])


# -- the list against the code: hutch_testing.measures --------------------------------------


@pytest.fixture(scope="module")
def marked() -> dict[str, set[str]]:
    """The tree's modules with a marker of a measurement (a second to scan: once a module)."""
    return measures.scan(serial.REPO)


def test_every_module_with_a_marker_of_a_measurement_is_listed_or_says_why_not(marked):
    unlisted = serial.unlisted(marked)
    assert unlisted == {}, (
        "these modules judge by a measurement (hutch_testing.measures) but would run in the "
        "broker level's parallel pass, beside another worker: list them in SERIAL, or in "
        f"NOT_SERIAL with the reason no neighbour can move their verdict: {unlisted}"
    )


def test_every_listed_module_has_a_marker_or_says_what_it_measures(marked):
    unmarked = serial.unmarked(serial.modules(serial.REPO), marked)
    assert unmarked == [], (
        "these modules run in the serial pass but show no marker of a measurement: say in "
        f"UNSEEN what they measure, or move them to the parallel pass: {unmarked}"
    )


def test_every_exemption_has_a_marker_left_to_exempt(marked):
    unneeded = serial.unneeded(marked)
    assert unneeded == [], (
        "these modules are in NOT_SERIAL but show no marker of a measurement any more: take "
        f"them out, so the list says only what still runs beside a worker by exemption: {unneeded}"
    )
    assert serial.unneeded({"tests/a/test_x.py": {"clock"}}, {"tests/a/test_x.py": "why"}) == []
    assert serial.unneeded({}, {"tests/a/test_x.py": "why"}) == ["tests/a/test_x.py"]


def test_the_exceptions_name_modules_of_the_tree_and_do_not_contradict_the_list():
    listed = set(serial.modules(serial.REPO))
    assert set(serial.UNSEEN) <= listed
    assert not set(serial.NOT_SERIAL) & listed
    assert all((serial.REPO / relpath).is_file() for relpath in serial.NOT_SERIAL)
    assert all(serial.UNSEEN.values()) and all(serial.NOT_SERIAL.values())  # each says why


@pytest.mark.parametrize("entry", [entry for entry in serial.SERIAL if entry not in serial.UNSEEN])
def test_an_entry_taken_out_of_the_list_is_named_by_the_check(entry, marked):
    fewer = [other for other in serial.SERIAL if other != entry]
    taken = serial.modules(serial.REPO, (entry,))
    named = set(serial.unlisted(marked, fewer)) - set(serial.unlisted(marked))
    assert taken and named == set(taken)


def test_the_check_names_an_unlisted_module_and_a_listed_one_without_a_marker():
    marked = {"tests/a/test_canary.py": {"canary"}, "tests/b/test_cpu.py": {"cpu"}}
    entries = ("tests/b/", "tests/c/test_plain.py", "tests/c/test_crash.py")
    assert serial.unlisted(marked, entries, exempt={}) == {"tests/a/test_canary.py": ["canary"]}
    assert serial.unlisted(marked, entries, exempt={"tests/a/test_canary.py": "why"}) == {}
    listed = ["tests/b/test_cpu.py", "tests/c/test_plain.py", "tests/c/test_crash.py"]
    unseen = {"tests/c/test_crash.py": "kill -9 at points of progress"}
    assert serial.unmarked(listed, marked, unseen) == ["tests/c/test_plain.py"]


# -- the passes of scripts/test.sh against the levels they split ---------------------------

SCRIPT = serial.REPO / "scripts" / "test.sh"
# What may differ between the passes of a level: how they run, not what they select.
_RUN_ONLY = {"-n": 1, "--dist": 1, "--no-loadscope-reorder": 0}
# The levels run in more than one pass: the passes' names in the script, and what the whole
# level selects. The node level's two run at once (level_beside): the tests that need only a
# control plane in the background, the rest with e2e in the foreground.
SPLIT_LEVELS = {
    "broker": (("broker", "broker/serial"), "broker"),
    "node": (("node/control", "node+e2e"), "node or e2e"),
}


def _level_commands(script: str) -> dict[str, list[str]]:
    """Each ``level NAME ARGS...`` and ``level_beside NAME ARGS...`` line of the script
    (continuations joined, indented or not): NAME -> ARGS."""
    joined = script.replace("\\\n", " ")
    commands = {}
    for line in joined.splitlines():
        if line.split(maxsplit=1)[:1] in (["level"], ["level_beside"]):
            words = shlex.split(line, comments=True)
            commands[words[1]] = words[2:]
    return commands


def _marked(marks: tuple[str, ...]) -> Callable[..., bool]:
    """``-m``'s matcher for a test with these markers."""
    return lambda name, /, **_: name in marks


def _selection(args: list[str]) -> tuple[str, list[str]]:
    """A pass's ``-m`` expression, and its other arguments less those that only say how it runs
    (workers, distribution, reports): paths, ``-k``, ``--deselect``, "$@" all stay."""
    expression, rest, words = None, [], iter(args)
    for word in words:
        if word == "-m":
            assert expression is None, f"two -m in {args}"
            expression = next(words)
        elif word in _RUN_ONLY:
            for _ in range(_RUN_ONLY[word]):
                next(words)
        elif not word.startswith("--durations"):
            rest.append(word)
    assert expression is not None, f"no -m in {args}"
    return expression, rest


def _passes(level: str) -> list[tuple[str, list[str]]]:
    """The level's passes as the script spells them: (``-m`` expression, other arguments)."""
    commands = _level_commands(SCRIPT.read_text())
    return [_selection(commands[name]) for name in SPLIT_LEVELS[level][0]]


@pytest.mark.parametrize("level", sorted(SPLIT_LEVELS))
def test_a_level_s_passes_select_exactly_its_tests_once(level: str):
    """scripts/test.sh's passes of a level, as the script spells them, against the level's own
    ``-m`` (``broker``; ``node or e2e``, which ran as one session before): their expressions,
    evaluated as pytest evaluates ``-m``, take every test the whole level takes in exactly one
    pass, whatever else it is marked, and nothing else; and the passes select from the same
    paths with the same other arguments."""
    passes, whole = _passes(level), Expression.compile(SPLIT_LEVELS[level][1])
    first_rest = passes[0][1]
    assert all(rest == first_rest for _, rest in passes), (
        f"the {level} level's passes select from different arguments: {passes}"
    )
    assert "$@" in first_rest and "tests" in first_rest, passes
    expressions = [Expression.compile(expression) for expression, _ in passes]
    names = {"broker", serial.MARKER, "fast", "node", "e2e", "slow", "spark", "rabbitmq", "k8s"}
    spelled = " ".join(expression for expression, _ in passes)
    names |= set(re.findall(r"[A-Za-z_]\w*", spelled)) - {"and", "or", "not"}
    for size in range(len(names) + 1):
        for marks in itertools.combinations(sorted(names), size):
            chosen = [expression.evaluate(_marked(marks)) for expression in expressions]
            expected = whole.evaluate(_marked(marks))
            assert chosen.count(True) == expected, (
                f"a test marked {' '.join(marks) or '(nothing)'} runs in {chosen.count(True)} of "
                f"the {level} level's passes {[e for e, _ in passes]}, and in "
                f"{int(expected)} of -m {SPLIT_LEVELS[level][1]!r}"
            )


def test_e2e_runs_in_the_node_pass_of_the_real_node_s_tests():
    """e2e runs on the node plane the node-tier tests started (e2e/conftest.py), so it must be
    in their pytest session: the pass that takes e2e takes a node-level test that is not
    ``control_plane_only``, and it is the foreground one (``level``), which the script ends on."""
    commands = _level_commands(SCRIPT.read_text())
    expressions = {
        name: Expression.compile(_selection(commands[name])[0]) for name in SPLIT_LEVELS["node"][0]
    }
    with_e2e = [name for name, e in expressions.items() if e.evaluate(_marked(("e2e", "k8s")))]
    with_node = [name for name, e in expressions.items() if e.evaluate(_marked(("node", "k8s")))]
    assert with_e2e == with_node == ["node+e2e"], (with_e2e, with_node)
    script = SCRIPT.read_text()
    assert "\n  level_beside node/control " in script and "\n  level node+e2e " in script


# A module of tests at every place of the node level, by the fixtures they ask for; collected
# only, so no plane starts.
_PROBE = """
import pytest

def test_apiserver(apiserver): pass
def test_namespace(k8s_namespace): pass
def test_workloads(workloads): pass
def test_pvs(make_pvs): pass
def test_node(node): pass
def test_local_pvs(make_local_pvs): pass
def test_spark_image(spark_image): pass
def test_apiserver_and_node(apiserver, node): pass
@pytest.mark.node  # its own plane, as the kept `make run` starts one
def test_own_plane(): pass
@pytest.mark.e2e
@pytest.mark.k8s_node
def test_chain(): pass
@pytest.mark.broker
def test_broker(): pass
def test_fast(): pass
"""
_CONTROL_PLANE_ONLY = {"test_apiserver", "test_namespace", "test_workloads", "test_pvs"}


def _collected(tmp_path: Path, expression: str) -> set[str]:
    """The probe's tests that ``pytest -m EXPRESSION`` selects, from a real pytest child with
    the test plugins (the plane plugin is also the venv's entry point: named twice, it loads
    once)."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "hutch_testing.localkube_plugin", "-p",
         "hutch_testing.pytest_plugin", "-p", "no:cacheprovider", "--collect-only", "-q",
         "--rootdir", str(tmp_path), "-m", expression, str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), (
        run.stdout + run.stderr
    )
    return set(re.findall(r"test_probe\.py::(\w+)", run.stdout))


@pytest.mark.broker  # it runs pytest in a child process
def test_the_node_level_s_passes_as_pytest_collects_them(tmp_path: Path):
    """The node level's two expressions from scripts/test.sh, applied by pytest itself: the
    plane plugin marks ``control_plane_only`` before ``-m`` deselects, so the apiserver and
    workloads tiers' tests run in the background pass and nothing else does; a test of the real
    node, one of no tier (its own plane) and e2e run in the foreground one; together they are
    ``-m "node or e2e"``."""
    (tmp_path / "test_probe.py").write_text(_PROBE)
    (control, _), (real, _) = _passes("node")
    beside, foreground = _collected(tmp_path, control), _collected(tmp_path, real)
    assert beside == _CONTROL_PLANE_ONLY
    assert foreground == {
        "test_node", "test_local_pvs", "test_spark_image", "test_apiserver_and_node",
        "test_own_plane", "test_chain",
    }  # fmt: skip
    assert beside | foreground == _collected(tmp_path, SPLIT_LEVELS["node"][1])


def test_the_serial_marker_is_set_before_m_deselects():
    """``-m`` deselects in pytest's own collection hook: the plugin's hook, which sets
    ``serial`` and the level markers, must run before it (tryfirst): after it, ``-m`` would not
    see them, and the serial tests would run in the parallel pass, beside a worker, and not in
    the serial pass."""
    hook = pytest_plugin.pytest_collection_modifyitems
    assert hook.pytest_impl["tryfirst"] is True, (  # type: ignore[attr-defined]
        "hutch_testing.pytest_plugin's pytest_collection_modifyitems is not tryfirst: -m would "
        "deselect before it marks the tests serial and with their level"
    )
