"""The build bar's phases (hutch_demo.progress.BuildTracker) against build-binaries.sh.

Why: a phase the script runs but the tracker does not know weighs nothing, so the bar reaches
100 % while CoreDNS still builds for a minute, and the label counts past its total ("phase 9/8").
"""

from __future__ import annotations

import re

from hutch_demo import progress
from hutch_localkube import binaries


def _script_phases() -> list[str]:
    """The phases of a full build, in order: the script's top-level ``run_phase`` calls."""
    text = binaries.BUILD_SCRIPT.read_text()
    return re.findall(r"^run_phase (\S+) ", text, flags=re.MULTILINE)


def test_every_phase_of_the_build_script_has_a_weight_in_its_order():
    phases = _script_phases()
    assert "coredns" in phases and "kubelet" in phases  # the parse found the full build
    assert phases == list(progress.BUILD_PHASES)


def test_the_label_counts_phases_up_to_the_total_and_the_bar_ends_at_one():
    tracker = progress.BuildTracker()
    total = len(progress.BUILD_PHASES)
    labels = []
    for now, name in enumerate(_script_phases()):
        tracker.feed(f"build-binaries: phase {name}: start\n", float(now))
        labels.append(tracker.label())
        tracker.feed(f"phase={name} seconds=1\n", float(now))
    assert labels[-1] == f"phase {total}/{total}: building smoke"
    assert tracker.fraction(float(total)) == 1.0
