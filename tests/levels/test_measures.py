"""The markers of a measurement (hutch_testing.measures), on small sources.

Why: the serial list is only as good as the scan that checks it: each marker must be seen in
the shapes the broker-level modules write it in, and a wait with a deadline, a docstring or a
comment that mentions a canary must not count, or the check would ask for modules to be listed
that need not be.
"""

from __future__ import annotations

import textwrap

import pytest
from hutch_testing import measures


def _markers(source: str) -> set[str]:
    return measures.markers(textwrap.dedent(source))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # The canary helpers, a canary of the module's own, a canary script.
        ("from hutch_testing import noisy\n", {"canary"}),
        ("from hutch_testing.noisy_cases import run_case\n", {"canary"}),
        ("class Canary:\n    pass\n", {"canary"}),
        ("def start_canary(broker):\n    return broker\n", {"canary"}),
        ("CANARY = 'listing_canary.py'\n", {"canary"}),
        # CPU time and the scheduler's statistics.
        ("def f(p):\n    return p.cpu_seconds()\n", {"cpu"}),
        ("def f(finished):\n    assert finished.cpu_seconds > 0.7\n", {"cpu"}),
        ("import time\nt = time.process_time()\n", {"cpu"}),
        ("import resource\nresource.getrusage(resource.RUSAGE_CHILDREN)\n", {"cpu"}),
        ("open(f'/proc/{pid}/schedstat').read()\n", {"cpu"}),
        # A process's resident memory.
        ("def f(broker):\n    assert broker.peak_rss_bytes() < 10\n", {"rss"}),
        ("line.startswith('VmHWM:')\n", {"rss"}),
    ],
)
def test_each_marker_is_seen(source, expected):
    assert _markers(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        # A clock difference asserted against a bound.
        """
        import time
        def test_x():
            started = time.perf_counter()
            work()
            elapsed = time.perf_counter() - started
            assert elapsed < 5
        """,
        # Through a rate computed from it.
        """
        import time
        def test_x():
            began = time.monotonic()
            publish()
            rate = COUNT / (time.monotonic() - began)
            assert rate > 1000, rate
        """,
        # The slowest of a list of them, the list filled by append.
        """
        import time
        def test_x(chromium):
            timings = []
            for _ in range(3):
                started = time.monotonic()
                chromium.click()
                timings.append(time.monotonic() - started)
            assert max(timings) < 5.0, timings
        """,
        # A running maximum, kept on an object.
        """
        import time
        class Probe:
            def run(self):
                started = time.perf_counter()
                self.slowest = max(self.slowest, time.perf_counter() - started)
        def test_x(probe):
            assert probe.slowest < BOUND
        """,
        # An upper bound in a loop that is not a wait.
        """
        import time
        def test_x(channel):
            for total in (5, 25):
                started = time.monotonic()
                wait_for_total(total)
                assert time.monotonic() - started < 10
        """,
        # The event loop's clock.
        """
        async def test_x(loop):
            began = loop.time()
            await work()
            assert loop.time() - began <= 1.0
        """,
    ],
)
def test_an_assertion_on_a_clock_difference_is_a_marker(source):
    assert _markers(source) == {"clock"}


@pytest.mark.parametrize(
    "source",
    [
        # A deadline is a wait, not a measurement.
        """
        import time
        def test_x():
            deadline = time.monotonic() + 60
            while not done():
                assert time.monotonic() < deadline, "never done"
        """,
        # Time left of a deadline: the clock on the right of the minus.
        """
        import time
        def test_x():
            deadline = time.monotonic() + 60
            remaining = deadline - time.monotonic()
            assert remaining > 0
        """,
        # The timeout of a wait, written as a duration in the wait's loop.
        """
        import time
        def test_x(api):
            declared = time.monotonic()
            while api.queue_exists("q"):
                assert time.monotonic() - declared < 10, "the queue never expired"
                time.sleep(0.05)
        """,
        # A lower bound on a duration: a slower machine passes it more easily.
        """
        import time
        def test_x():
            opened = time.monotonic()
            wait_closed()
            took = time.monotonic() - opened
            assert took >= 5, "closed early"
            assert 4.5 <= time.monotonic() - opened
        """,
        # A duration only printed.
        """
        import time
        def test_x():
            started = time.monotonic()
            work()
            print(f"took {time.monotonic() - started:.1f} s")
            assert done()
        """,
        # Words in a docstring, a comment or a string.
        '''
        """A canary's round trips, cpu_seconds and rss_bytes, perf_counter() - started."""
        # the canary tenant
        QUEUE = "canary"
        ''',
        # A count of allocations in the test's own process.
        """
        import tracemalloc
        tracemalloc.start()
        assert tracemalloc.get_traced_memory()[0] < 1000
        """,
    ],
)
def test_what_is_not_a_measurement_is_no_marker(source):
    assert _markers(source) == set()


def test_a_scan_names_the_modules_with_markers_relative_to_the_root(tmp_path):
    (tmp_path / "tests" / "a").mkdir(parents=True)
    (tmp_path / "tests" / "a" / "test_timed.py").write_text(
        "import time\ns = time.perf_counter()\nassert time.perf_counter() - s < 1\n"
    )
    (tmp_path / "tests" / "a" / "test_plain.py").write_text("def test_x():\n    assert 1\n")
    (tmp_path / "tests" / "a" / "helper_canary.py").write_text("canary = 1\n")  # not a test module
    assert measures.scan(tmp_path) == {"tests/a/test_timed.py": {"clock"}}
