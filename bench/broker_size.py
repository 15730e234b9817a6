"""Broker size: what 10,000 queues and 100,000 bindings cost each broker, phase by phase.

    python bench/broker_size.py [--queues 10000] [--bindings-per-queue 10] [--rounds 3]
                                [--brokers rabbitmq,hutch] [--quick] [--output PATH]
                                [--hutch-source DIR/broker]   # git archive <commit> broker

Why: the isolation issue asks that no work growing with the number of objects hold hutch-broker's
one event loop for more than a few milliseconds, and that memory stay bounded. This benchmark
measures the object count itself, side by side with RabbitMQ 3.10.8 on the same machine: how long
each phase takes, how resident memory grows per queue and per binding, and whether a phase stalls
another tenant. The phases, each timed, on a fresh broker of each kind:

- ``declare_queues``: N durable queues over AMQP, pipelined (``CHANNELS`` channels with
  ``WINDOW`` declares in flight on each, raw frames through bench/loadgen.py's client), in two
  steps (N/10, then the rest) so that the memory per queue comes from the growth between the
  two sizes rather than from the broker's fixed cost;
- ``declare_bindings``: N x B durable bindings to ten topic exchanges, pipelined the same way
  and in the same two steps;
- ``list_queues`` / ``list_bindings``: every queue and binding of the vhost through the
  management API, paged with page_size 500 as rabbitmqadmin and the UI page (a broker that
  ignores paging for a resource answers the whole list at once: the record says so);
- ``export``: ``GET /api/definitions``;
- ``import``: ``POST /api/definitions`` of that export into a second, fresh broker of the kind;
- ``recover``: kill -9 the first broker and start it on the same data: seconds to AMQP and
  HTTP answering, and to every queue listed.

During every phase but ``recover`` (whose broker is down) a canary (hutch_testing.noisy: a
separate process publishing and consuming one message every 20 ms on its own vhost) measures
the round trips of an unrelated tenant; its max is reported per phase. A phase whose canary max
is far above ~50 ms stalled the other tenants: a finding. RSS is read after each phase (the sum
of VmRSS over the broker's processes: hutch-broker's one Python process, RabbitMQ's beam and its
small helpers). Each round runs both brokers one after the other, the order alternating from
round to round (bench/rounds.py); the table gives medians, ranges and per-round ratios.
``--quick`` (200 queues, one round, unless given otherwise) keeps the script from rotting:
tests/bench/test_broker_size.py runs it against hutch-broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import loadgen
import rounds
from pamqp import commands, frame

REPO = Path(__file__).resolve().parents[1]
try:
    from hutch_demo import management, processes
    from hutch_testing import noisy, noisy_cases, rabbitmq
except ImportError:  # a plain checkout: the testing package is not installed
    sys.path.insert(0, str(REPO / "testing"))
    from hutch_demo import management, processes
    from hutch_testing import noisy, noisy_cases, rabbitmq

log = logging.getLogger("broker_size")

BROKERS = ("rabbitmq", "hutch")
VHOST = "size"
CANARY_TENANT = "size-canary"
EXCHANGES = 10  # topic exchanges the bindings are spread over
CHANNELS = 8  # AMQP channels declaring at once
WINDOW = 64  # declares in flight per channel
PAGE_SIZE = 500  # as rabbitmqadmin and the management UI page
HTTP_TIMEOUT = 600.0
RECOVER_TIMEOUT = 600.0
MAX_BODY_BYTES = 512 * 2**20  # RabbitMQ's request body limit, raised for the import
SMALL_FRACTION = 10  # the first step declares 1/10 of the objects
QUICK_QUEUES = 200
PHASES = (
    "declare_queues",
    "declare_bindings",
    "list_queues",
    "list_bindings",
    "export",
    "import",
    "recover",
)


class SizeError(Exception):
    """A phase did not do what it must (a count is off, a request failed)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queues", type=int, help="queues declared (10,000; --quick 200)")
    parser.add_argument("--bindings-per-queue", type=int, default=10, help="bindings each (10)")
    parser.add_argument("--rounds", type=int, help="rounds, broker order alternating (3; quick 1)")
    parser.add_argument("--brokers", default=",".join(BROKERS), type=_brokers)
    parser.add_argument("--quick", action="store_true", help="200 queues, one round")
    parser.add_argument("--output", type=Path, help="JSON path (default bench/results/...)")
    parser.add_argument(
        "--hutch-source", type=Path, help="run hutch-broker from this broker/ folder (a commit's)"
    )
    args = parser.parse_args(argv)
    if args.queues is None:
        args.queues = QUICK_QUEUES if args.quick else 10_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.queues < SMALL_FRACTION * 2 or args.bindings_per_queue < 1 or args.rounds < 1:
        parser.error("need --queues >= 20, --bindings-per-queue >= 1 and --rounds >= 1")
    return args


