"""A local Apache Kafka (KRaft, one node) from Maven Central's jars, for the stream benchmark.

Why: issue 28 measures the Hutch stream source against what users would pick instead, Spark's own
Kafka source on a Kafka broker on the same machine. There is no Docker here and no Kafka
distribution to download, but Maven Central serves Kafka's jars, so `fetch_jars` resolves
`kafka_2.13` (the broker) and `kafka-tools` (topic creation, the producer that loads the topic)
with Maven into ~/.cache/hutch/kafka, and `KafkaBroker` runs `kafka.Kafka` from them as a private
child process: combined broker and controller (KRaft, no ZooKeeper), both listeners on free
loopback ports, its log directory formatted afresh in a work directory.

The same module fetches Spark's Kafka connector (`spark-sql-kafka-0-10` and what it needs at run
time beside pyspark's own jars: `kafka-clients`, `commons-pool2`, `spark-token-provider-kafka`),
passed to Spark with `spark.jars`; `spark.jars.packages` would resolve through Ivy on every
session start, while Maven's local repository and this cache need the network once.

The pure parts (`pom`, `server_properties`, `cluster_id`, `connector_version`) are pinned by
tests/bench/test_stream_bench.py; the rest runs only in bench/stream_bench.py.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

KAFKA_VERSION = "4.1.1"
CACHE = Path(os.environ.get("HUTCH_KAFKA_CACHE", Path.home() / ".cache/hutch/kafka"))
# The newest connector on Maven Central when this was written; a pyspark newer than every
# published connector (4.3.0 in the venv, Central's newest 4.2.0) reads with the newest one.
SERVED_CONNECTORS = ("4.2.0", "4.1.1", "4.0.0", "3.5.1")
JVM_OPTIONS = ["-Xms256m", "-Xmx1g", "-XX:+UseG1GC"]
# The connector's own run-time needs; pyspark ships Scala, lz4, snappy, slf4j and Hadoop already.
CONNECTOR_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients",
                  "commons-pool2")  # fmt: skip


class KafkaError(Exception):
    """Kafka's jars could not be fetched, or the broker did not start or answer."""


def pom(artifact: str, dependencies: list[tuple[str, str, str]]) -> str:
    """A throw-away POM whose dependencies Maven copies into a directory (copy-dependencies)."""
    entries = "".join(
        f"<dependency><groupId>{group}</groupId><artifactId>{name}</artifactId>"
        f"<version>{version}</version></dependency>"
        for group, name, version in dependencies
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>hutch.bench</groupId><artifactId>{artifact}</artifactId><version>1</version>"
        f"<dependencies>{entries}</dependencies></project>\n"
    )


def connector_version(pyspark_version: str, served: tuple[str, ...] = SERVED_CONNECTORS) -> str:
    """The connector for this pyspark: the same version when served, else the newest served one
    of the same major version that is not newer (the connector's internal Spark APIs are stable
    within a major version; the benchmark says which one it used)."""
    if pyspark_version in served:
        return pyspark_version

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())

    wanted = key(pyspark_version)
    fits = [v for v in served if key(v)[0] == wanted[0] and key(v) <= wanted]
    if not fits:
        raise KafkaError(f"no Kafka connector for pyspark {pyspark_version} among {served}")
    return max(fits, key=key)


def _copy_dependencies(target: Path, artifact: str, deps: list[tuple[str, str, str]]) -> Path:
    if target.is_dir() and any(target.glob("*.jar")):
        return target
    if shutil.which("mvn") is None:
        raise KafkaError("mvn not found (apt-get install -y maven)")
    with tempfile.TemporaryDirectory(prefix="hutch-kafka-pom-") as scratch:
        pom_file = Path(scratch) / "pom.xml"
        pom_file.write_text(pom(artifact, deps))
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom_file), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={partial}"],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise KafkaError(f"mvn failed for {artifact}: {(done.stdout + done.stderr)[-800:]}")
        partial.rename(target)
    return target


