"""Which modules ``-m fast`` leaves unimported (``hutch_testing.levels.skippable``), from source text.

The rule may only ever skip a module with no fast test: a ``pytestmark`` that is not the
module's own (in a string, in a function, reassigned later) or names no level's marker keeps
the module collected.
"""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hutch_testing import levels, pytest_plugin, serial

ABOVE = "import pytest\n\npytestmark = pytest.mark.broker  # starts a broker\n"


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("import pytest\n\n\ndef test_x():\n    pass\n", set()),
        (ABOVE, {"broker"}),
        ("import pytest\npytestmark = [\n    pytest.mark.spark,\n    pytest.mark.timeout(120),\n]\n",
         {"spark", "timeout"}),
        ("import pytest\npytestmark: list = [pytest.mark.k8s]\n", {"k8s"}),
        ('import pytest\nPROBE = """\npytestmark = pytest.mark.broker\n"""\n', set()),
        ("import pytest\ndef probe():\n    pytestmark = pytest.mark.broker\n", set()),
        ("import pytest\npytestmark = pytest.mark.broker\npytestmark = pytest.mark.timeout(9)\n",
         {"timeout"}),
        ("pytestmark = pytest.mark.broker\ndef broken(:\n", set()),
    ],
    ids=["none", "one", "list", "annotated", "in-a-string", "in-a-function", "reassigned",
         "syntax-error"],
)  # fmt: skip
def test_the_marker_names_are_those_of_the_modules_own_pytestmark(source, names):
    assert levels.marker_names(source) == names


@pytest.mark.parametrize(
    ("source", "skipped"),
    [
        (ABOVE, True),
        ("import pytest\npytestmark = pytest.mark.rabbitmq\n", True),
        ("import pytest\npytestmark = [pytest.mark.timeout(60), pytest.mark.e2e]\n", True),
        ("import pytest\npytestmark = pytest.mark.timeout(180)\n", False),
        ("import pytest\npytestmark = pytest.mark.shared_broker\n", False),
        ('import pytest\npytestmark = pytest.mark.usefixtures("rabbitmq")\n', False),
        ("def test_x():\n    pass\n", False),
    ],
    ids=["broker", "rabbitmq", "e2e", "timeout", "by-fixtures", "usefixtures", "none"],
)
def test_only_a_level_marker_above_fast_skips_the_module(tmp_path, source, skipped):
    module = tmp_path / "test_probe.py"
    module.write_text(source)
    assert levels.skippable(module, "fast") is skipped


def test_only_exactly_minus_m_fast_and_only_test_modules_skip(tmp_path):
    module = tmp_path / "test_probe.py"
    module.write_text(ABOVE)
    helper = tmp_path / "probes.py"
    helper.write_text(ABOVE)
    assert levels.skippable(module, " fast ")
    for markexpr in ("", "broker", "not broker", "fast or broker", "not fast"):
        assert not levels.skippable(module, markexpr), markexpr
    assert not levels.skippable(helper, "fast")
    assert not levels.skippable(tmp_path / "test_missing.py", "fast")


def test_the_plugin_leaves_the_modules_of_the_tree_above_fast_uncollected():
    def config(markexpr: Any) -> Any:
        return SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))

    tests = serial.REPO / "tests"
    reference = tests / "sidebyside" / "test_core.py"  # pytestmark = pytest.mark.rabbitmq
    fast = Path(__file__)  # this module's tests are fast
    assert pytest_plugin.pytest_ignore_collect(reference, config("fast")) is True
    assert pytest_plugin.pytest_ignore_collect(reference, config("broker")) is None
    assert pytest_plugin.pytest_ignore_collect(reference, config(None)) is None
    assert pytest_plugin.pytest_ignore_collect(fast, config("fast")) is None
    assert pytest_plugin.pytest_ignore_collect(tests / "sidebyside", config("fast")) is None
