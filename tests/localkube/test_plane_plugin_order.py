"""The plane plugin's run order: each tier's tests together, the e2e tests last, on the node.

Why: scripts/test.sh runs the node level and e2e in one pytest session so that e2e uses the
node plane the node-tier tests started instead of starting its own. That holds only if the
e2e tests (which ask for the node at run time, through ``k8s_node``) sort after every node-tier
test and count among the node plane's pending tests: otherwise the plane stops after the last
node-tier test and e2e starts a second one, or e2e runs first, before the cheaper tiers.
"""

from __future__ import annotations

from typing import Any

import pytest
from hutch_localkube import planes
from hutch_testing import localkube_plugin


class _Item:
    """What the plugin reads of a pytest item: its fixture closure and its markers."""

    def __init__(self, name: str, fixtures: tuple[str, ...] = (), marks: tuple[str, ...] = ()):
        self.name = name
        self.fixturenames = fixtures
        self.marks = set(marks)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.marks else None


@pytest.fixture
def pending() -> Any:
    """The registry's pending counts, put back after the test (the plugin sets them)."""
    saved = planes.REGISTRY.pending
    yield
    planes.REGISTRY.pending = saved


def test_e2e_tests_run_last_and_keep_the_node_plane_up(pending: None) -> None:
    items = [
        _Item("e2e_chain", ("e2e_cluster",), ("e2e", "k8s_node")),
        _Item("node_spark", ("node", "spark_image")),
        _Item("fast"),
        _Item("workloads", ("workloads",)),
        _Item("api", ("k8s_namespace",)),
        _Item("e2e_spark", ("e2e_cluster",), ("e2e", "k8s_node")),
        _Item("node_pvs", ("make_local_pvs",)),
    ]
    localkube_plugin.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == [
        "fast", "api", "workloads", "node_spark", "node_pvs", "e2e_chain", "e2e_spark",
    ]  # fmt: skip
    # The node plane is released when its count reaches 0: after the last e2e test.
    assert planes.REGISTRY.pending == {"apiserver": 1, "workloads": 1, "node": 4}


def test_e2e_on_an_external_cluster_needs_no_plane_and_still_runs_last(pending: None) -> None:
    items = [_Item("e2e", ("e2e_cluster",), ("e2e",)), _Item("node", ("node",))]
    localkube_plugin.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["node", "e2e"]
    assert planes.REGISTRY.pending == {"node": 1}
