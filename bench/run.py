"""Benchmark hutch-broker against RabbitMQ 3.10.8 on loopback, with PerfTest and our loadgen.

Why: hutch-broker claims to keep up with the reference broker (IMPL-7 in docs/contracts/broker.md).
This script measures that claim the same way every time: it starts each broker as a private child
process on free loopback ports (testing/hutch_testing), drives it with the same scenarios
(bench/scenarios.py) through two independent load generators (bench/perftest.py, bench/loadgen.py),
and reports published/consumed msgs/s and peak RSS side by side.

Brokers run one after the other, never at the same time: on a 2-core machine an idle second broker
would still steal cycles from the measured one. Every cell is measured ``--repeat`` times (3 by
default) in rounds whose broker order alternates (bench/rounds.py), and the table shows medians,
their range and the median of the per-round Hutch/RabbitMQ ratios. A broker that is missing, fails
to start or dies mid-run is reported in the table and the JSON, and the run goes on.

    python bench/run.py [--duration 20] [--repeat 3] [--scenarios 1,2,3]
                        [--tools perftest,loadgen] [--brokers rabbitmq,hutch]
                        [--latency-rates 10000,50000]
                        [--baseline DIR [--baseline-label 1b98ff0]] [--hutch-config FILE]
    python bench/run.py --report bench/results/<stamp>.json

Scenarios 4 and 5 (4 independent pairs, in one vhost or two) are not in the default run; the
vhosts scenario 5 needs are created here, through each broker's management API.

``--latency-rates`` adds latency cells: PerfTest publishing a fixed rate (msg/s, all producers
together), the same for both brokers, in each scenario, measured in the same rounds as the other
cells. PerfTest unthrottled measures each broker's latency as a queueing time at its own rate;
at one offered rate both carry the same load, so their latency and CPU per message compare like
with like, and a broker that cannot carry the rate shows it (bench/report.py, "held").

``--report`` runs nothing: it prints the broker table of docs/bench/report.md (rates, ratios,
CPU per message, the cores broker and load generator used, PerfTest's latency) from a results
file, so the report's figures are regenerated from the JSON rather than copied by hand.

``--baseline`` adds a third broker, ``hutch-base``: hutch-broker run from another source tree
(a checkout or ``git worktree`` of an older commit), measured in the same alternating rounds,
so a change's cost or gain is read against the code before it on the same machine at the same
time (the table adds a Hutch/base column, paired by round as the RabbitMQ ratio is).
``--hutch-config`` starts both hutch-brokers with one config file, so a setting whose default
differs between the two trees (``stamp_message_id``, say) is the same for both.

``--vhost-workers N`` starts ``hutch`` (not ``hutch-base``) with ``--vhost-workers N``: a listener
and N vhost worker processes (docs/broker.md). A worker's management API knows only its own
vhosts, so scenario 5's vhosts are created through the API of the worker that owns each. With
``--baseline`` naming a checkout of the same commit, the workers and one loop run in the same
alternating rounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import machineinfo
import perftest
import proccpu
import report
import rounds
import scenarios
from hutch_broker.server import listener  # the vhost -> worker rule, for --vhost-workers
from hutch_broker.store import records

REPO = Path(__file__).resolve().parents[1]
try:
    from hutch_demo import management, ports, probes, processes, waiting
    from hutch_testing import brokers, rabbitmq
except ImportError:  # a plain checkout: the testing package is not installed
    sys.path.insert(0, str(REPO / "testing"))
    from hutch_demo import management, ports, probes, processes, waiting
    from hutch_testing import brokers, rabbitmq

log = logging.getLogger("bench")

LOADGEN = Path(__file__).resolve().parent / "loadgen.py"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOOLS = ("perftest", "loadgen")
BROKERS = ("rabbitmq", "hutch")
BASELINE = "hutch-base"  # hutch-broker from --baseline's tree
SETUP_TIMEOUT = 120
Cell = tuple[scenarios.Scenario, str, int | None]  # scenario, tool, offered rate (None: full)


class BenchError(Exception):
    """One run failed; the message says why and lands in the table's footnotes."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=int, default=20, help="seconds per run (default 20)")
    parser.add_argument("--scenarios", default="1,2,3", type=_numbers)
    parser.add_argument("--tools", default=",".join(TOOLS), type=_names(TOOLS))
    parser.add_argument("--brokers", default=",".join(BROKERS), type=_names((*BROKERS, BASELINE)))
    parser.add_argument("--repeat", type=int, default=3, help="rounds, order alternating (3)")
    parser.add_argument(
        "--latency-rates",
        type=_rates,
        default=[],
        metavar="MSG/S,...",
        help="latency cells: PerfTest at each of these publish rates (all producers together), "
        "the same for both brokers, in each scenario (default: none)",
    )
    parser.add_argument("--settle", type=float, default=2.0, help="pause between runs (s)")
    parser.add_argument("--output", type=Path, help="JSON path (default bench/results/<ts>.json)")
    parser.add_argument(
        "--baseline",
        type=_source_tree,
        help="another source tree (its root or its broker/ folder): adds hutch-base to --brokers",
    )
    parser.add_argument("--baseline-label", default="", help="what --baseline is (a commit)")
    parser.add_argument(
        "--vhost-workers",
        type=_workers,
        default=0,
        metavar="N",
        help="start hutch (not hutch-base) with --vhost-workers N (default 0: one process)",
    )
    parser.add_argument(
        "--hutch-config", type=_config_file, help="a config file for hutch and hutch-base"
    )
    parser.add_argument(
        "--report",
        type=_results_file,
        metavar="JSON",
        help="print the markdown table of docs/bench/report.md from a results file; run nothing",
    )
    args = parser.parse_args(argv)
    if args.baseline is None and BASELINE in args.brokers:
        parser.error(f"--brokers {BASELINE} needs --baseline")
    if args.baseline is not None and BASELINE not in args.brokers:
        args.brokers = [BASELINE, *args.brokers]  # first: base and hutch alternate around it
    for number in args.scenarios:
        for rate in args.latency_rates:
            try:
                perftest.producer_rate(scenarios.SCENARIOS[number], rate)
            except perftest.PerfTestError as error:
                parser.error(f"--latency-rates: {error}")
    return args