def _brokers(text: str) -> list[str]:
    names = [item.strip() for item in text.split(",") if item.strip()]
    unknown = set(names) - set(BROKERS)
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {sorted(unknown)}; choose from {BROKERS}")
    return names


# -- the topology --------------------------------------------------------------------------------


def queue_name(index: int) -> str:
    return f"size.q{index:06d}"


def exchange_name(index: int) -> str:
    return f"size.x{index}"


def binding(queue: int, number: int) -> tuple[str, str, str]:
    """(exchange, queue, routing key) of binding ``number`` of queue ``queue``."""
    return exchange_name(number % EXCHANGES), queue_name(queue), f"k.{queue}.{number}"


def declare_frames(queues: range) -> list[bytes]:
    return [
        frame.marshal(commands.Queue.Declare(queue=queue_name(index), durable=True), 0)
        for index in queues
    ]


def bind_frames(queues: range, per_queue: int) -> list[bytes]:
    frames = []
    for index in queues:
        for number in range(per_queue):
            exchange, queue, key = binding(index, number)
            bind = commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=key)
            frames.append(frame.marshal(bind, 0))
    return frames


def _on_channel(raw: bytes, channel: int) -> bytes:
    """A method frame marshalled for channel 0, re-addressed (bytes 1-2 are the channel)."""
    return raw[:1] + channel.to_bytes(2, "big") + raw[3:]


async def _pipelined(url: str, frames: list[bytes], reply: type) -> None:
    """Send every frame, ``WINDOW`` in flight on each of ``CHANNELS`` channels; all must succeed."""
    connection = await loadgen.connect(loadgen.ConnectParams.from_url(url), "broker-size")
    try:
        channels = [await connection.open_channel() for _ in range(CHANNELS)]
        shares = [frames[number :: len(channels)] for number in range(len(channels))]
        await asyncio.gather(
            *(
                _drive(channel, share, reply)
                for channel, share in zip(channels, shares, strict=True)
            )
        )
    finally:
        await connection.close()


async def _drive(channel: loadgen.Channel, frames: list[bytes], reply: type) -> None:
    in_flight = 0
    for raw in frames:
        if in_flight >= WINDOW:
            await _one_reply(channel, reply)
            in_flight -= 1
        await channel.connection.writable()
        channel.connection.send(_on_channel(raw, channel.number))
        in_flight += 1
    for _ in range(in_flight):
        await _one_reply(channel, reply)


async def _one_reply(channel: loadgen.Channel, reply: type) -> None:
    try:
        answer = await asyncio.wait_for(channel.replies.get(), HTTP_TIMEOUT)
    except TimeoutError as error:
        raise SizeError(f"no {reply.__name__} within {HTTP_TIMEOUT:.0f}s") from error
    if not isinstance(answer, reply):
        raise SizeError(f"expected {reply.__name__}, got {answer!r}")


def declare(broker: processes.BrokerProcess, frames: list[bytes], reply: type) -> None:
    asyncio.run(_pipelined(vhost_url(broker), frames, reply))


