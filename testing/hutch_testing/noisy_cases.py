"""The noisy-neighbour cases: one attacking tenant each, run while a canary tenant is timed.

Why: each case is one way a tenant's work grows with its own object count and, on hutch-broker's
single event loop, becomes everybody's stall (the "Isolation and scale" issue). A case is two
steps: ``prepare`` builds the attacker's objects before the canary starts (untimed; an admin may
help, as an operator would), and ``attack`` is what the attacker does, with only the tags and
permissions the case grants it, while the canary runs. ``run_case`` returns a ``CaseResult``
whose ``problems`` lists every broken promise with the measured figures, so a failing test
says how bad it was. The same cases run against hutch-broker in CI (tests/noisy) and against
hutch-broker and RabbitMQ 3.10.8 side by side in bench/noisy.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import resource
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, Protocol

import aio_pika
import aiormq
import pika
from hutch_demo import management
from pamqp import commands, frame

from hutch_testing import brokers, cpuwait, noisy, rawamqp

MB = 1024 * 1024
Facts = dict[str, Any]


class Broker(noisy.Reachable, Protocol):
    """A launched broker: the cases read its memory and limit its file descriptors."""

    kind: str

    def rss_bytes(self) -> int: ...

    def group_pids(self) -> list[int]: ...

    def cpu_seconds(self) -> float: ...


@dataclass
class CaseResult:
    """One case on one broker: the canary's report, the attacker's own time, what broke."""

    case: str
    broker: str
    canary: noisy.CanaryReport
    attacker_s: float
    facts: Facts = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        facts = ", ".join(f"{key} {value}" for key, value in self.facts.items())
        lines = [
            f"{self.case} on {self.broker}: attacker {self.attacker_s:.2f} s; {facts}",
            f"  {self.canary.summary()}",
        ]
        lines += [f"  PROBLEM: {problem}" for problem in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class Case:
    """``prepare(broker) -> state`` untimed; ``attack(broker, state) -> (facts, problems)``."""

    name: str
    title: str
    prepare: Callable[[Broker], Any]
    attack: Callable[[Broker, Any], tuple[Facts, list[str]]]
    hutch_config: tuple[str, ...] = ()  # hutch-broker.conf lines the case needs at start-up
    rabbitmq_watermark_bytes: int | None = None
    in_ci: bool = True  # False: bench/noisy.py only, with the reason next to the case
    # The CI form (tests/noisy), when it is shorter than the bench's: an attack whose length
    # does not change the verdict, config lines that end a wait sooner. Why, next to the case.
    ci_attack: Callable[[Broker, Any], tuple[Facts, list[str]]] | None = None
    ci_config: tuple[str, ...] = ()

    def for_ci(self) -> Case:
        """The case as tests/noisy runs it; bench/noisy.py runs ``self`` as it is."""
        return dataclasses.replace(
            self,
            attack=self.ci_attack or self.attack,
            hutch_config=self.hutch_config + self.ci_config,
        )


def run_case(
    broker: Broker, case: Case, *, bound: noisy.CanaryBound = noisy.CI_BOUND
) -> CaseResult:
    """Prepare, start the canary, attack, stop the canary; judge against ``bound``."""
    canary_tenant = noisy.create_tenant(broker, "canary")
    state = case.prepare(broker)
    with noisy.Canary(broker, canary_tenant, broker_pid=cpuwait.loop_pid(broker)) as canary:
        time.sleep(0.5)  # a quiet baseline first: the report covers before, during and after
        began = time.monotonic()
        facts, problems = case.attack(broker, state)
        attacker_s = time.monotonic() - began
        time.sleep(0.5)
        report = canary.stop()
    return CaseResult(
        case=case.name,
        broker=broker.kind,
        canary=report,
        attacker_s=attacker_s,
        facts=facts,
        problems=problems + report.violations(bound),
    )


SOURCE_ENV = "HUTCH_NOISY_SOURCE"


class SourceBroker(brokers.HutchBroker):
    """hutch-broker run from another source tree's broker/ folder (a baseline commit's, say).

    Why: the suite proves a fix by failing before it; ``git archive <commit> broker | tar -x -C
    DIR`` and ``HUTCH_NOISY_SOURCE=DIR/broker`` run the same cases against that commit's broker.
    """

    def __init__(
        self, *, source: Path | None, config_path: Path | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.config_path = config_path  # what a case may read back (``request_timeout_s``)

    def _environment(self) -> dict[str, str]:
        env = super()._environment()
        if self.source is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.source), env.get("PYTHONPATH", "")])
        return env


def start_hutch(
    work_dir: Path, config_lines: tuple[str, ...] = (), source: Path | None = None
) -> SourceBroker:
    """A hutch-broker with these config lines, from ``source`` or $HUTCH_NOISY_SOURCE if set
    (see ``SourceBroker``), else from this tree."""
    if source is None and os.environ.get(SOURCE_ENV):
        source = Path(os.environ[SOURCE_ENV])
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "hutch-broker.conf"
    config.write_text("".join(f"{line}\n" for line in config_lines))
    broker = SourceBroker(
        source=source, config_path=config, work_dir=work_dir, extra_args=["--config", str(config)]
    )
    return broker.start()


# --- helpers ------------------------------------------------------------------------------------


def admin_tenant(broker: Broker, name: str, **kwargs: Any) -> noisy.Tenant:
    """A tenant, and the broker's admin user allowed on its vhost to prepare its objects."""
    tenant = noisy.create_tenant(broker, name, **kwargs)
    user, _ = broker.credentials
    body = {"configure": ".*", "write": ".*", "read": ".*"}
    vhost = management.quote(name)
    response = management.Management(broker).put(f"/permissions/{vhost}/{user}", body)
    if not response.ok:
        raise AssertionError(f"admin permissions on {name!r}: {response}")
    return tenant