def _rates(text: str) -> list[int]:
    """Offered rates in msg/s: whole numbers above 0, each once."""
    try:
        rates = [int(item) for item in text.split(",") if item.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not whole msg/s numbers: {text!r}") from error
    if not rates:
        raise argparse.ArgumentTypeError("no rate given")
    if any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"rates must be above 0 msg/s: {text!r}")
    if len(set(rates)) != len(rates):
        raise argparse.ArgumentTypeError(f"a rate given twice: {text!r}")
    return rates


def _results_file(text: str) -> dict[str, Any]:
    """A bench/run.py results document, read and checked before anything runs."""
    try:
        document = json.loads(Path(text).read_text())
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {error.strerror}") from error
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text} is not JSON: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("runs"), list):
        raise argparse.ArgumentTypeError(f"{text} is not a bench/run.py results file (no runs)")
    return document


def _config_file(text: str) -> Path:
    path = Path(text).resolve()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no config file {text}")
    return path


def _source_tree(text: str) -> Path:
    """The broker/ folder of a source tree, given the tree or that folder."""
    path = Path(text).resolve()
    for candidate in (path / "broker", path):
        if (candidate / "hutch_broker" / "__main__.py").is_file():
            return candidate
    raise argparse.ArgumentTypeError(f"{text} holds no broker/hutch_broker/__main__.py")


def _workers(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"a number of workers, 0 or more: {text!r}")
    return count


def worker_counts(text: str) -> list[int]:
    """An argparse type: comma-separated ``--vhost-workers`` counts, each 0 or more (0: one
    process), at least one; for the scripts that compare forms (cpu_profile, flush_stats)."""
    counts = [_workers(item.strip()) for item in text.split(",") if item.strip()]
    if not counts:
        raise argparse.ArgumentTypeError(f"one or more worker counts, e.g. 0,2: {text!r}")
    return counts


