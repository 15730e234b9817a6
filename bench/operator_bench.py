"""Operator scale benchmark: N Queue CRs at once, an operator restart, then quiet sweeps.

Why a script and not a test: it measures (seconds to all Ready, CRs/s, Kubernetes and broker
calls per CR, operator peak RSS, restart settle time, what a drift-sweep pass costs when nothing
changed) rather than asserting, and takes minutes. Everything is local: the apiserver tier of
hutch_localkube, one hutch-broker on loopback, and the operator as a child process
(``python -m hutch_operator``) so its RSS and restart are real.

    python bench/operator_bench.py [--queues 1000] [--workers 16] [--json out.json]
    python bench/operator_bench.py --queues 10000 --timeout 600
    python bench/operator_bench.py --queues 10000 --no-operator   # the apiserver's own share

Phases: create (sweep period 300 s, so no pass lands in it); restart with every Queue settled
(``--sweep-period``, 30 s by default, so passes land after the restart settled); then a quiet
window of two sweep passes, whose broker requests, Kubernetes calls and status writes are the
sweep's whole cost. ``--no-operator`` makes only the POSTs, with no operator running: the
apiserver's time to accept them on its own, the baseline the time with the operator compares to.
Every result carries the machine's load average, which is shared.

Targets (issue 5, case 7): 1,000 Queues Ready in at most 10 s and 10,000 in at most 60 s;
operator RSS at most 300 MB at 10,000; a restart with 10,000 settled Queues settled in at most
30 s with no broker writes and no status writes; a quiet sweep pass costs O(brokers x kinds)
calls.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "testing"), str(REPO / "localkube")]

from hutch_localkube import planes  # noqa: E402
from hutch_testing import admission  # noqa: E402
from hutch_testing.brokers import HutchBroker  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def apiserver_requests(plane: Any) -> dict[tuple[str, str], float]:
    """apiserver_request_total summed by (verb, resource), from the apiserver's /metrics."""
    context = ssl.create_default_context(cafile=str(plane.pki / "ca.crt"))
    context.load_cert_chain(plane.pki / "admin.crt", plane.pki / "admin.key")
    request = urllib.request.Request(plane.server + "/metrics")  # noqa: S310
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:  # noqa: S310
        text = reply.read().decode()
    totals: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        key = (labels.get("verb", ""), labels.get("resource", ""))
        totals[key] = totals.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def delta(before: dict[Any, float], after: dict[Any, float]) -> dict[Any, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def writes(calls: dict[tuple[str, str], float]) -> float:
    """Writes to Queues (and their Events): what the operator costs the apiserver."""
    wanted = {"PATCH", "POST", "PUT"}
    return sum(
        n for (verb, res), n in calls.items() if verb in wanted and res in {"queues", "events"}
    )


def operator_metric(port: int, name: str, methods: frozenset[str] = frozenset()) -> float:
    """A metric summed over its labels (only ``method`` in ``methods`` when given)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        method = re.search(r'method="([^"]*)"', line)
        if methods and (method is None or method.group(1) not in methods):
            continue
        total += float(line.rsplit(" ", 1)[1])
    return total


BROKER_WRITES = frozenset({"PUT", "POST", "DELETE"})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_operator(
    env: dict[str, str], log_path: Path, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "hutch_operator", "--standalone", "--all-namespaces", *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def has_condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def is_ready(obj: dict[str, Any]) -> bool:
    return has_condition(obj, "Ready")


async def create_all(
    plane: Any, collection: str, items: list[dict[str, Any]], limit_s: float, *, ready: bool = True
) -> tuple[list[int], float, float]:
    """POSTs every item "at once" and watches until all are Ready (``ready``; else only POSTs).

    Returns (statuses, seconds to create, seconds until all Ready), both from the first POST.
    16 POSTs in flight over 16 keep-alive TLS connections: how a GitOps tool applies a directory
    (a fresh TLS connection per object cost this 2-core machine 2.5 s of client CPU per 1,000
    objects). Ready is followed with one watch, not LIST polls, so measuring costs the apiserver
    next to nothing.
    """
    context = ssl.create_default_context(cafile=str(plane.pki / "ca.crt"))
    context.load_cert_chain(plane.pki / "admin.crt", plane.pki / "admin.key")
    limit = asyncio.Semaphore(16)
    connector = aiohttp.TCPConnector(limit=17, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(plane.server + collection + "?limit=1") as reply:
            version = (await reply.json())["metadata"]["resourceVersion"]
        wanted = {item["metadata"]["name"] for item in items}

        async def watch() -> float:
            """Like a client-go reflector: resume from the last resourceVersion when the stream
            ends, and re-list when that version is gone (410)."""
            ready: set[str] = set()
            since = version
            read = aiohttp.ClientTimeout(total=None, sock_read=limit_s)
            while True:
                url = f"{plane.server}{collection}?watch=1&resourceVersion={since}"
                async with session.get(url, timeout=read) as reply:
                    async for line in reply.content:
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            print(f"watch: {obj.get('message')}; re-listing", file=sys.stderr)
                            async with session.get(plane.server + collection) as listing:
                                body = await listing.json()
                            ready = {o["metadata"]["name"] for o in body["items"] if is_ready(o)}
                            since = body["metadata"]["resourceVersion"]
                            break
                        name = obj["metadata"]["name"]
                        since = obj["metadata"]["resourceVersion"]
                        (ready.add if is_ready(obj) else ready.discard)(name)
                        if wanted <= ready:
                            return time.monotonic()
                    else:
                        print(f"watch ended at {len(ready)} Ready; resuming", file=sys.stderr)
                if wanted <= ready:
                    return time.monotonic()

        async def post(item: dict[str, Any]) -> int:
            async with limit, session.post(plane.server + collection, json=item) as reply:
                await reply.read()
                return reply.status

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.1)  # the watch is open before the first create
        began = time.monotonic()
        statuses = list(await asyncio.gather(*(post(item) for item in items)))
        created = time.monotonic() - began
        if not ready:
            watcher.cancel()
            return statuses, created, created
        done, _ = await asyncio.wait([watcher], timeout=limit_s)
        if not done:
            watcher.cancel()
            raise TimeoutError(f"not all {len(items)} Queues Ready after {limit_s}s")
        finished = watcher.result()
        return statuses, created, finished - began


def wait_log_count(path: Path, needle: str, count: int, timeout: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if path.read_text(errors="replace").count(needle) >= count:
            return time.monotonic() - began
        time.sleep(0.2)
    raise TimeoutError(f"{needle!r} seen fewer than {count} times in {timeout}s")


def quiet_sweeps(
    plane: Any, port: int, pid: int, args: argparse.Namespace, passes: int = 2
) -> dict[str, Any]:
    """What ``passes`` drift-sweep passes over the settled Queues cost, nothing having changed:
    broker requests, Kubernetes calls and writes, status writes, pass time, operator CPU."""

    def count() -> float:
        return operator_metric(port, "hutch_sweep_pass_seconds_count")

    deadline = time.monotonic() + (passes + 2) * args.sweep_period + args.timeout
    first = count()
    while count() == first:  # start the window right after a pass, not in the middle of one
        if time.monotonic() > deadline:
            raise TimeoutError("no drift-sweep pass ran")
        time.sleep(0.2)
    began, before_api = count(), apiserver_requests(plane)
    broker, cpu = operator_metric(port, "hutch_broker_requests_total"), cpu_seconds(pid)
    status = operator_metric(port, "hutch_sweep_status_writes_total")
    seconds = operator_metric(port, "hutch_sweep_pass_seconds_sum")
    lists = operator_metric(port, "hutch_sweep_list_seconds_count")
    while count() < began + passes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {passes} drift-sweep passes ran")
        time.sleep(0.2)
    calls = delta(before_api, apiserver_requests(plane))
    done = count() - began
    return {
        "sweep_period_seconds": args.sweep_period,
        "sweep_passes_measured": done,
        "sweep_list_calls_per_pass": (
            operator_metric(port, "hutch_sweep_list_seconds_count") - lists
        )
        / done,
        # Every request to the broker in the window, the Broker's status timer's included.
        "broker_requests_per_pass_window": (
            operator_metric(port, "hutch_broker_requests_total") - broker
        )
        / done,
        "sweep_k8s_calls_per_pass": sum(
            n for (verb, res), n in calls.items() if res in {"queues", "events"}
        )
        / done,
        "sweep_status_writes_per_pass": (
            operator_metric(port, "hutch_sweep_status_writes_total") - status
        )
        / done,
        "sweep_pass_seconds": round(
            (operator_metric(port, "hutch_sweep_pass_seconds_sum") - seconds) / done, 2
        ),
        "sweep_operator_cpu_seconds_per_pass": round((cpu_seconds(pid) - cpu) / done, 2),
        "operator_asyncio_tasks": operator_metric(port, "hutch_operator_asyncio_tasks"),
    }


def queue_items(count: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "hutch.dev/v1alpha1", "kind": "Queue",
             "metadata": {"name": f"q{i:05d}"},
             "spec": {"brokerRef": {"name": "b"}, "limits": {"maxLength": 1000}}}
            for i in range(count)]  # fmt: skip


def load_average() -> list[float]:
    """The machine's 1/5/15-minute load average: it is shared, so every figure carries it."""
    return [round(value, 2) for value in os.getloadavg()]


def baseline(plane: Any, ns: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same POSTs with no operator running: what the apiserver costs on its own, so that a
    run with the operator tells what the operator adds to the time until the last POST."""
    collection = f"/apis/hutch.dev/v1alpha1/namespaces/{ns}/queues"
    pids = {c.name: c.proc.pid for c in plane.components}
    pids.update(bench=os.getpid())
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    load_before = load_average()
    statuses, created_in, _ = asyncio.run(
        create_all(plane, collection, queue_items(args.queues), args.timeout, ready=False)
    )
    assert statuses == [201] * args.queues, set(statuses)
    cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
    print(f"baseline: {created_in:.1f}s of POSTs without an operator", flush=True)
    return {
        "queues": args.queues,
        "operator": False,
        "create_seconds": round(created_in, 2),
        "cpu_seconds_create_phase": cpu,
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    plane = planes.new_plane("apiserver")
    plane.start()
    broker = HutchBroker().start()
    operator = None
    try:
        plane.apply_crds(REPO / "crds")
        ns = plane.create_namespace()
        if not args.no_admission_finalizer:
            policy = admission.render_finalizer_policy(plane.bin_dir / "helm")
            plane.kubectl("apply", "-f", "-", stdin=policy)
            served = time.monotonic() + 60  # a busy apiserver serves new CRDs seconds late (503)
            while True:
                try:
                    admission.await_finalizer(plane.api, ns)
                    break
                except RuntimeError:
                    if time.monotonic() > served:
                        raise
                    time.sleep(1.0)
        password = base64.b64encode(b"guest").decode()
        plane.create(f"/api/v1/namespaces/{ns}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b-default-user"},
            "data": {"username": password, "password": password}})  # fmt: skip
        if args.no_operator:
            return baseline(plane, ns, args)
        metrics_port = free_port()
        env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig),
               "HUTCH_BROKER_ADDRESSES": f"{ns}/b={broker.http_url}|{broker.amqp_url}",
               "HUTCH_METRICS_PORT": str(metrics_port), "HUTCH_WORKERS": str(args.workers),
               "HUTCH_SYNC_PERIOD": "300", "PYTHONPATH": str(args.operator_dir)}  # fmt: skip
        log_path = args.log
        log_path.unlink(missing_ok=True)  # the previous run's restart log
        operator = start_operator(env, log_path, tuple(args.operator_arg))
        plane.create(f"/apis/hutch.dev/v1alpha1/namespaces/{ns}/brokers", {
            "apiVersion": "hutch.dev/v1alpha1", "kind": "Broker", "metadata": {"name": "b"},
            "spec": {}})  # fmt: skip
        # Queues wait (BrokerNotReady, 10 s retries) until their Broker is Available, which its
        # status timer decides: start the clock only once it is, as for any settled Broker.
        broker_path = f"/apis/hutch.dev/v1alpha1/namespaces/{ns}/brokers/b"
        deadline = time.monotonic() + 60
        while not has_condition(plane.api("GET", broker_path)[1], "Available"):
            if time.monotonic() > deadline:
                raise TimeoutError("the Broker did not become Available in 60 s")
            time.sleep(0.2)

        items = queue_items(args.queues)
        collection = f"/apis/hutch.dev/v1alpha1/namespaces/{ns}/queues"
        before_api = apiserver_requests(plane)
        pids = {c.name: c.proc.pid for c in plane.components}
        pids.update(operator=operator.pid, broker=broker.pid or 0, bench=os.getpid())
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load_before = load_average()
        statuses, created_in, all_ready = asyncio.run(
            create_all(plane, collection, items, args.timeout)
        )
        assert statuses == [201] * len(items), set(statuses)
        time.sleep(2.0)  # let trailing writes land before counting
        calls = delta(before_api, apiserver_requests(plane))
        operator_writes = writes(calls)
        creates = calls.get(("POST", "queues"), 0.0)
        broker_requests = operator_metric(metrics_port, "hutch_broker_requests_total")
        rss = peak_rss_mb(operator.pid)
        load_created = load_average()
        cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
        print(f"create phase: {created_in:.1f}s of POSTs, {all_ready:.1f}s to all Ready, "
              f"peak RSS {rss:.0f} MB", flush=True)  # fmt: skip

        # Restart with every Queue settled: resume must not redeclare one by one.
        stop(operator)
        before_api = apiserver_requests(plane)
        log_path.rename(log_path.with_suffix(".create.log"))
        # At the operator's own log level (INFO), as it runs in a cluster: Kopf logs "Resuming is
        # processed" once per object (the Queues and the Broker). --verbose (DEBUG) logged
        # several lines per object and cost the restart more than its own work.
        restart_env = {**env, "HUTCH_SYNC_PERIOD": str(args.sweep_period)}
        operator = start_operator(restart_env, log_path, tuple(args.operator_arg))
        settle = wait_log_count(log_path, "Resuming is processed", args.queues + 1, args.timeout)
        restart_cpu = cpu_seconds(operator.pid)  # the restarted process's, start-up included
        time.sleep(2.0)
        restart_calls = delta(before_api, apiserver_requests(plane))
        restart_writes = writes(restart_calls)
        restart_broker = operator_metric(metrics_port, "hutch_broker_requests_total")
        restart_broker_writes = operator_metric(
            metrics_port, "hutch_broker_requests_total", BROKER_WRITES
        )
        restart_rss = peak_rss_mb(operator.pid)
        load_restarted = load_average()
        quiet = {} if args.skip_quiet else quiet_sweeps(plane, metrics_port, operator.pid, args)
        return {
            "queues": args.queues,
            "workers": args.workers,
            "admission_finalizer": not args.no_admission_finalizer,
            "create_seconds": round(created_in, 2),
            "seconds_until_all_ready": round(all_ready, 2),
            "crs_per_second": round(args.queues / all_ready, 1),
            "k8s_writes_per_cr": round((operator_writes - creates) / args.queues, 2),
            "k8s_calls_by_verb": {f"{v} {r}": n for (v, r), n in sorted(calls.items())},
            "broker_requests_per_cr": round(broker_requests / args.queues, 2),
            "operator_peak_rss_mb": round(rss, 1),
            "cpu_seconds_create_phase": cpu,
            "restart_settle_seconds": round(settle, 2),
            "restart_k8s_writes_per_cr": round(restart_writes / args.queues, 2),
            "restart_k8s_writes": restart_writes,
            "restart_broker_requests": restart_broker,
            "restart_broker_writes": restart_broker_writes,
            "operator_peak_rss_mb_after_restart": round(restart_rss, 1),
            "restart_operator_cpu_seconds": round(restart_cpu, 1),
            "load_average_before": load_before,
            "load_average_after_create": load_created,
            "load_average_after_restart": load_restarted,
            **quiet,
        }
    finally:
        if operator is not None and operator.poll() is None:
            stop(operator)
        broker.stop()
        plane.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--skip-quiet", action="store_true",
        help="no quiet-sweep window (an operator from before the bulk sweep has no pass metrics)",
    )  # fmt: skip
    parser.add_argument(
        "--operator-dir", type=Path, default=REPO / "operator",
        help="the folder holding hutch_operator (another checkout's, for a before/after run)",
    )  # fmt: skip
    parser.add_argument(
        "--sweep-period", type=float, default=30.0,
        help="HUTCH_SYNC_PERIOD of the restarted operator, whose quiet sweeps are measured",
    )  # fmt: skip
    parser.add_argument("--operator-arg", action="append", default=[])
    parser.add_argument(
        "--no-operator", action="store_true",
        help="only the POSTs, with no operator running: the apiserver's own time (a baseline)",
    )  # fmt: skip
    parser.add_argument(
        "--no-admission-finalizer", action="store_true",
        help="leave out the chart's finalizer policy (the operator then adds each finalizer)",
    )  # fmt: skip
    parser.add_argument("--log", type=Path, default=Path("/tmp/hutch-operator-bench.log"))  # noqa: S108
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