def vhost_url(broker: processes.BrokerProcess) -> str:
    user, password = broker.credentials
    return f"amqp://{user}:{password}@{broker.host}:{broker.amqp_port}/{VHOST}"


# -- the management API --------------------------------------------------------------------------


def api(broker: processes.BrokerProcess) -> management.Management:
    return management.Management(broker, timeout=HTTP_TIMEOUT)


def must(response: management.Response, what: str) -> Any:
    if not response.ok:
        raise SizeError(f"{what}: HTTP {response.status} {str(response.body)[:300]}")
    return response.body


def prepare(broker: processes.BrokerProcess) -> None:
    """The benchmark's vhost for guest, its exchanges, and the canary's own tenant."""
    admin = api(broker)
    user = management.quote(broker.credentials[0])
    must(admin.put(f"/vhosts/{VHOST}", {}), "create vhost")
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    must(admin.put(f"/permissions/{VHOST}/{user}", grant), "grant guest")
    for index in range(EXCHANGES):
        body = {"type": "topic", "durable": True}
        must(admin.put(f"/exchanges/{VHOST}/{exchange_name(index)}", body), "declare exchange")
    noisy.create_tenant(broker, CANARY_TENANT)


def list_paged(broker: processes.BrokerProcess, resource: str) -> dict[str, Any]:
    """Every item of ``/api/<resource>/size``, page by page; how many, in how many requests."""
    admin = api(broker)
    page, seen, requests, slowest = 1, 0, 0, 0.0
    while True:
        began = time.monotonic()
        response = admin.get(f"/{resource}/{VHOST}?page={page}&page_size={PAGE_SIZE}")
        slowest = max(slowest, time.monotonic() - began)
        body = must(response, f"list {resource}")
        requests += 1
        facts = {"requests": requests, "slowest_request_seconds": round(slowest, 3)}
        if isinstance(body, list):  # paging not offered for this resource: the whole list
            return facts | {"items": len(body), "paged": False}
        seen += len(body["items"])
        if page >= body["page_count"]:
            return facts | {"items": seen, "paged": True}
        page += 1


def queue_total(broker: processes.BrokerProcess) -> int | None:
    """The vhost's queue count as a one-item page says it, None while the API cannot say."""
    try:
        response = management.Management(broker, timeout=10.0).get(
            f"/queues/{VHOST}?page=1&page_size=1"
        )
    except OSError:
        return None
    if not response.ok or not isinstance(response.body, dict):
        return None
    return int(response.body.get("total_count", 0))


def importable(export: dict[str, Any]) -> dict[str, Any]:
    """The export without the canary's tenant, which the fresh broker already has."""
    keep = dict(export)
    keep["users"] = [u for u in export.get("users", []) if u.get("name") != CANARY_TENANT]
    keep["vhosts"] = [v for v in export.get("vhosts", []) if v.get("name") != CANARY_TENANT]
    keep["permissions"] = [
        p for p in export.get("permissions", []) if p.get("vhost") != CANARY_TENANT
    ]
    return keep


# -- one broker ----------------------------------------------------------------------------------


class LargeBodyRabbitMQ(rabbitmq.RabbitMQ):
    """RabbitMQ accepting a definitions body over its 20 MiB default: 10,000 queues and
    100,000 bindings export to about 20 MB, and an operator importing them raises
    ``management.http.max_body_size`` the same way."""

    def _config(self) -> str:
        return super()._config() + f"management.http.max_body_size = {MAX_BODY_BYTES}\n"


def make_broker(kind: str, work: Path, source: Path | None = None) -> processes.BrokerProcess:
    """A broker of ``kind``; hutch-broker from ``source`` (another tree's broker/) if given."""
    if kind == "rabbitmq":
        return LargeBodyRabbitMQ(work_dir=work, start_timeout=RECOVER_TIMEOUT)
    return noisy_cases.SourceBroker(source=source, work_dir=work, start_timeout=RECOVER_TIMEOUT)


