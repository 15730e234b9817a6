"""The plane plugin's run order: each tier's tests together, the e2e tests last, on the node;
and which tests it marks ``control_plane_only``.

Why: scripts/test.sh runs the node level's real-node tests and e2e in one pytest session so
that e2e uses the node plane the node-tier tests started instead of starting its own (the
``control_plane_only`` tests run beside that session, in a pytest process of their own). That
holds only if the e2e tests (which ask for the node at run time, through ``k8s_node``) sort
after every node-tier test and count among the node plane's pending tests: otherwise the plane
stops after the last node-tier test and e2e starts a second one, or e2e runs first, before the
cheaper tiers.
"""

from __future__ import annotations

from types import SimpleNamespace
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

    def add_marker(self, marker: Any) -> None:
        self.marks.add(getattr(marker, "name", marker))

    # Enough of pytest's config for the plugin's timeout check: no pytest-timeout here.
    config = SimpleNamespace(pluginmanager=SimpleNamespace(hasplugin=lambda _name: False))


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


def test_the_apiserver_and_workloads_tiers_tests_are_marked_control_plane_only() -> None:
    """scripts/test.sh runs the node level's ``control_plane_only`` tests in a pytest process
    beside the real node's: only tests whose fixtures name a control-plane tier get the marker.
    A test of the node tier, or one of no tier at the node level (its own plane, as the kept
    ``make run`` starts one, whose node lock the other process holds), stays with the node."""
    items = [
        _Item("api", ("apiserver",)),
        _Item("ns", ("k8s_namespace",)),
        _Item("workloads", ("workloads", "make_pvs")),
        _Item("node", ("node",)),
        _Item("both", ("apiserver", "node")),
        _Item("local_pvs", ("make_local_pvs",)),
        _Item("e2e", ("e2e_cluster",), ("e2e", "k8s_node")),
        _Item("own_plane", (), ("node",)),
        _Item("fast"),
    ]
    for item in items:
        localkube_plugin.pytest_itemcollected(item)  # type: ignore[arg-type]
    marked = [i.name for i in items if localkube_plugin.CONTROL_PLANE_ONLY in i.marks]
    assert marked == ["api", "ns", "workloads"]
    assert [i.name for i in items if "k8s" in i.marks] == [
        "api", "ns", "workloads", "node", "both", "local_pvs", "e2e",
    ]  # fmt: skip