def declare_all(broker: Broker, vhost: str, methods: list[Any]) -> None:
    """Declare and bind in one pipelined stream, as the admin (methods with ``nowait=True``).

    Why: a case's objects are built before the canary starts and are not timed, yet one pika
    call per object cost a round trip each: 5,000 declares and 5,000 binds took 12 s of a case's
    time, 40 s at load 14. Pipelined they cost the broker's work only. The passive declare at the
    end comes back after every method before it (a channel's methods are served in order).
    """
    last = [method.queue for method in methods if isinstance(method, commands.Queue.Declare)][-1]
    sock = rawamqp.open_connection(broker, vhost=vhost)
    try:
        sync = commands.Queue.Declare(queue=last, passive=True)
        rawamqp.pipelined(sock, methods, sync, commands.Queue.DeclareOk)
        sock.sendall(frame.marshal(commands.Connection.Close(200, "done", 0, 0), 0))
        with contextlib.suppress(OSError, EOFError):
            rawamqp.read_frame(sock)  # close-ok: a clean close, no warning in the broker's log
    finally:
        sock.close()


def _queue(name: str, arguments: dict[str, Any] | None = None) -> Any:
    return commands.Queue.Declare(queue=name, arguments=arguments or {}, nowait=True)


def _bind(queue: str, exchange: str, key: str) -> Any:
    return commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=key, nowait=True)


@contextlib.contextmanager
def blocking(broker: Broker, vhost: str, credentials: tuple[str, str]) -> Iterator[Any]:
    """A pika channel on ``vhost`` (heartbeats off: a stalled broker must not end the setup)."""
    user, password = credentials
    params = pika.ConnectionParameters(
        host=broker.host,
        port=broker.amqp_port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0,
        blocked_connection_timeout=None,
    )
    connection = pika.BlockingConnection(params)
    try:
        yield connection.channel()
    finally:
        with contextlib.suppress(Exception):
            connection.close()