def fetch_broker(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's broker and tools jars, fetched once."""
    deps = [
        ("org.apache.kafka", "kafka_2.13", version),
        ("org.apache.kafka", "kafka-tools", version),
    ]
    return _copy_dependencies(CACHE / f"kafka-{version}", "kafka-broker", deps)


def fetch_connector(version: str) -> list[Path]:
    """Spark's Kafka connector jars for `spark.jars`, fetched once."""
    deps = [("org.apache.spark", "spark-sql-kafka-0-10_2.13", version)]
    lib = _copy_dependencies(CACHE / f"spark-sql-kafka-{version}", "spark-kafka", deps)
    return sorted(jar for jar in lib.glob("*.jar") if jar.name.startswith(CONNECTOR_JARS))


def cluster_id(seed: uuid.UUID | None = None) -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid)."""
    raw = (seed or uuid.uuid4()).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def format_args(cluster: str, properties: Path) -> list[str]:
    """StorageTool's arguments to format the log dirs for `cluster`: the id joined to its
    option with `=`, since a random id may begin with `-` (base64url), which the tool's
    parser otherwise reads as an option and refuses."""
    return ["format", f"--cluster-id={cluster}", "--config", str(properties)]


def server_properties(port: int, controller_port: int, log_dir: Path) -> str:
    """One node that is broker and controller (KRaft), plaintext on loopback, replication 1."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={log_dir}",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "",
        ]
    )


def consumer_rate(output: str) -> float:
    """`fetch.nMsg.sec` from ConsumerPerformance's CSV output (a header, then a data line)."""
    lines = [line for line in output.splitlines() if line.count(",") >= 5]
    if len(lines) < 2 or "fetch.nMsg.sec" not in lines[0]:
        raise KafkaError(f"ConsumerPerformance printed no summary: {output[-500:]}")
    header = [cell.strip() for cell in lines[0].split(",")]
    values = [cell.strip() for cell in lines[-1].split(",")]
    return float(values[header.index("fetch.nMsg.sec")])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class KafkaBroker:
    """A KRaft single-node Kafka on 127.0.0.1 with its storage in `work_dir`."""

    def __init__(self, lib: Path, work_dir: Path) -> None:
        self.lib = lib
        self.work_dir = work_dir
        self.port = _free_port()
        self.controller_port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _java(self, main: str, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            ["java", "-Xmx256m", "-cp", f"{self.lib}/*", main, *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise KafkaError(f"{main} {' '.join(args)} failed: {done.stderr[-800:]}")
        return done.stdout

    def start(self, timeout: float = 60) -> KafkaBroker:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        properties = self.work_dir / "server.properties"
        properties.write_text(
            server_properties(self.port, self.controller_port, self.work_dir / "logs")
        )
        self._java("kafka.tools.StorageTool", *format_args(cluster_id(), properties))
        log = (self.work_dir / "broker.log").open("wb")
        self.process = subprocess.Popen(
            ["java", *JVM_OPTIONS, "-cp", f"{self.lib}/*", "kafka.Kafka", str(properties)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaError(f"kafka exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise KafkaError(f"kafka did not listen within {timeout} s: {self.log_tail()}")

    def log_tail(self, size: int = 2000) -> str:
        path = self.work_dir / "broker.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else ""

    def create_topic(self, topic: str, partitions: int) -> None:
        self._java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap,
                   "--create", "--topic", topic, "--partitions", str(partitions),
                   "--replication-factor", "1")  # fmt: skip

    def produce(self, topic: str, count: int, size: int, rate: int = -1) -> str:
        """`count` records of `size` bytes with Kafka's own ProducerPerformance (acks=all,
        idempotent, the client's defaults); `rate` records/s, -1 as fast as it goes. Its
        summary line is returned."""
        out = self._java("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                         "--num-records", str(count), "--record-size", str(size),
                         "--throughput", str(rate), "--producer-props",
                         f"bootstrap.servers={self.bootstrap}", timeout=600)  # fmt: skip
        lines = [line for line in out.splitlines() if "records sent" in line]
        if not lines:
            raise KafkaError(f"ProducerPerformance printed no summary: {out[-500:]}")
        return lines[-1]

    def consume(self, topic: str, count: int) -> float:
        """Kafka's own ConsumerPerformance reads `count` records from the start of `topic`:
        the plain Java client's rate (records/s, its `fetch.nMsg.sec`: from the first fetch on,
        without the consumer group's join, as a pika consumer has none)."""
        out = self._java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                         self.bootstrap, "--topic", topic, "--messages", str(count),
                         "--timeout", "60000", timeout=600)  # fmt: skip
        return consumer_rate(out)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
