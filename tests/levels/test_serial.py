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


# -- the two passes of scripts/test.sh against -m broker ------------------------------------

SCRIPT = serial.REPO / "scripts" / "test.sh"
# What may differ between the two passes: how they run, not what they select.
_RUN_ONLY = {"-n": 1, "--dist": 1, "--no-loadscope-reorder": 0}


def _level_commands(script: str) -> dict[str, list[str]]:
    """Each ``level NAME ARGS...`` line of the script (continuations joined): NAME -> ARGS."""
    joined = script.replace("\\\n", " ")
    commands = {}
    for line in joined.splitlines():
        if line.startswith("level "):
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


def test_the_broker_level_s_two_passes_select_exactly_its_tests_once():
    """scripts/test.sh's two broker passes, as the script spells them, against ``-m broker``:
    their expressions, evaluated as pytest evaluates ``-m``, take every test that has the
    marker ``broker`` in exactly one pass, whatever else it is marked, and nothing else; and
    the passes select from the same paths with the same other arguments."""
    commands = _level_commands(SCRIPT.read_text())
    parallel, alone = _selection(commands["broker"]), _selection(commands["broker/serial"])
    assert parallel[1] == alone[1], (
        f"the two broker passes select from different arguments: {parallel[1]}, {alone[1]}"
    )
    assert "$@" in parallel[1] and "tests" in parallel[1], parallel
    expressions = [Expression.compile(expression) for expression, _ in (parallel, alone)]
    names = {"broker", serial.MARKER, "fast", "node", "e2e", "slow", "spark", "rabbitmq"}
    names |= set(re.findall(r"[A-Za-z_]\w*", parallel[0] + " " + alone[0])) - {"and", "or", "not"}
    for size in range(len(names) + 1):
        for marks in itertools.combinations(sorted(names), size):
            chosen = [expression.evaluate(_marked(marks)) for expression in expressions]
            assert chosen.count(True) == ("broker" in marks), (
                f"a test marked {' '.join(marks) or '(nothing)'} runs in {chosen.count(True)} of "
                f"the broker passes -m {parallel[0]!r} and -m {alone[0]!r}"
            )


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