async def publish_confirmed(
    url: str,
    exchange: str,
    routing_keys: list[str],
    body: bytes,
    *,
    window: int = 1000,
    within_s: float = 120.0,
) -> list[float]:
    """Publish one message per key, ``window`` in flight with confirms; the seconds each
    confirmed one took. What is not confirmed within ``within_s`` is abandoned: an attacker
    may slow itself down (RabbitMQ routes a 127-word key through 6,561 bindings for minutes)."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.get_exchange(exchange) if exchange else channel.default_exchange
        limit = asyncio.Semaphore(window)

        async def one(key: str) -> float:
            async with limit:
                began = time.monotonic()
                await target.publish(aio_pika.Message(body, delivery_mode=2), routing_key=key)
                return time.monotonic() - began

        tasks = [asyncio.create_task(one(key)) for key in routing_keys]
        done, pending = await asyncio.wait(tasks, timeout=within_s)
        for task in pending:
            task.cancel()
        return [task.result() for task in done if task.exception() is None]
    finally:
        with contextlib.suppress(Exception):  # a broker still busy may never answer close
            await asyncio.wait_for(connection.close(), 5.0)


def _slowest(times: list[float]) -> str:
    return f"{max(times):.2f} s" if times else "-"


# --- case 1: a policy pattern that backtracks against every queue name --------------------------

POLICY_QUEUES = 40  # as in the issue
POLICY_PATTERN = "(.*)" * 240 + "b"


def _prepare_policy(broker: Broker) -> noisy.Tenant:
    tenant = admin_tenant(broker, "policymaker", tags="policymaker")
    with blocking(broker, tenant.vhost, tenant.credentials) as channel:
        for index in range(POLICY_QUEUES):
            name = f"q{index:03d}-" + "a" * (255 - 5)
            channel.queue_declare(name[:255])
    return tenant


def _attack_policy(broker: Broker, tenant: noisy.Tenant) -> tuple[Facts, list[str]]:
    api = management.Management(_as(broker, tenant), timeout=300.0)
    began = time.monotonic()
    response = api.put_policy("backtrack", POLICY_PATTERN, {"max-length": 1000}, vhost=tenant.vhost)
    took = time.monotonic() - began
    facts = {"queues": POLICY_QUEUES, "PUT": f"{response.status} in {took:.2f} s"}
    return facts, [] if response.status in (201, 204, 400) else [f"PUT policy: {response}"]


POLICY = Case(
    name="case1-policy",
    title=f"policymaker: a `(.*)`x240`b` policy over {POLICY_QUEUES} queues of 255-byte names",
    prepare=_prepare_policy,
    attack=_attack_policy,
)


@dataclass(frozen=True)
class _As:
    """The broker's management API, as the tenant's user."""

    http_url: str
    credentials: tuple[str, str]


def _as(broker: Broker, tenant: noisy.Tenant) -> _As:
    return _As(broker.http_url, tenant.credentials)


# --- case 2: long routing keys through thousands of topic bindings ------------------------------

TOPIC_WORDS = 8  # 3**8 = 6,561 binding keys over {a, *, #}, as in the issue
TOPIC_PUBLISHES = 20
TOPIC_KEY_WORDS = 127
TOPIC_WITHIN_S = 60.0  # the attacker's publishes may take this long: it slows only itself
# In CI: each publish is one walk of its 127-word key through the 6,561 bindings (0.5-2 s of the
# broker's work on this 2-core machine), and a walk that held the loop would stall the canary
# for all of it; five of them are as sure to show that as twenty, in a quarter of the time.
TOPIC_PUBLISHES_CI = 5


def _prepare_topic(broker: Broker) -> noisy.Tenant:
    tenant = admin_tenant(broker, "router", permissions=(".*", ".*", "^$"))
    methods = [
        commands.Exchange.Declare(exchange="topics", exchange_type="topic", nowait=True),
        _queue("routed", {"x-max-length": 100}),
    ]
    methods += [
        _bind("routed", "topics", ".".join(words))
        for words in product(("a", "*", "#"), repeat=TOPIC_WORDS)
    ]
    declare_all(broker, tenant.vhost, methods)
    return tenant


def _attack_topic(
    broker: Broker, tenant: noisy.Tenant, publishes: int = TOPIC_PUBLISHES
) -> tuple[Facts, list[str]]:
    keys = [".".join(["a"] * (TOPIC_KEY_WORDS - 1) + [f"k{i}"]) for i in range(publishes)]
    url = tenant.amqp_url(broker, heartbeat=0)
    times = asyncio.run(publish_confirmed(url, "topics", keys, b"x", within_s=TOPIC_WITHIN_S))
    facts = {
        "bindings": 3**TOPIC_WORDS,
        "confirmed": f"{len(times)}/{len(keys)} within {TOPIC_WITHIN_S:.0f} s",
        "slowest confirm": _slowest(times),
    }
    return facts, []


TOPIC = Case(
    name="case2-topic",
    title=f"configure+write: {TOPIC_PUBLISHES} {TOPIC_KEY_WORDS}-word keys into "
    f"{3**TOPIC_WORDS:,} topic bindings",
    prepare=_prepare_topic,
    attack=_attack_topic,
    ci_attack=functools.partial(_attack_topic, publishes=TOPIC_PUBLISHES_CI),
)


# --- case 3: a management user listing 5,000 queues from 8 threads ------------------------------

LISTED_QUEUES = 5000
LISTING_THREADS = 8
LISTING_SECONDS = 8.0
# In CI: the threads start a request until this deadline, so each sends at least one and the
# eight listings are served at once, which is the load (a request takes 3-8 s here); 8 s of
# polling only queued a second round of the same listings behind the first.
LISTING_SECONDS_CI = 1.0


def _prepare_listing(broker: Broker) -> noisy.Tenant:
    tenant = admin_tenant(broker, "monitor", tags="management")
    declare_all(
        broker, tenant.vhost, [_queue(f"listed-{index:05d}") for index in range(LISTED_QUEUES)]
    )
    return tenant


def _attack_listing(
    broker: Broker, tenant: noisy.Tenant, seconds: float = LISTING_SECONDS
) -> tuple[Facts, list[str]]:
    api = management.Management(_as(broker, tenant), timeout=120.0)
    path = f"/queues/{management.quote(tenant.vhost)}"
    times: list[float] = []
    failures: list[str] = []
    deadline = time.monotonic() + seconds

    def poll() -> None:
        while True:  # at least one request each, however late the thread starts
            began = time.monotonic()
            response = api.get(path)
            times.append(time.monotonic() - began)
            if response.status != 200 or len(response.body) < LISTED_QUEUES:
                failures.append(f"GET {path}: {response.status}")
            if time.monotonic() >= deadline:
                return

    threads = [threading.Thread(target=poll) for _ in range(LISTING_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    facts = {"queues": LISTED_QUEUES, "requests": len(times), "slowest request": _slowest(times)}
    return facts, failures[:3]


LISTING = Case(
    name="case3-listing",
    title=f"management: GET /api/queues/<vhost> ({LISTED_QUEUES:,} queues) from "
    f"{LISTING_THREADS} threads for {LISTING_SECONDS:.0f} s",
    prepare=_prepare_listing,
    attack=_attack_listing,
    ci_attack=functools.partial(_attack_listing, seconds=LISTING_SECONDS_CI),
)


# --- case 4: HTTP connections that never finish their request line ------------------------------

SLOW_HTTP_CONNECTIONS = 1100
BROKER_FD_LIMIT = 1024
SLOW_HTTP_CLOSED_WITHIN_S = 75.0  # RabbitMQ 3.10.8 closed every one of them within 75 s
# In CI: hutch-broker's request timeout (30 s by default) is what closes the slow connections,
# and the case waited it out: 30 of its 33 s. 5 s still leaves the held connections in place
# while the new AMQP connection is tried (opening 1,100 took 0.2 s at load 12, then the attack
# pauses 1 s), and the attack checks that it was (``_held_throughout``), so a shorter wait
# cannot pass for the wrong reason.
SLOW_HTTP_REQUEST_TIMEOUT_CI_S = 5.0


def limit_fds(broker: Broker, limit: int = BROKER_FD_LIMIT) -> None:
    """RLIMIT_NOFILE of every broker process, as a container's default of 1,024 would be."""
    for pid in broker.group_pids():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))


