"""The perf-test load generator: its options and figures (pure), and runs against a real
hutch-broker through the installed module, as the Job runs it (``python -m hutch_cli.perftest``).

The runs share the module's broker (``shared_broker``), each in a vhost of its own that its URI
names: the generator reaches no queue of another test, and a URI's vhost it ignored would land
on "/", where the shared broker gives guest no permissions.
"""

import subprocess
import sys

import pytest
from hutch_cli import perffigures
from hutch_demo.management import quote

pytestmark = pytest.mark.shared_broker


def test_options_follow_perftests_short_flags() -> None:
    options = perffigures.parse(
        ["--uri", "amqp://u:p@h:5673/v", "-x", "2", "-y", "3", "-z", "4", "-s", "100",
         "-u", "q", "-c", "10", "-q", "50", "-C", "7", "-f", "persistent"]
    )  # fmt: skip
    assert (options.producers, options.consumers, options.seconds, options.size) == (2, 3, 4, 100)
    assert (options.queue, options.confirm, options.prefetch, options.messages) == ("q", 10, 50, 7)
    assert options.persistent
    assert options.address == ("h", 5673, False)
    assert (options.vhost, options.credentials) == ("v", ("u", "p"))
    assert perffigures.parse(["--uri", "amqps://h"]).address == ("h", 5671, True)
    assert perffigures.parse(["--uri", "amqp://h/"]).vhost == "/"


def test_credentials_from_the_environment_never_from_the_job_spec() -> None:
    env = {"HUTCH_PERF_TEST_USERNAME": "hutch", "HUTCH_PERF_TEST_PASSWORD": "a/b:c@d"}
    options = perffigures.parse(["--uri", "amqp://b:5672/%2F"], env)
    assert options.credentials == ("hutch", "a/b:c@d")
    assert options.address == ("b", 5672, False)
    assert options.vhost == "/"


@pytest.mark.parametrize(
    "argv",
    [["-z", "0"], ["-z", "99999"], ["-x", "0", "-y", "0"], ["-x", "-1"], ["-f", "fast"],
     ["--bogus"]],
)  # fmt: skip
def test_bad_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(perffigures.OptionsError):
        perffigures.parse(["--uri", "amqp://h", *argv])
    with pytest.raises(perffigures.OptionsError, match="amqp"):
        perffigures.parse(["--uri", "http://h"])


def test_percentiles_and_the_summary() -> None:
    assert perffigures.latency_text(list(range(1, 101))) == "1/50/75/95/99"
    assert perffigures.latency_text([]) == "0/0/0/0/0"
    options = perffigures.Options(uri="amqp://h", confirm=5)
    figures = perffigures.Figures(sent=1000, confirmed=1000, received=1000, latencies=[5, 7])
    assert perffigures.summary_lines(options, figures, 2.0) == [
        "test stopped after 2.0 s: 1 producer(s), 1 consumer(s), 12 B messages, confirm window 5",
        "sent: 1000 messages, sending rate avg: 500 msg/s",
        "confirmed: 1000, nacked: 0",
        "received: 1000 messages, receiving rate avg: 500 msg/s",
        "consumer latency min/median/75th/95th/99th: 5/5/7/7/7 µs",
    ]


def generator(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hutch_cli.perftest", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def summary(stdout: str) -> dict[str, int]:
    """sent/confirmed/received counts from the summary lines."""
    found = {}
    for line in stdout.splitlines():
        for key in ("sent", "received"):
            if line.startswith(f"{key}: "):
                found[key] = int(line.split()[1])
        if line.startswith("confirmed: "):
            found["confirmed"] = int(line.split()[1].rstrip(","))
    return found


def test_a_run_with_confirms_receives_everything_it_sent(hutch_broker, vhost, api) -> None:
    done = generator("--uri", hutch_broker.amqp_url, "-x", "2", "-y", "2", "-z", "2", "-c", "50",
                     "-s", "1000", "-f", "persistent")  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    counts = summary(done.stdout)
    assert counts["sent"] > 100, done.stdout
    assert counts["confirmed"] == counts["sent"] == counts["received"], done.stdout
    assert "time 1." in done.stdout  # a line a second while it runs
    # Its own queue is gone afterwards.
    queues = api.get(f"/queues/{quote(vhost)}")
    assert queues.status == 200, queues
    assert [q["name"] for q in queues.body] == []


def test_a_message_count_and_large_bodies_split_over_frames(hutch_broker) -> None:
    done = generator("--uri", hutch_broker.amqp_url, "-C", "20", "-s", "300000", "-c", "5",
                     "-u", "big")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout) == {"sent": 20, "confirmed": 20, "received": 20}


def test_wrong_credentials_fail_in_one_line(hutch_broker) -> None:
    uri = hutch_broker.amqp_url.replace("guest:guest", "guest:wrong")
    done = generator("--uri", uri, "-z", "1")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "ACCESS_REFUSED" in done.stderr, done.stderr
