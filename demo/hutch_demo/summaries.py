"""What the quickstart prints at the end: the broker's view of the queues and the job's results.

Why: the point of the quickstart is to show that the chain did what the CRs asked, in the
broker's own words. Limits are therefore read back from the management API (arguments, the
policy and operator policy each queue carries, their definitions) and combined with the
broker's own merge rule (``hutch_broker.model.settings.effective``); counts come from the
broker's message stats, and the job's numbers from its committed Parquet output.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hutch_broker.model import settings

from hutch_demo import clusters, management, pipeline, pods, progress

if TYPE_CHECKING:
    from hutch_demo.chain import Chain
    from hutch_demo.launchers import Endpoint

LIMIT_FIELDS = (
    ("max_length", "max-length"),
    ("max_length_bytes", "max-length-bytes"),
    ("overflow", "overflow"),
    ("message_ttl", "message-ttl"),
    ("expires", "expires"),
    ("dead_letter_exchange", "dead-letter-exchange"),
    ("dead_letter_routing_key", "dead-letter-routing-key"),
    ("ring_size", "ring-size"),
)


def prerequisite_problems() -> list[str]:
    """What the chain lacks on this machine, each with the fix."""
    problems = []
    if shutil.which("java") is None:
        problems.append("java: missing (apt-get install -y openjdk-17-jre-headless)")
    for module, fix in (
        ("pyspark", "pip install -e '.[spark]'"),
        ("pyarrow", "pip install pyarrow"),
    ):
        if importlib.util.find_spec(module) is None:
            problems.append(f"{module}: missing ({fix})")
    return problems


def acked(mgmt: management.Management, queue: str) -> int:
    """The broker's ack count for a queue (0 while it has none or is unreachable)."""
    try:
        response = mgmt.get(f"/queues/%2F/{management.quote(queue)}")
    except OSError:
        return 0
    stats = (response.body or {}).get("message_stats") if response.ok else None
    return int((stats or {}).get("ack") or 0)


@dataclass
class QueueReport:
    """One queue as the broker reports it."""

    name: str
    arguments: dict[str, Any]
    policy: str | None
    operator_policy: str | None
    effective_policy: dict[str, Any]
    effective: dict[str, Any]  # key (policy spelling) -> value the queue enforces
    messages: int
    overrides: list[str] = field(default_factory=list)


def _definition(mgmt: management.Management, kind: str, name: str | None) -> dict[str, Any]:
    if not name:
        return {}
    response = mgmt.get(f"/{kind}/%2F/{management.quote(name)}")
    return dict((response.body or {}).get("definition") or {}) if response.ok else {}


def overrides(
    user: dict[str, Any], operator: dict[str, Any], arguments: dict[str, Any]
) -> list[str]:
    """What each operator-policy key did to the user's policy and the queue's arguments."""
    notes = []
    for key, value in sorted(operator.items()):
        mine = user.get(key)
        argument = arguments.get(f"x-{key}")
        if mine is None:
            text = f"{key}={value} added (the user policy does not set it)"
        elif isinstance(mine, int) and isinstance(value, int) and value < mine:
            text = f"{key} lowered from {mine} to {value}"
        else:
            text = f"{key}={value} has no effect (the user policy's {mine} is lower)"
        if isinstance(argument, int) and isinstance(value, int) and argument < value:
            text += f"; the queue argument x-{key}={argument} is lower and applies"
        notes.append(text)
    return notes


def queue_report(mgmt: management.Management, name: str) -> QueueReport:
    item = mgmt.queue(name)
    arguments = dict(item.get("arguments") or {})
    user = _definition(mgmt, "policies", item.get("policy"))
    operator = _definition(mgmt, "operator-policies", item.get("operator_policy"))
    enforced = settings.effective(arguments, user, operator)
    effective = {
        key: getattr(enforced, attribute)
        for attribute, key in LIMIT_FIELDS
        if getattr(enforced, attribute) is not None
    }
    return QueueReport(
        name=name,
        arguments=arguments,
        policy=item.get("policy"),
        operator_policy=item.get("operator_policy"),
        effective_policy=dict(item.get("effective_policy_definition") or {}),
        effective=effective,
        messages=int(item.get("messages") or 0),
        overrides=overrides(user, operator, arguments),
    )