def _prepare_slow_http(broker: Broker) -> noisy.Tenant:
    limit_fds(broker)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = SLOW_HTTP_CONNECTIONS + 512
    if soft < wanted:  # this process holds the slow connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    return admin_tenant(broker, "latecomer")


def _attack_slow_http(broker: Broker, tenant: noisy.Tenant) -> tuple[Facts, list[str]]:
    problems: list[str] = []
    held: list[socket.socket] = []
    first = time.monotonic()
    try:
        for _ in range(SLOW_HTTP_CONNECTIONS):
            sock = socket.create_connection((broker.host, broker.http_port), timeout=5)
            sock.sendall(b"GET /api/overview HTTP/1.1\r\nHo")  # and never another byte
            held.append(sock)
        time.sleep(1.0)
        began = time.monotonic()
        try:
            with blocking(broker, tenant.vhost, tenant.credentials) as channel:
                channel.queue_declare("", exclusive=True)
            opened = f"opened in {time.monotonic() - began:.2f} s"
            problems += _held_throughout(broker, time.monotonic() - first)
        except Exception as error:  # noqa: BLE001 - the finding itself
            opened = f"FAILED after {time.monotonic() - began:.2f} s ({type(error).__name__})"
            problems.append(
                f"a new AMQP connection failed while the slow HTTP ones were held: {error!r}"
            )
        closed_in = _wait_closed(held, SLOW_HTTP_CLOSED_WITHIN_S) if not problems else None
        if closed_in is None:
            still = sum(1 for sock in held if not _closed(sock))
            problems.append(f"{still} slow HTTP connections still open (no request timeout)")
    finally:
        for sock in held:
            sock.close()
    facts = {"held": len(held), "new AMQP connection": opened,
             "all closed in": "-" if closed_in is None else f"{closed_in:.1f} s"}  # fmt: skip
    return facts, problems