@contextmanager
def canary_watch(broker: processes.BrokerProcess, record: dict[str, Any]) -> Iterator[None]:
    """Run a canary on the broker while the block runs; its report lands in ``record``."""
    tenant = noisy.Tenant(CANARY_TENANT, CANARY_TENANT, f"{CANARY_TENANT}-secret")
    with noisy.Canary(broker, tenant) as canary:
        yield
        report = canary.stop()
    record["canary"] = {
        key: getattr(report, key) for key in ("count", "max_ms", "p50_ms", "p99_ms", "misses")
    } | {"drops": report.drops, "own_lag_max_ms": report.own_lag_max_ms}


def timed(
    broker: processes.BrokerProcess, name: str, steps: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Run one phase's ``steps`` under a canary; seconds, canary report, RSS after."""
    record: dict[str, Any] = {"phase": name, "load": rounds.load()}
    with canary_watch(broker, record):
        began = time.monotonic()
        steps(record)
        record["seconds"] = round(time.monotonic() - began, 3)
    record["rss_bytes"] = broker.rss_bytes()
    log.info(
        "  %s: %.2f s, canary max %.0f ms, RSS %.1f MiB",
        name,
        record["seconds"],
        record["canary"]["max_ms"],
        record["rss_bytes"] / 2**20,
    )
    return record


def bench_broker(kind: str, args: argparse.Namespace, round_index: int) -> dict[str, Any]:
    """Every phase on one broker kind; a failure ends this broker's round with its error."""
    result: dict[str, Any] = {"broker": kind, "round": round_index, "phases": {}}
    if kind == "hutch":  # the broker runs from this tree: which commit, and was it edited?
        result["source"] = source_state(args.hutch_source)
    with tempfile.TemporaryDirectory(prefix=f"size-{kind}-") as work:
        first = make_broker(kind, Path(work) / "first", args.hutch_source)
        try:
            _phases(first, kind, args, Path(work), result)
        except (SizeError, processes.BrokerStartError, noisy.CanaryError, OSError) as error:
            result["error"] = f"{type(error).__name__}: {error}"
            result["broker_log_tail"] = first.log_tail(4096)
            log.warning("%s failed: %s", kind, result["error"].splitlines()[0])
        finally:
            first.stop()
    return result


def source_state(source: Path | None) -> dict[str, Any]:
    """HEAD and whether broker/ differs from it, as hutch-broker runs from this tree, unless
    ``--hutch-source`` named another (``git archive <commit> broker``: a pinned commit)."""
    if source is not None:
        return {"hutch_source": str(source)}

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(REPO), *args],
                check=False,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "broker_edited": bool(git("status", "--short", "broker")),
    }


def _phases(
    broker: processes.BrokerProcess,
    kind: str,
    args: argparse.Namespace,
    work: Path,
    result: dict[str, Any],
) -> None:
    queues, per_queue = args.queues, args.bindings_per_queue
    small = queues // SMALL_FRACTION
    phases = result["phases"]
    memory = result["memory"] = {}
    broker.start()
    prepare(broker)
    memory["idle_rss_bytes"] = broker.rss_bytes()

    def declare_queues(record: dict[str, Any]) -> None:
        declare(broker, declare_frames(range(small)), commands.Queue.DeclareOk)
        memory["rss_small_queues"] = broker.rss_bytes()
        declare(broker, declare_frames(range(small, queues)), commands.Queue.DeclareOk)
        memory["rss_all_queues"] = broker.rss_bytes()

    def declare_bindings(record: dict[str, Any]) -> None:
        declare(broker, bind_frames(range(small), per_queue), commands.Queue.BindOk)
        memory["rss_small_bindings"] = broker.rss_bytes()
        declare(broker, bind_frames(range(small, queues), per_queue), commands.Queue.BindOk)
        memory["rss_all_bindings"] = broker.rss_bytes()

    phases["declare_queues"] = timed(broker, "declare_queues", declare_queues)
    phases["declare_bindings"] = timed(broker, "declare_bindings", declare_bindings)
    memory["bytes_per_queue"] = round(
        (memory["rss_all_queues"] - memory["rss_small_queues"]) / (queues - small)
    )
    memory["bytes_per_binding"] = round(
        (memory["rss_all_bindings"] - memory["rss_small_bindings"]) / ((queues - small) * per_queue)
    )

    expected = {"queues": queues, "bindings": queues * (per_queue + 1)}  # + the default exchange's
    for resource in ("queues", "bindings"):

        def listing(record: dict[str, Any], resource: str = resource) -> None:
            record |= list_paged(broker, resource)
            if record["items"] != expected[resource]:
                raise SizeError(f"listed {record['items']} {resource}, not {expected[resource]}")

        phases[f"list_{resource}"] = timed(broker, f"list_{resource}", listing)

    export: dict[str, Any] = {}

    def export_definitions(record: dict[str, Any]) -> None:
        response = api(broker).get("/definitions")
        export["body"] = must(response, "export")
        record["queues"] = len(export["body"].get("queues", []))
        record["bindings"] = len(export["body"].get("bindings", []))

    phases["export"] = timed(broker, "export", export_definitions)
    second = make_broker(kind, work / "second", args.hutch_source)
    _import(second, importable(export.pop("body")), phases, queues)
    phases["recover"] = _recover(broker, queues)