@dataclass
class Summary:
    """The quickstart's result; ``render()`` is what it prints."""

    namespace: str
    broker: str
    kubeconfig: str
    amqp_uri: str
    management_url: str
    watermark_bytes: int | None
    status_watermark_bytes: int | None
    queues: list[QueueReport]
    published: int
    duplicates: int
    consumed: int
    dead_lettered: int
    expected_events: int
    results: list[pipeline.WindowCount]
    parquet: str
    steps: list[progress.StepRecord] = field(default_factory=list)
    pods_ran: list[pods.PodFacts] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)  # how they connected to a TLS Broker
    stream_job: list[str] = field(default_factory=list)  # streamjob.StreamRun.lines()

    @property
    def counted_events(self) -> int:
        return sum(row.events for row in self.results)

    @property
    def exactly_once(self) -> bool:
        return self.counted_events == self.expected_events

    def render(self) -> str:
        lines = ["", "=" * 78, f"Hutch quickstart: namespace {self.namespace}", "=" * 78]
        lines.append(f"Broker {self.broker}: memory watermark {_bytes(self.watermark_bytes)}")
        lines.append(
            f"  (/api/nodes mem_limit; Broker.status says {_bytes(self.status_watermark_bytes)})"
        )
        lines += ["", "Queues (effective limits as the broker enforces them):"]
        for queue in self.queues:
            limits = ", ".join(f"{k}={v}" for k, v in queue.effective.items()) or "none"
            wrapped = textwrap.wrap(limits, width=60, break_on_hyphens=False) or ["none"]
            lines.append(f"  {queue.name:<14} {wrapped[0]}")
            lines += [f"  {'':<14} {more}" for more in wrapped[1:]]
            lines.append(
                f"  {'':<14} policy={queue.policy or '-'} "
                f"operator_policy={queue.operator_policy or '-'} messages={queue.messages}"
            )
        lines += ["", "What the operator policy overrode:"]
        for queue in self.queues:
            for note in queue.overrides:
                wrapped = textwrap.wrap(note, width=60, break_on_hyphens=False)
                lines.append(f"  {queue.name:<14} {wrapped[0]}")
                lines += [f"  {'':<14}   {more}" for more in wrapped[1:]]
        lines += [
            "",
            f"Messages: published {self.published} (incl. {self.duplicates} duplicates and "
            f"1 tick), consumed {self.consumed}, dead-lettered {self.dead_lettered}",
            "",
            "Spark job windowed_counts (1-minute windows, deduplicated on message_id):",
        ]
        lines += _results_table(self.results)
        verdict = "exactly once" if self.exactly_once else "MISMATCH"
        lines.append(
            f"  counted {self.counted_events} events; expected {self.expected_events} "
            f"unique and not dead-lettered: {verdict}"
        )
        lines.append(f"  Parquet output: {self.parquet or 'removed at exit (--keep keeps it)'}")
        if self.stream_job:
            lines += ["", *self.stream_job]
        if self.clients:
            lines += ["", "Clients (the Broker has spec.tls):", *(f"  {c}" for c in self.clients)]
        lines += ["", "Pods that ran (node: container ID as the runtime reports it):"]
        lines += [f"  {pod.line()}" for pod in self.pods_ran] or ["  none"]
        total = sum(step.seconds for step in self.steps)
        lines += ["", f"Total {total:.0f}s: " + ", ".join(_step_times(self.steps))]
        return "\n".join(lines)


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,} B ({value / 2**20:.0f} MiB)"