def _held_throughout(broker: Broker, since_first_s: float) -> list[str]:
    """A problem when the broker's request timeout could have closed the first slow connections
    before the new AMQP connection opened: the file descriptors were then not all held."""
    timeout_s = request_timeout_s(broker)
    if timeout_s is None or since_first_s < timeout_s:
        return []
    return [
        f"the new AMQP connection opened {since_first_s:.1f} s after the first slow connection, "
        f"past the broker's {timeout_s:.0f} s request timeout: not a test of the fd limit"
    ]


def request_timeout_s(broker: Broker) -> float | None:
    """hutch-broker's management request timeout from its config file, if the file sets one."""
    config = getattr(broker, "config_path", None)
    if config is None:
        return None
    for line in Path(config).read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "management.tcp.request_timeout":
            return int(value) / 1000
    return None


def _closed(sock: socket.socket) -> bool:
    """True once the broker closed or reset it (an error page before the close is fine)."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset by the broker
    return True


def _wait_closed(held: list[socket.socket], within_s: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < within_s:
        if all(_closed(sock) for sock in held):
            return time.monotonic() - began
        time.sleep(1.0)
    return None


SLOW_HTTP = Case(
    name="case4-slow-http",
    title=f"unauthenticated: {SLOW_HTTP_CONNECTIONS:,} HTTP connections that never finish "
    f"their request line, broker RLIMIT_NOFILE {BROKER_FD_LIMIT:,}",
    prepare=_prepare_slow_http,
    attack=_attack_slow_http,
    ci_config=(f"management.tcp.request_timeout = {SLOW_HTTP_REQUEST_TIMEOUT_CI_S * 1000:.0f}",),
)


# --- case 5: a consumer that never reads its socket ---------------------------------------------

WATERMARK_BYTES = 300 * MB
STUCK_MESSAGES = 400
STUCK_BODY = 1 * MB
STUCK_SECONDS = 8.0  # the consumer sits there this long while RSS is sampled
# In CI: the broker pushes a stuck consumer's deliveries in the turn of its basic.consume, so a
# broken bound shows in the first samples. With the delivery budget removed (every bound of
# ``memory.delivery_budget`` 1 GiB), RSS was 447 MB from 61 MB at the first sample and stayed
# there; with it, 59 MB from 0.3 s on, flat for 8 s (2026-11-29, #29). 2 s is ample.
STUCK_SECONDS_CI = 2.0


def _prepare_stuck(broker: Broker) -> noisy.Tenant:
    tenant = admin_tenant(broker, "hoarder")
    with blocking(broker, tenant.vhost, tenant.credentials) as channel:
        channel.queue_declare("hoard", durable=True)
    url = tenant.amqp_url(broker, heartbeat=0)
    keys = ["hoard"] * STUCK_MESSAGES
    asyncio.run(publish_confirmed(url, "", keys, b"m" * STUCK_BODY, window=20))
    return tenant


def _attack_stuck(
    broker: Broker, tenant: noisy.Tenant, seconds: float = STUCK_SECONDS
) -> tuple[Facts, list[str]]:
    before = broker.rss_bytes()
    user, password = tenant.credentials
    params = pika.ConnectionParameters(
        host=broker.host,
        port=broker.amqp_port,
        virtual_host=tenant.vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0,
    )
    consumer = pika.BlockingConnection(params)
    channel = consumer.channel()
    channel.basic_qos(prefetch_count=0)
    channel.basic_consume("hoard", lambda *_: None)  # and nothing reads its socket from now on
    peak = before
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, broker.rss_bytes())
        time.sleep(0.1)
    with contextlib.suppress(Exception):
        consumer.close()
    facts = {"RSS before": f"{before // MB} MB", "RSS peak": f"{peak // MB} MB",
             "watermark": f"{WATERMARK_BYTES // MB} MB"}  # fmt: skip
    problems = []
    if peak > WATERMARK_BYTES:
        problems.append(f"broker RSS peaked at {peak // MB} MB, over the "
                        f"{WATERMARK_BYTES // MB} MB watermark")  # fmt: skip
    return facts, problems


STUCK_CONSUMER = Case(
    name="case5-stuck-consumer",
    title=f"a prefetch-0 consumer that never reads, {STUCK_MESSAGES} x 1 MB persistent "
    f"messages, watermark {WATERMARK_BYTES // MB} MB",
    prepare=_prepare_stuck,
    attack=_attack_stuck,
    ci_attack=functools.partial(_attack_stuck, seconds=STUCK_SECONDS_CI),
    hutch_config=(f"vm_memory_high_watermark.absolute = {WATERMARK_BYTES}",),
    rabbitmq_watermark_bytes=WATERMARK_BYTES,
)


# --- more cases where one tenant's work grows with its object count -----------------------------

FANOUT_QUEUES = 5000
FANOUT_PUBLISHES = 20


def _prepare_fanout(broker: Broker) -> noisy.Tenant:
    tenant = admin_tenant(broker, "broadcaster", permissions=(".*", ".*", "^$"))
    methods = [commands.Exchange.Declare(exchange="fan", exchange_type="fanout", nowait=True)]
    for index in range(FANOUT_QUEUES):
        name = f"fan-{index:05d}"
        methods += [_queue(name, {"x-max-length": 100}), _bind(name, "fan", "")]
    declare_all(broker, tenant.vhost, methods)
    return tenant


def _attack_fanout(broker: Broker, tenant: noisy.Tenant) -> tuple[Facts, list[str]]:
    url = tenant.amqp_url(broker, heartbeat=0)
    keys = [""] * FANOUT_PUBLISHES
    times = asyncio.run(publish_confirmed(url, "fan", keys, b"f" * 16, within_s=60.0))
    facts = {
        "queues": FANOUT_QUEUES,
        "confirmed": f"{len(times)}/{len(keys)}",
        "slowest confirm": _slowest(times),
    }
    return facts, []


FANOUT = Case(
    name="fanout",
    title=f"write: {FANOUT_PUBLISHES} publishes into a fanout exchange bound to "
    f"{FANOUT_QUEUES:,} queues",
    prepare=_prepare_fanout,
    attack=_attack_fanout,
)

IMPORTED_QUEUES = 5000


def _prepare_import(broker: Broker) -> noisy.Tenant:
    # POST /api/definitions/<vhost> needs the administrator tag on RabbitMQ 3.10.8 too.
    return admin_tenant(broker, "importer", tags="administrator")


def _attack_import(broker: Broker, tenant: noisy.Tenant) -> tuple[Facts, list[str]]:
    queues = [
        {"name": f"imported-{index:05d}", "durable": True, "auto_delete": False, "arguments": {}}
        for index in range(IMPORTED_QUEUES)
    ]
    api = management.Management(_as(broker, tenant), timeout=300.0)
    began = time.monotonic()
    response = api.post(f"/definitions/{management.quote(tenant.vhost)}", {"queues": queues})
    took = time.monotonic() - began
    facts = {"queues": IMPORTED_QUEUES, "POST": f"{response.status} in {took:.2f} s"}
    return facts, [] if response.ok else [f"definitions import: {response}"]


IMPORT = Case(
    name="definitions-import",
    title=f"administrator of its vhost: POST /api/definitions/<vhost> with {IMPORTED_QUEUES:,} "
    "durable queues",
    prepare=_prepare_import,
    attack=_attack_import,
)


CHANNEL_CONNECTIONS = 5
CHANNELS_EACH = 2000  # channel_max is 2,047 on both brokers: 10,000 channels take 5 connections


async def _open_and_close_channels(url: str) -> tuple[float, float]:
    """Seconds to open every channel (pipelined), then to close the connections."""
    began = time.monotonic()
    connections = await asyncio.gather(*(aiormq.connect(url) for _ in range(CHANNEL_CONNECTIONS)))
    await asyncio.gather(
        *(connection.channel() for connection in connections for _ in range(CHANNELS_EACH))
    )
    opened = time.monotonic()
    await asyncio.gather(*(connection.close() for connection in connections))
    return opened - began, time.monotonic() - opened


def _prepare_channels(broker: Broker) -> noisy.Tenant:
    return admin_tenant(broker, "chatty")


def _attack_channels(broker: Broker, tenant: noisy.Tenant) -> tuple[Facts, list[str]]:
    url = tenant.amqp_url(broker, heartbeat=0)
    opening, closing = asyncio.run(_open_and_close_channels(url))
    facts = {"channels": CHANNEL_CONNECTIONS * CHANNELS_EACH, "open": f"{opening:.2f} s",
             "close": f"{closing:.2f} s"}  # fmt: skip
    return facts, []


CHANNELS = Case(
    name="channels",
    title=f"any user: {CHANNEL_CONNECTIONS * CHANNELS_EACH:,} channels opened at once on "
    f"{CHANNEL_CONNECTIONS} connections, then the connections closed",
    prepare=_prepare_channels,
    attack=_attack_channels,
    # Within the CI bound on today's code, but by a thin margin on a busy machine (canary max
    # 158-165 ms, p99 64-90 ms against 250/100): in CI it would be flaky, not a guard. The
    # bench tracks it against the 50 ms target, which it misses.
    in_ci=False,
)


CHURN_SECONDS = 8.0
# In CI: each connection's open and close is the work (400 a second here); one that held the loop
# shows in the canary's next round trip, and 4 s are over 1,000 of them.
CHURN_SECONDS_CI = 4.0
CHURN_PARALLEL = 16


async def _churn(url: str, seconds: float) -> tuple[int, int]:
    """Connections opened and closed by ``CHURN_PARALLEL`` loops; failures."""
    deadline = time.monotonic() + seconds
    counts = [0, 0]

    async def loop() -> None:
        while time.monotonic() < deadline:
            try:
                connection = await aiormq.connect(url)
                await connection.close()
                counts[0] += 1
            except Exception:  # noqa: BLE001 - refused or reset: the attacker's own loss
                counts[1] += 1

    await asyncio.gather(*(loop() for _ in range(CHURN_PARALLEL)))
    return counts[0], counts[1]


def _attack_churn(
    broker: Broker, tenant: noisy.Tenant, seconds: float = CHURN_SECONDS
) -> tuple[Facts, list[str]]:
    opened, failed = asyncio.run(_churn(tenant.amqp_url(broker, heartbeat=0), seconds))
    return {"connections": opened, "failed": failed,
            "per second": f"{opened / seconds:.0f}"}, []  # fmt: skip


CHURN = Case(
    name="churn",
    title=f"any user: AMQP connections opened and closed by {CHURN_PARALLEL} loops for "
    f"{CHURN_SECONDS:.0f} s",
    prepare=lambda broker: admin_tenant(broker, "churner"),
    attack=_attack_churn,
    ci_attack=functools.partial(_attack_churn, seconds=CHURN_SECONDS_CI),
)


# --- idle stream consumers: thousands of cursors that cannot go on ------------------------------

STREAM_CONNECTIONS = 4
STREAM_CONSUMERS_EACH = 500  # 2,000 consumers, each with one unacked delivery and prefetch 1
STREAM_PUBLISHES = 1000
# In CI: each publish is confirmed before the next (one group commit each), so a broker whose
# every commit visits the idle cursors shows it on every one; 400 of them are enough.
STREAM_PUBLISHES_CI = 400
# The broker's CPU a confirmed publish to the stream with the idle consumers may cost, against
# one to a stream without consumers, in the same attack (halves alternating). Measured
# (2026-12-01, EPYC, #28): 0.8-1.3x with the cursors parked (about 1 ms a publish either way:
# a confirm is a group commit of its own here); 5x when every group commit asked each of the
# 2,000 for credit (6.4 against 1.3 ms). A ratio, so a slower or busier machine moves both.
STREAM_CPU_RATIO = 2.0


@dataclass(frozen=True)
class _AmqpAs:
    """The broker's AMQP port, as the tenant's user (what ``rawamqp.open_connection`` needs)."""

    amqp_port: int
    credentials: tuple[str, str]


class _IdleReaders:
    """The tenant and its consumers' sockets: one thread reads and discards what the broker
    sends them (they never ack, but they read) until ``close``."""

    def __init__(self, tenant: noisy.Tenant, sockets: list[socket.socket]) -> None:
        self.tenant = tenant
        self.sockets = sockets
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for sock in self.sockets:
            sock.setblocking(False)
        while not self._stop.is_set():
            readable, _, _ = select.select(self.sockets, [], [], 0.1)
            for sock in readable:
                with contextlib.suppress(BlockingIOError, OSError):
                    sock.recv(1 << 20)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        for sock in self.sockets:
            sock.close()


def _prepare_idle_stream(broker: Broker) -> _IdleReaders:
    tenant = admin_tenant(broker, "streamer")
    stream: dict[str, Any] = {"x-queue-type": "stream"}
    with blocking(broker, tenant.vhost, tenant.credentials) as channel:
        channel.queue_declare("log", durable=True, arguments=stream)
        channel.queue_declare("quiet", durable=True, arguments=stream)  # the baseline's
        channel.confirm_delivery()
        channel.basic_publish("", "log", b"first")
    first: dict[str, Any] = {"x-stream-offset": "first"}
    consume: list[Any] = [commands.Basic.Qos(prefetch_count=1)]
    consume += [
        commands.Basic.Consume(queue="log", consumer_tag=f"i{index}", nowait=True, arguments=first)
        for index in range(STREAM_CONSUMERS_EACH)
    ]
    sync = commands.Queue.Declare(queue="log", passive=True, durable=True, arguments=stream)
    sockets = []
    for _ in range(STREAM_CONNECTIONS):
        sock = rawamqp.open_connection(
            _AmqpAs(broker.amqp_port, tenant.credentials), vhost=tenant.vhost
        )
        rawamqp.pipelined(sock, consume, sync, commands.Queue.DeclareOk)
        sockets.append(sock)
    readers = _IdleReaders(tenant, sockets)
    time.sleep(1.0)  # every consumer has its one delivery and waits for an ack that never comes
    return readers


def _attack_idle_stream(
    broker: Broker,
    readers: _IdleReaders,
    publishes: int = STREAM_PUBLISHES,
) -> tuple[Facts, list[str]]:
    url = readers.tenant.amqp_url(broker, heartbeat=0)
    cpu = {"log": 0.0, "quiet": 0.0}
    confirmed = {"log": 0, "quiet": 0}
    half = publishes // 2  # ``publishes`` to each stream, in two halves
    try:
        for stream in ("quiet", "log", "quiet", "log"):  # halves alternating: drift cancels
            before = broker.cpu_seconds()
            times = asyncio.run(publish_confirmed(url, "", [stream] * half, b"s" * 100, window=1))
            cpu[stream] += broker.cpu_seconds() - before
            confirmed[stream] += len(times)
    finally:
        readers.close()
    per = {stream: cpu[stream] * 1000 / max(confirmed[stream], 1) for stream in cpu}
    ratio = per["log"] / max(per["quiet"], 1e-6)
    consumers = STREAM_CONNECTIONS * STREAM_CONSUMERS_EACH
    facts = {"idle consumers": consumers,
             "confirmed": f"{confirmed['log']}+{confirmed['quiet']}/{4 * half}",
             "broker CPU a publish": f"{per['log']:.2f} ms (no consumers {per['quiet']:.2f})",
             "ratio": f"{ratio:.2f}"}  # fmt: skip
    problems = []
    if sum(confirmed.values()) < 4 * half:
        problems.append(f"only {confirmed} of {2 * half} publishes each confirmed")
    if ratio > STREAM_CPU_RATIO:
        problems.append(
            f"a publish beside {consumers:,} idle stream consumers cost the broker {ratio:.1f}x "
            f"the CPU of one to a stream without (bound {STREAM_CPU_RATIO}x): their cursors "
            "are visited on every commit"
        )
    return facts, problems


IDLE_STREAM = Case(
    name="idle-stream-consumers",
    title=f"read+write: {STREAM_PUBLISHES:,} confirmed publishes to a stream beside "
    f"{STREAM_CONNECTIONS * STREAM_CONSUMERS_EACH:,} of its own consumers that never ack, "
    "as many to one without",
    prepare=_prepare_idle_stream,
    attack=_attack_idle_stream,
    ci_attack=functools.partial(_attack_idle_stream, publishes=STREAM_PUBLISHES_CI),
)


CASES = (
    POLICY, TOPIC, LISTING, SLOW_HTTP, STUCK_CONSUMER, FANOUT, IMPORT, CHANNELS, CHURN,
    IDLE_STREAM,
)  # fmt: skip
CI_CASES = tuple(case.for_ci() for case in CASES if case.in_ci)