def _numbers(text: str) -> list[int]:
    numbers = [int(item) for item in text.split(",") if item.strip()]
    unknown = set(numbers) - set(scenarios.SCENARIOS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scenarios {sorted(unknown)}")
    return numbers


def _names(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        names = [item.strip() for item in text.split(",") if item.strip()]
        unknown = set(names) - set(allowed)
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {sorted(unknown)}; choose from {allowed}")
        return names

    return parse


# -- one run -------------------------------------------------------------------------------------


def loadgen(url: str, scenario: scenarios.Scenario, *extra: str, timeout: float) -> dict[str, Any]:
    """Run bench/loadgen.py in its own process (its own core) and return its JSON line, with the
    CPU seconds the process used (``load_cpu_seconds``) and its wall time."""
    command = [
        sys.executable,
        str(LOADGEN),
        "--url",
        url,
        "--scenario",
        str(scenario.number),
        *extra,
    ]
    try:
        completed = proccpu.run(command, timeout=timeout)
    except proccpu.RunTimeoutError as error:
        raise BenchError(f"loadgen did not finish within {timeout:.0f}s") from error
    lines = completed.stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError) as error:
        raise BenchError(
            f"loadgen exited {completed.returncode}: {completed.stderr.strip()[-300:]}"
        ) from error
    if "error" in result:
        raise BenchError(f"loadgen: {result['error']}")
    result["load_cpu_seconds"] = completed.cpu_seconds
    result["load_wall_seconds"] = completed.wall_seconds
    return result


LOADGEN_FIELDS = (
    "publish_rate",
    "consume_rate",
    "published",
    "confirmed",
    "consumed",
    "seconds",
    "load_cpu_seconds",
    "load_wall_seconds",
)


def run_loadgen(url: str, scenario: scenarios.Scenario, duration: int) -> dict[str, Any]:
    """loadgen's counts and rates; a pairs scenario's, each pair's too (``pairs``)."""
    result = loadgen(url, scenario, "--duration", str(duration), timeout=duration + SETUP_TIMEOUT)
    return {key: result[key] for key in (*LOADGEN_FIELDS, "pairs") if key in result}


def api_for(broker: processes.Addressed, vhost: str, vhost_workers: int) -> management.Management:
    """The management API that can create ``vhost``: the broker's, or with ``vhost_workers``
    the one of the worker that owns it (its HTTP port plus the worker's index), since a
    worker's API knows only its own vhosts (docs/broker.md)."""
    api = management.Management(broker)
    if not vhost_workers:
        return api
    return api.on_port(broker.http_port + listener.worker_for(vhost, vhost_workers))


def wait_for_workers(broker: processes.Addressed, vhost_workers: int, timeout: float) -> None:
    """Until every worker's management API answers: the broker's start waited for worker 0's
    only, and scenario 5 creates a vhost through each."""
    username, password = broker.credentials
    for index in range(vhost_workers):
        port = broker.http_port + index
        try:
            waiting.wait_for(
                lambda port=port: probes.overview(
                    broker.host, port, username=username, password=password
                ),
                timeout=timeout,
                interval=0.1,
                what=f"vhost worker {index}'s management API on port {port}",
            )
        except AssertionError as error:
            raise BenchError(str(error)) from error


def create_vhosts(
    broker: processes.Addressed, scenario: scenarios.Scenario, vhost_workers: int = 0
) -> None:
    """The scenario's vhosts, with the bench's user allowed everything in them, through the
    management API both brokers share (an existing vhost is kept as it is)."""
    user = broker.credentials[0]
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    for vhost in scenario.vhosts:
        api = api_for(broker, vhost, vhost_workers)
        steps = [
            (f"/vhosts/{management.quote(vhost)}", {}),
            (f"/permissions/{management.quote(vhost)}/{management.quote(user)}", everything),
        ]
        for path, body in steps:
            try:
                answer = api.put(path, body)
            except OSError as error:
                raise BenchError(f"PUT {path}: {error}") from error
            if answer.status not in (201, 204):
                raise BenchError(f"PUT {path}: {answer.status} {answer.body!r}")


def run_perftest(
    url: str,
    scenario: scenarios.Scenario,
    duration: int,
    lib: Path,
    offered_rate: int | None = None,
) -> dict[str, Any]:
    """Run PerfTest on the topology `setup_for_perftest` declared, at ``offered_rate`` msg/s
    if given (a latency cell), else as fast as it goes.

    PerfTest prints rates, not counts, so ``consumed`` is its receiving rate times the duration
    (``consumed_from`` says so); the broker's CPU per message divides by that.
    """
    result = perftest.run(lib, url, scenario, duration, offered_rate)
    figures: dict[str, Any] = {
        "publish_rate": result.publish_rate,
        "consume_rate": result.consume_rate,
        "consumed": round(result.consume_rate * duration),
        "consumed_from": "rate x duration",
        "latency": result.latency,
        "load_cpu_seconds": result.cpu_seconds,
        "load_wall_seconds": result.wall_seconds,
    }
    if result.instances:
        figures["perftest_instances"] = result.instances
    return figures


def fixed_rate_fields(scenario: scenarios.Scenario, offered_rate: int | None) -> dict[str, Any]:
    """What a latency cell's record says before it runs: its offered rate and the receiving
    rate that carrying it means (times PerfTest's fan-out); nothing for a throughput cell."""
    if offered_rate is None:
        return {}
    return {
        "offered_rate": offered_rate,
        "expected_consume_rate": offered_rate * perftest.fan_out(scenario),
    }


def setup_for_perftest(url: str, scenario: scenarios.Scenario) -> None:
    """Declare the scenario's topology with loadgen: PerfTest runs `--predeclared` on it."""
    loadgen(url, scenario, "--setup-only", timeout=SETUP_TIMEOUT)


def teardown_after_perftest(url: str, scenario: scenarios.Scenario) -> None:
    try:
        loadgen(url, scenario, "--teardown-only", timeout=SETUP_TIMEOUT)
    except BenchError as error:
        log.warning("teardown after PerfTest failed: %s", error)


def one_run(
    broker: processes.BrokerProcess,
    name: str,
    scenario: scenarios.Scenario,
    tool: str,
    *,
    duration: int,
    perftest_lib: Path | BaseException | None,
    round_index: int = 0,
    offered_rate: int | None = None,
    vhost_workers: int = 0,
) -> dict[str, Any]:
    """One scenario with one tool on one broker; errors become the run's `error`.
    ``offered_rate`` makes it a latency cell: PerfTest publishing that many msg/s;
    ``vhost_workers`` is the broker's ``--vhost-workers`` (0: one process)."""
    record: dict[str, Any] = {
        "broker": name,
        "scenario": scenario.number,
        "tool": tool,
        "title": scenario.title,
        "round": round_index,
        **fixed_rate_fields(scenario, offered_rate),
        "load": rounds.load(),
    }
    at = f" at {offered_rate} msg/s" if offered_rate is not None else ""
    log.info("%s: scenario %d with %s%s for %ds", name, scenario.number, tool, at, duration)
    broker.reset_peak_rss()
    began = time.monotonic()
    cpu_before = cpu_after = None
    window = 0.0
    perftest_ready = False
    try:
        if offered_rate is not None and tool != "perftest":
            raise BenchError(f"a fixed rate is PerfTest's (--rate), not {tool}'s")
        if tool == "perftest" and not isinstance(perftest_lib, Path):
            raise BenchError(f"PerfTest unavailable: {perftest_lib}")
        # outside the broker's CPU window, as the setup
        create_vhosts(broker, scenario, vhost_workers)
        if tool == "perftest":
            setup_for_perftest(broker.amqp_url, scenario)  # outside the broker's CPU window
            perftest_ready = True
        cpu_before = cpu_seconds(broker)
        window_began = time.monotonic()
        if tool == "loadgen":
            record |= run_loadgen(broker.amqp_url, scenario, duration)
        else:
            assert isinstance(perftest_lib, Path)
            record |= run_perftest(broker.amqp_url, scenario, duration, perftest_lib, offered_rate)
        cpu_after = cpu_seconds(broker) if broker.running else None
        window = time.monotonic() - window_began
    except (BenchError, perftest.PerfTestError) as error:
        record["error"] = str(error)
    if perftest_ready:
        teardown_after_perftest(broker.amqp_url, scenario)
    record["wall_seconds"] = round(time.monotonic() - began, 1)
    record["peak_rss_bytes"] = broker.peak_rss_bytes() if broker.running else None
    if cpu_before is not None and cpu_after is not None and not record.get("error"):
        record |= cpu_figures(
            cpu_after - cpu_before,
            window,
            record.get("consumed"),
            record.get("load_cpu_seconds"),
            record.get("load_wall_seconds"),
        )
    if not broker.running:
        record["error"] = f"{name} died during the run: {record.get('error', '')}"
        record["broker_log_tail"] = broker.log_tail(4096)
    record |= report.hold_fields(record)
    _log_record(record)
    return record


def cpu_figures(
    broker_cpu: float,
    window: float,
    consumed: int | None,
    load_cpu: float | None,
    load_wall: float | None,
) -> dict[str, Any]:
    """The CPU fields of one run: the broker's seconds, its cost per consumed message and the
    cores each side kept busy on average (CPU seconds over the wall time each was measured in:
    the broker over the load generator's run, the load generator over its own life)."""
    figures: dict[str, Any] = {"broker_cpu_seconds": round(broker_cpu, 2)}
    if window > 0:
        figures["broker_cores"] = round(broker_cpu / window, 3)
    if consumed:
        figures["cpu_us_per_message"] = round(broker_cpu / consumed * 1e6, 2)
    if load_cpu is not None:
        figures["load_cpu_seconds"] = round(load_cpu, 2)
        if load_wall:
            figures["load_cores"] = round(load_cpu / load_wall, 3)
    if load_wall is not None:
        figures["load_wall_seconds"] = round(load_wall, 2)
    return figures


def cpu_seconds(broker: processes.BrokerProcess) -> float | None:
    """User plus system CPU time of the broker's processes so far, from /proc/<pid>/stat.

    Why: on a shared machine throughput moves with the neighbours' load, the CPU a broker
    spends per message much less; loadgen's message count divided into it is the cost of
    one message, whoever else ran meanwhile.
    """
    try:
        stats = [proccpu.read_stat(pid) for pid in broker.group_pids()]
    except (OSError, ValueError):
        return None
    return proccpu.total_seconds(stats, proccpu.clock_ticks(), children=False)


def _log_record(record: dict[str, Any]) -> None:
    if record.get("error"):
        log.warning("  failed: %s", record["error"].splitlines()[0])
    else:
        log.info(
            "  published %.0f/s, consumed %.0f/s, broker CPU %s us/message,"
            " cores: broker %s, load %s",
            record["publish_rate"],
            record["consume_rate"],
            record.get("cpu_us_per_message", "-"),
            record.get("broker_cores", "-"),
            record.get("load_cores", "-"),
        )
    if "held" in record:
        log.info(
            "  held %.1f %% of %d msg/s; latency p50/p95/p99 %s ms",
            record["held_fraction"] * 100,
            record["offered_rate"],
            " / ".join(_one_decimal(report.latency_ms(record, point)) for point in report.POINTS),
        )


def _one_decimal(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# -- one broker ----------------------------------------------------------------------------------


class BaselineBroker(brokers.HutchBroker):
    """hutch-broker imported from another source tree's broker/ folder (``--baseline``)."""

    def __init__(self, source: Path, extra_args: list[str]) -> None:
        super().__init__(extra_args=extra_args)
        self.source = source

    def _environment(self) -> dict[str, str]:
        env = super()._environment()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.source), env["PYTHONPATH"]]))
        return env


