"""A namespace-scoped install (watchNamespaces): its finalizer policy leaves other namespaces alone.

Its own module so that it runs after test_chart.py has uninstalled its all-namespaces release,
whose policy matches every namespace.
"""

from __future__ import annotations

import time
from typing import Any

from hutch_testing import admission


def test_finalizer_policy_skips_unwatched_namespaces(releases: Any, apiserver: Any) -> None:
    release, watched, other = (apiserver.create_namespace() for _ in range(3))
    releases("scoped", release, f"watchNamespaces={{{watched}}}")
    admission.await_finalizer(apiserver.api, watched)
    # An earlier all-namespaces policy may linger in the apiserver's informer for a moment; a
    # binding that wrongly matched ``other`` would keep adding the finalizer for good.
    deadline = time.monotonic() + 15
    while admission.FINALIZER in admission.dry_run_finalizers(apiserver.api, other):
        assert time.monotonic() < deadline, f"the policy adds the finalizer in {other}"
        time.sleep(0.2)
    assert admission.FINALIZER in admission.dry_run_finalizers(apiserver.api, watched)