def _import(
    fresh: processes.BrokerProcess, body: dict[str, Any], phases: dict[str, Any], queues: int
) -> None:
    """POST the export into a fresh broker of the same kind, under a canary on that broker."""
    try:
        fresh.start()
        prepare(fresh)

        def post(record: dict[str, Any]) -> None:
            record["body_bytes"] = len(json.dumps(body))
            began = time.monotonic()
            must(api(fresh).post("/definitions", body), "import")
            record["post_seconds"] = round(time.monotonic() - began, 3)
            seen = queue_total(fresh)
            if seen != queues:
                raise SizeError(f"after the import {seen} queues are listed, not {queues}")

        phases["import"] = timed(fresh, "import", post)
    finally:
        fresh.stop()


def _recover(broker: processes.BrokerProcess, queues: int) -> dict[str, Any]:
    """kill -9, start on the same data: seconds to answering, and to every queue listed."""
    record: dict[str, Any] = {"phase": "recover", "load": rounds.load()}
    broker.kill()
    began = time.monotonic()
    broker.restart()  # reaps the killed process, starts, waits for AMQP and the API to answer
    record["answering_seconds"] = round(time.monotonic() - began, 3)
    deadline = began + RECOVER_TIMEOUT
    while queue_total(broker) != queues:
        if time.monotonic() > deadline:
            raise SizeError(f"{queues} queues not listed {RECOVER_TIMEOUT:.0f}s after the restart")
        time.sleep(0.05)
    record["seconds"] = round(time.monotonic() - began, 3)
    record["rss_bytes"] = broker.rss_bytes()
    log.info(
        "  recover: answering in %.2f s, all queues listed in %.2f s, RSS %.1f MiB",
        record["answering_seconds"],
        record["seconds"],
        record["rss_bytes"] / 2**20,
    )
    return record


# -- the summary ---------------------------------------------------------------------------------


def samples(
    results: list[dict[str, Any]], kind: str, pick: Callable[[dict[str, Any]], Any]
) -> list[float]:
    values = []
    for result in results:
        if result["broker"] != kind or result.get("error"):
            continue
        value = pick(result)
        if value is not None:
            values.append(float(value))
    return values