def make_broker(
    name: str, baseline: Path | None = None, config: Path | None = None, vhost_workers: int = 0
) -> processes.BrokerProcess:
    if name == "rabbitmq":
        return rabbitmq.RabbitMQ()
    extra_args = ["--config", str(config)] if config is not None else []
    if name == BASELINE:
        if baseline is None:
            raise BenchError("hutch-base needs --baseline")
        return BaselineBroker(baseline, extra_args)
    if not vhost_workers:
        return brokers.HutchBroker(extra_args=extra_args)
    broker = brokers.HutchBroker(extra_args=[*extra_args, "--vhost-workers", str(vhost_workers)])
    # Worker i's API listens on http-port + i: a port whose neighbour is free too (beyond two
    # workers a taken port shows as a worker whose API does not answer: wait_for_workers).
    broker.http_port = ports.even_pair({broker.amqp_port})
    return broker


def workers_of(name: str, args: argparse.Namespace) -> int:
    """The ``--vhost-workers`` broker ``name`` runs with: only ``hutch`` takes the option."""
    return args.vhost_workers if name == "hutch" else 0


def bench_broker(
    name: str,
    args: argparse.Namespace,
    perftest_lib: Path | BaseException | None,
    round_index: int = 0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start one broker, run every cell of `plan` on it, stop it."""
    broker = make_broker(name, args.baseline, args.hutch_config, workers_of(name, args))
    info: dict[str, Any] = {}
    cells = plan(args)
    try:
        try:
            broker.start()
            wait_for_workers(broker, workers_of(name, args), timeout=60)
        except (processes.BrokerStartError, BenchError) as error:
            log.error("%s did not start, its cells of round %d are not run: %s", name,
                      round_index + 1, error)  # fmt: skip
            info["error"] = str(error)
            return info, [
                _not_run(name, cell, f"{name} did not start: {error}", round_index)
                for cell in cells
            ]
        info |= _broker_facts(broker)
        runs = []
        for cell in cells:
            scenario, tool, offered_rate = cell
            problem = _ensure_running(broker, name)
            if problem is not None:
                runs.append(_not_run(name, cell, problem, round_index))
                continue
            runs.append(
                one_run(
                    broker,
                    name,
                    scenario,
                    tool,
                    duration=args.duration,
                    perftest_lib=perftest_lib,
                    round_index=round_index,
                    offered_rate=offered_rate,
                    vhost_workers=workers_of(name, args),
                )
            )
            time.sleep(args.settle)
        return info, runs
    finally:
        broker.stop()


def plan(args: argparse.Namespace) -> list[Cell]:
    """The cells each broker runs in a round, in order: per scenario, its throughput cells (one
    per tool), then its latency cells (PerfTest, one per offered rate, lowest first)."""
    cells: list[Cell] = []
    for number in args.scenarios:
        scenario = scenarios.SCENARIOS[number]
        cells += [(scenario, tool, None) for tool in args.tools]
        cells += [(scenario, "perftest", rate) for rate in sorted(args.latency_rates)]
    return cells


def _broker_facts(broker: processes.BrokerProcess) -> dict[str, Any]:
    overview = broker.overview() or {}
    return {
        "version": overview.get("rabbitmq_version") or overview.get("product_version"),
        "product": overview.get("product_name"),
        "start_seconds": round(broker.started_in or 0.0, 2),
        "idle_rss_bytes": broker.rss_bytes(),
    }


def _ensure_running(broker: processes.BrokerProcess, name: str) -> str | None:
    """Restart a broker that died in an earlier run; say why not if that fails."""
    if broker.running:
        return None
    log.warning("%s is not running; restarting it", name)
    try:
        broker.restart()
    except processes.BrokerStartError as error:
        return f"{name} died and could not be restarted: {error}"
    return None


def _not_run(name: str, cell: Cell, reason: str, round_index: int) -> dict[str, Any]:
    scenario, tool, offered_rate = cell
    return {
        "broker": name,
        "scenario": scenario.number,
        "tool": tool,
        "title": scenario.title,
        "round": round_index,
        **fixed_rate_fields(scenario, offered_rate),
        "error": reason,
    }


# -- the whole benchmark -------------------------------------------------------------------------


def prepare_perftest(
    tools: list[str], latency_rates: list[int] | None = None
) -> Path | BaseException | None:
    """PerfTest's lib directory if a cell needs it (a perftest tool or a latency cell), or why
    it is unavailable; None if no cell does."""
    if "perftest" not in tools and not latency_rates:
        return None
    try:
        return perftest.ensure_installed()
    except perftest.PerfTestError as error:
        log.warning("PerfTest unavailable: %s", error)
        return error


def machine(perftest_lib: Path | BaseException | None) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        **machineinfo.facts(),
        "memory_bytes": _total_memory(),
        "python": platform.python_version(),
        "perftest": perftest.version(perftest_lib) if isinstance(perftest_lib, Path) else None,
        "git_commit": _git_commit(REPO),
        # the broker's C loop or its Python twin (docs/broker.md "Native code")
        "broker_decode_run": "C" if records.NATIVE_RUNS else "Python",
    }


def _total_memory() -> int | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def _git_commit(tree: Path) -> str | None:
    try:
        completed = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return completed.stdout.strip() or None


def _tree_label(tree: Path) -> str:
    """What the results say of ``--baseline``'s tree: its commit and folder's name."""
    commit = _git_commit(tree)
    return f"a tree of {commit[:7] if commit else 'no git commit'} ({tree.name}/)"


def missing_brokers(names: list[str]) -> list[str]:
    """Why each broker of ``names`` that cannot be started on this machine cannot be: checked
    before the first round, so a fresh machine without RabbitMQ is told at once, not after a
    quarter of an hour of Hutch's cells beside empty ones."""
    problems = []
    if "rabbitmq" in names and not rabbitmq.installed():
        problems.append(
            "rabbitmq: RabbitMQ 3.10.8 is not installed (as root: bash scripts/install-rabbitmq.sh;"
            " or leave it out with --brokers hutch)"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    if args.report is not None:
        try:
            print(report.markdown(args.report))
        except ValueError as error:
            print(f"run.py: error: {error}", file=sys.stderr)
            return 2
        print("\n" + report.context(args.report))
        return 0
    missing = missing_brokers(args.brokers)
    if missing:
        for problem in missing:
            print(f"run.py: error: {problem}", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.UTC)
    perftest_lib = prepare_perftest(args.tools, args.latency_rates)
    document: dict[str, Any] = {
        "started_at": started.isoformat(timespec="seconds"),
        "arguments": {
            "duration": args.duration,
            "scenarios": args.scenarios,
            "tools": args.tools,
            "brokers": args.brokers,
            "repeat": args.repeat,
            "latency_rates": args.latency_rates,
            # Not its path: results files are kept in docs/bench/, which holds no machine's path.
            "baseline": _tree_label(args.baseline) if args.baseline else None,
            "baseline_label": args.baseline_label or None,
            "hutch_config": args.hutch_config.read_text() if args.hutch_config else None,
            "vhost_workers": args.vhost_workers,
        },
        "baseline_commit": _git_commit(args.baseline) if args.baseline else None,
        "machine": machine(perftest_lib),
        "scenarios": {number: scenarios.SCENARIOS[number].title for number in args.scenarios},
        "brokers": {},
        "runs": [],
    }
    for round_index, order in enumerate(rounds.orders(args.brokers, args.repeat)):
        log.info("round %d of %d: %s", round_index + 1, args.repeat, " then ".join(order))
        for name in order:
            info, runs = bench_broker(name, args, perftest_lib, round_index)
            document["brokers"].setdefault(name, info)
            document["runs"] += runs
    document["total_seconds"] = round(
        (datetime.datetime.now(datetime.UTC) - started).total_seconds(), 1
    )
    report.number_failures(document["runs"])
    if args.latency_rates:
        document["fixed_rate"] = report.fixed_rate_summary(document["runs"])
    output = args.output or RESULTS_DIR / f"{started:%Y%m%dT%H%M%SZ}.json"
    report.write_json(output, document)
    if report.group(document["runs"]):
        print(report.table(document["runs"], args.brokers))
    if args.latency_rates:
        print("\n" + report.fixed_rate_table(document["runs"], args.brokers))
    print(rounds.busiest(document["runs"]))
    print(f"\nresults: {output} ({document['total_seconds']:.0f} s)")
    return 0 if any(not run.get("error") for run in document["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