def _results_table(rows: list[pipeline.WindowCount]) -> list[str]:
    windows = sorted({row.window_start for row in rows})
    types = sorted({row.type for row in rows})
    cells = {(row.window_start, row.type): row.events for row in rows}
    header = f"  {'window (UTC)':<13}" + "".join(f"{t:>10}" for t in types)
    body = [f"  {w:<13}" + "".join(f"{cells.get((w, t), 0):>10}" for t in types) for w in windows]
    return [header, *body]


def _step_times(steps: list[progress.StepRecord]) -> list[str]:
    return [f"{step.label} {step.seconds:.0f}s" for step in steps if step.seconds >= 0.5]


def collect(
    line: Chain,
    stream: pipeline.Stream,
    queue: str,
    results: list[pipeline.WindowCount],
    parquet: Path,
) -> Summary:
    """What the broker, the operator and the job's committed output say after the run."""
    mgmt = line.management()
    listed = line.cluster.get(clusters.cr_path(line.namespace, "queues")) or {}
    names = sorted(
        item["spec"].get("name") or item["metadata"]["name"] for item in listed.get("items", [])
    )
    nodes = mgmt.get("/nodes").body or [{}]
    broker = line.wait_broker("Ready", timeout=10)
    dead = mgmt.queue("orders-dead")
    events = mgmt.queue(queue)
    return Summary(
        namespace=line.namespace,
        broker=line.main.name,
        kubeconfig=str(line.cluster.kubeconfig),
        amqp_uri=line.endpoint.amqp_url,
        management_url=line.endpoint.http_url,
        watermark_bytes=nodes[0].get("mem_limit"),
        status_watermark_bytes=broker.get("status", {}).get("memory", {}).get("highWatermarkBytes"),
        queues=[queue_report(mgmt, name) for name in names],
        published=stream.published,
        duplicates=stream.duplicates,
        consumed=int((events.get("message_stats") or {}).get("ack") or 0),
        dead_lettered=int(dead.get("messages") or 0),
        expected_events=stream.unique_counted,
        results=results,
        parquet=str(parquet),
    )


def tls_help(endpoint: Endpoint, ca_file: Path) -> list[str]:
    """``--keep`` with a TLS Broker: the CA to trust and the name to verify. The forward
    listens on 127.0.0.1, which the broker's certificate does not name, so a client connects
    there and verifies the Service's name (curl's ``--resolve`` does both)."""
    user, password = endpoint.credentials
    name = endpoint.server_name or endpoint.host
    url = f"https://{name}:{endpoint.http_port}/api/overview"
    curl = ["curl", "--cacert", str(ca_file), "--resolve", f"{name}:{endpoint.http_port}:127.0.0.1",
            "-u", f"{user}:{password}", url]  # fmt: skip
    return [
        f"  CA certificate:  {ca_file} (clients verify the name {name}, not 127.0.0.1)",
        f"    {shlex.join(curl)}",
    ]


def connection_help(line: Chain, summary: Summary, ca_file: Path | None = None) -> str:
    """What ``--keep`` prints: how to reach everything that stays up (``ca_file``: where the
    quickstart saved a TLS Broker's CA certificate)."""
    user, password = line.endpoint.credentials
    tls = tls_help(line.endpoint, ca_file) if ca_file is not None else []
    return "\n".join(
        [
            "",
            "Everything keeps running; Ctrl-C stops it all.",
            f"  export KUBECONFIG={summary.kubeconfig}",
            f"  kubectl get hutch -n {summary.namespace}      # every Hutch kind",
            f"  AMQP URI:        {summary.amqp_uri}",
            f"  Web UI:          {summary.management_url}/  (user {user}, password {password};"
            f" or: kubectl hutch manage -n {summary.namespace} {summary.broker})",
            f"  Management API:  {summary.management_url}/api/overview  (the same user)",
            *tls,
            f"  Metrics:         {summary.management_url}/metrics",
            f"  Operator log:    kubectl logs -n {summary.namespace} deploy/hutch-operator",
            f"  Broker log:      kubectl logs -n {summary.namespace} {line.main.pod_name}",
            f"  Parquet results: {summary.parquet}",
        ]
    )