def _phase(name: str, key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda result: result["phases"].get(name, {}).get(key)


def _canary(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda result: result["phases"].get(name, {}).get("canary", {}).get("max_ms")


def _cell(values: list[float], unit: str = "", digits: int = 2) -> str:
    return rounds.summarize(values).text(unit, digits) if values else "-"


def _paired(results: list[dict[str, Any]], pick: Callable[[dict[str, Any]], Any]) -> str:
    """hutch / rabbitmq, per round where both brokers succeeded."""
    by_round: dict[int, dict[str, float]] = {}
    for result in results:
        value = None if result.get("error") else pick(result)
        if value is not None:
            by_round.setdefault(result["round"], {})[result["broker"]] = float(value)
    pairs = [(v["hutch"], v["rabbitmq"]) for v in by_round.values() if len(v) == 2]
    if not pairs:
        return "-"
    spread = rounds.ratios([h for h, _ in pairs], [r for _, r in pairs])
    return spread.text("x", 2)


def table(results: list[dict[str, Any]], kinds: list[str]) -> str:
    """Markdown: seconds and canary max per phase, then memory, per broker."""
    header = ["phase"]
    for kind in kinds:
        header += [f"{kind} s", f"{kind} canary max ms"]
    if len(kinds) == 2:
        header.append("time hutch/rabbitmq")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in PHASES:
        row = [name]
        for kind in kinds:
            row.append(_cell(samples(results, kind, _phase(name, "seconds"))))
            row.append(_cell(samples(results, kind, _canary(name)), digits=0))
        if name == "recover":
            row[0] = "recover (all queues listed)"
        if len(kinds) == 2:
            row.append(_paired(results, _phase(name, "seconds")))
        lines.append("| " + " | ".join(row) + " |")
    row = ["recover (AMQP and HTTP answering)"]
    for kind in kinds:
        row += [_cell(samples(results, kind, _phase("recover", "answering_seconds"))), "-"]
    if len(kinds) == 2:
        row.append(_paired(results, _phase("recover", "answering_seconds")))
    lines.append("| " + " | ".join(row) + " |")
    lines += ["", "| memory | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    memory_rows = [
        ("bytes per queue", lambda r: r["memory"].get("bytes_per_queue"), 1),
        ("bytes per binding", lambda r: r["memory"].get("bytes_per_binding"), 1),
        ("RSS idle (MiB)", lambda r: r["memory"].get("idle_rss_bytes"), 2**20),
        ("RSS after declares (MiB)", _phase("declare_bindings", "rss_bytes"), 2**20),
        ("RSS after listing (MiB)", _phase("list_bindings", "rss_bytes"), 2**20),
        ("RSS after export (MiB)", _phase("export", "rss_bytes"), 2**20),
        ("RSS of the importing broker (MiB)", _phase("import", "rss_bytes"), 2**20),
        ("RSS after recovery (MiB)", _phase("recover", "rss_bytes"), 2**20),
    ]
    for label, pick, scale in memory_rows:
        cells = []
        for kind in kinds:
            values = [v / scale for v in samples(results, kind, _safe(pick))]
            cells.append(_cell(values, digits=0 if scale == 1 else 1))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _safe(pick: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    def safe(result: dict[str, Any]) -> Any:
        try:
            return pick(result)
        except KeyError:
            return None

    return safe


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    log.info(
        "%d queues x %d bindings, %d rounds, brokers %s, load %s",
        args.queues,
        args.bindings_per_queue,
        args.rounds,
        args.brokers,
        rounds.load(),
    )
    results: list[dict[str, Any]] = []
    document = {
        "arguments": {
            "queues": args.queues,
            "bindings_per_queue": args.bindings_per_queue,
            "rounds": args.rounds,
            "brokers": args.brokers,
            "channels": CHANNELS,
            "window": WINDOW,
            "page_size": PAGE_SIZE,
        },
        "cpus": os.cpu_count(),
        "results": results,
    }
    output = args.output
    for round_index, order in enumerate(rounds.orders(args.brokers, args.rounds)):
        for kind in order:
            log.info("round %d of %d: %s", round_index + 1, args.rounds, kind)
            results.append(bench_broker(kind, args, round_index))
            output = rounds.write_results(document, output, "broker-size")  # a partial run counts
    print(table(results, args.brokers))
    print(rounds.busiest([p for r in results for p in r["phases"].values()]))
    return 1 if any(result.get("error") for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
