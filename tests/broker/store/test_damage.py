"""Damage suite ("Broker trust" 4): every file the store writes, cut, flipped and deleted.

Each case damages a fresh copy of one pristine data directory, then runs what start-up runs
(``start_up``: definitions, each durable queue's log, then ``set_aside_unclaimed``) and checks
the rules, whatever the damage:

* no exception escapes, except the documented refusals of damaged definitions (and then not
  one byte of the data directory has changed);
* every message served is one that was appended, byte for byte (nothing corrupt, nothing
  forged); a message acked before may come back (a lost ack), nothing else;
* a confirmed, unacked message that is not served comes with an ERROR line naming its log (a
  WARNING only for a cut in the newest segment holding records after a crash, which is what a
  crash leaves: the pristine directory was stopped cleanly, the ``crash-then-`` cases remove
  the marker that says so);
* nothing is deleted: every byte that left its place is under ``quarantine/``;
* the other queues are untouched.

The layout is the broker's: ``<data>/definitions.*`` and ``<data>/msgs/msgs/<hash>/``.
"""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hutch_broker.store import (
    CorruptDefinitionsError,
    DefinitionsStore,
    MessageStore,
    QueueStore,
    StoredMessage,
    journal,
    layout,
    records,
)

SEGMENT_SIZE = 660  # four records a segment (after an 80-byte header): three segments per queue
MESSAGES = 12
ACKED = (1, 3, 5)  # in segments 1 and 2: both get an ack file
QUEUES = ("healthy", "victim", "late")  # late is declared after the snapshot: journal only
HEADER = records.FILE_HEADER_SIZE
COPY = records.COPY_SIZE  # the second copy of the header starts here
CLEAN_STOP = "stopped-cleanly"  # in msgs/msgs/: the last run synced and closed every log

Damage = Callable[[Path], None]


def fields(index: int) -> dict[str, Any]:
    return {
        "enqueued_at_ms": 1_700_000_000_000 + index,
        "expire_at_ms": 0,
        "exchange": "amq.direct",
        "routing_key": f"key.{index}",
        "raw_properties": b"\x90\x00" + bytes([index]),
        "body": f"message {index} ".encode() * 6,
    }


def queue_item(name: str) -> dict[str, Any]:
    return {"vhost": "/", "name": name, "durable": True, "auto_delete": False, "arguments": {}}


def queue_dir(data_dir: Path, name: str) -> Path:
    return layout.queue_path(data_dir / "msgs" / "msgs", "/", name)


@dataclass
class Pristine:
    path: Path
    appended: dict[str, dict[int, StoredMessage]]  # every message ever appended, by msg_id
    live: dict[str, list[int]]  # confirmed and not acked, in order


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    data_dir = tmp_path_factory.mktemp("pristine")
    definitions = DefinitionsStore(data_dir)
    definitions.recover()
    definitions.compact({"queues": [queue_item("healthy"), queue_item("victim")]})
    definitions.stage("queues", queue_item("late"))
    definitions.stage("queues", queue_item("spare"))  # two records: damage can sit between
    definitions.commit()
    definitions.close()
    store = open_messages(data_dir)
    appended: dict[str, dict[int, StoredMessage]] = {}
    live: dict[str, list[int]] = {}
    for name in QUEUES:
        log = store.open_queue("/", name)
        ids = [log.append(**fields(index)) for index in range(MESSAGES)]
        store.sync()
        log.ack_many(ids[index] for index in ACKED)
        store.sync()
        appended[name] = {i: StoredMessage(i, **fields(n)) for n, i in enumerate(ids)}
        live[name] = [i for n, i in enumerate(ids) if n not in ACKED]
    store.close()
    return Pristine(data_dir, appended, live)


def open_messages(data_dir: Path) -> MessageStore:
    return MessageStore(
        data_dir / "msgs", segment_size=SEGMENT_SIZE, quarantine_dir=data_dir / "quarantine"
    )


@dataclass
class Started:
    recovered: dict[str, list[StoredMessage]]
    files: dict[str, bytes]  # every file under the data dir after start-up, before any sync


def start_up(data_dir: Path) -> Started:
    """What ``BrokerServer.recover`` does with the store, without the model."""
    store = open_messages(data_dir)
    definitions = DefinitionsStore(data_dir)
    try:
        document = definitions.recover(other_data=bool(store.existing_queues()))
    except BaseException:
        store.close()
        raise
    finally:
        definitions.close()
    durable = [(item["vhost"], item["name"]) for item in (document or {}).get("queues", [])]
    try:
        recovered = {name: served(store.open_queue(vhost, name)) for vhost, name in durable}
        store.set_aside_unclaimed(durable)
        return Started(recovered, snapshot(data_dir))
    finally:
        store.close()


def served(queue: QueueStore) -> list[StoredMessage]:
    """Recovery keeps no body: a queue reads each back when the message reaches its head."""
    return [queue.read(message.msg_id) for message in queue.recover()]


def snapshot(data_dir: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(data_dir)): path.read_bytes()
        for path in sorted(data_dir.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


# -- damage -------------------------------------------------------------------------------------


def cut(size: int | Callable[[int], int]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        length = path.stat().st_size
        with path.open("r+b") as file:
            file.truncate(size(length) if callable(size) else size)

    return damage


def flip(position: int | Callable[[bytes], int], mask: int = 0x10) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[position(bytes(data)) if callable(position) else position] ^= mask
        path.write_bytes(bytes(data))

    return damage


def delete(path: Path) -> None:
    path.unlink()


def both(*damages: Damage) -> Damage:
    def damage(path: Path) -> None:
        for each in damages:
            each(path)

    return damage


def after_a_crash(damage: Damage) -> Damage:
    """The damage, in a data directory whose last run did not stop cleanly."""

    def crashed(path: Path) -> None:
        (path.parent.parent / CLEAN_STOP).unlink()
        damage(path)

    return crashed


def rewrite(content: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.write_bytes(content)

    return damage


def journal_record_starts(data: bytes) -> list[int]:
    starts, pos = [], journal.FILE_HEADER_SIZE
    while (decoded := journal.decode_record(data, pos)) is not None:
        starts.append(pos)
        pos = decoded[1]
    return starts


@dataclass(frozen=True)
class Case:
    target: str  # a queue file of "victim" (its name), or a definitions file
    name: str
    damage: Callable[[Path], None]
    torn_ok: bool = False  # looks like a crash: a WARNING is enough for what it loses
    may_refuse: bool = False


OLD_SEGMENT = "msgs.0000000001"  # sealed, records in a newer segment: any cut is damage
NEW_SEGMENT = "msgs.0000000003"  # the newest holding records: a cut may be a torn write

CASES = [
    *(
        Case(segment, name, damage)
        for segment in (OLD_SEGMENT, NEW_SEGMENT)
        for name, damage in [
            ("cut-empty", cut(0)),
            ("cut-in-file-header", cut(7)),
            ("cut-in-second-header-copy", cut(COPY + 7)),
            ("cut-in-first-record-header", cut(HEADER + 5)),
            ("cut-in-the-middle", cut(lambda size: size // 2)),
            ("cut-last-byte", cut(lambda size: size - 1)),
            ("flip-version", flip(4, mask=0x02)),
            ("flip-salt", flip(10)),
            ("flip-header-checksum", flip(17)),
            ("flip-queue-identity", flip(25)),
            ("flip-second-copy-salt", flip(COPY + 10)),
            ("flip-second-copy-checksum", flip(COPY + 37)),
            ("flip-salt-in-both-copies", both(flip(10), flip(COPY + 10))),
            ("flip-identity-in-both-copies", both(flip(25), flip(COPY + 25))),
            ("flip-first-record-checksum", flip(HEADER)),
            ("flip-first-record-body", flip(HEADER + 80)),
            ("flip-last-byte", flip(-1)),
        ]
    ),
    *(  # what a crash leaves in the newest segment: a WARNING is enough for what it loses
        Case(NEW_SEGMENT, f"crash-then-{name}", after_a_crash(damage), torn_ok=True)
        for name, damage in [
            ("cut-empty", cut(0)),
            ("cut-in-file-header", cut(7)),
            ("cut-in-the-middle", cut(lambda size: size // 2)),
            ("cut-last-byte", cut(lambda size: size - 1)),
        ]
    ),
    Case(OLD_SEGMENT, "delete", delete),  # its ack file is left: the loss is reported
    Case("msgs.0000000002", "delete", delete),
    Case("acks.0000000001", "cut-empty", cut(0)),
    Case("acks.0000000001", "cut-mid-record", cut(3)),
    Case("acks.0000000001", "cut-second-record", cut(12)),
    Case("acks.0000000001", "flip-offset", flip(1)),
    Case("acks.0000000001", "flip-check", flip(-1)),
    Case("acks.0000000001", "delete", delete),
    Case("queue.json", "cut-empty", cut(0)),
    Case("queue.json", "cut-half", cut(lambda size: size // 2)),
    Case("queue.json", "flip-name", flip(lambda data: data.index(b"victim") + 2, mask=0x01)),
    Case("queue.json", "names-another-queue", rewrite(b'{"vhost": "/", "queue": "healthy"}')),
    Case("queue.json", "delete", delete),
    Case("definitions.json", "cut-empty", cut(0), may_refuse=True),
    Case("definitions.json", "cut-half", cut(lambda size: size // 2), may_refuse=True),
    Case("definitions.json", "flip-brace", flip(0, mask=0x01), may_refuse=True),
    Case(
        "definitions.json",
        "flip-queue-name",  # still JSON: "victim" becomes "vicuim", victim's log has no queue
        flip(lambda data: data.index(b'"victim"') + 4, mask=0x01),
    ),
    # Broker trust II item 11: queue logs without a snapshot refuse to start, changing nothing.
    Case("definitions.json", "delete", delete, may_refuse=True),
    Case("definitions.log", "cut-to-header", cut(journal.FILE_HEADER_SIZE)),
    Case("definitions.log", "cut-in-last-record", cut(lambda size: size - 5), torn_ok=True),
    Case("definitions.log", "flip-last-checksum", flip(lambda d: journal_record_starts(d)[-1])),
    Case(
        "definitions.log",
        "flip-first-checksum",  # damage with a valid record after it: refused, by design
        flip(lambda d: journal_record_starts(d)[0]),
        may_refuse=True,
    ),
    Case("definitions.log", "flip-file-header", flip(1), may_refuse=True),
    Case("definitions.log", "delete", delete),
]


def target_path(data_dir: Path, target: str) -> Path:
    if target.startswith("definitions."):
        return data_dir / target
    return queue_dir(data_dir, "victim") / target


@pytest.mark.parametrize("case", CASES, ids=[f"{case.target}-{case.name}" for case in CASES])
def test_damage(case: Case, pristine: Pristine, tmp_path: Path, caplog) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(pristine.path, data_dir)
    case.damage(target_path(data_dir, case.target))
    damaged = snapshot(data_dir)
    caplog.set_level(logging.WARNING)

    try:
        started = start_up(data_dir)
    except CorruptDefinitionsError:
        assert case.may_refuse, "only damaged definitions may stop the start-up"
        assert snapshot(data_dir) == damaged, "a refused start-up must change nothing"
        return

    assert_served_intact(started, pristine)
    assert_losses_reported(started, pristine, case, data_dir, caplog.records)
    assert_nothing_deleted(damaged, started.files)
    if not case.target.startswith("definitions."):
        assert started.recovered["healthy"] == expected(pristine, "healthy")
        assert started.recovered["late"] == expected(pristine, "late")


@pytest.mark.parametrize("seed", range(60))
def test_random_segment_damage(seed: int, pristine: Pristine, tmp_path: Path, caplog) -> None:
    """Fuzz: 1-4 random bytes of a random segment of "victim" (half of them in its header)
    replaced by random values; the same rules as every case above. Damage confined to one copy
    of the header loses nothing."""
    rng = random.Random(seed)
    segment = rng.choice([OLD_SEGMENT, "msgs.0000000002", NEW_SEGMENT])
    data_dir = tmp_path / "data"
    shutil.copytree(pristine.path, data_dir)
    path = target_path(data_dir, segment)
    data = bytearray(path.read_bytes())
    positions = {
        rng.randrange(HEADER) if rng.random() < 0.5 else rng.randrange(len(data))
        for _ in range(rng.randint(1, 4))
    }
    for position in positions:
        data[position] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    damaged = snapshot(data_dir)
    caplog.set_level(logging.WARNING)

    started = start_up(data_dir)

    case = Case(segment, f"random-{seed}", delete)
    assert_served_intact(started, pristine)
    assert_losses_reported(started, pristine, case, data_dir, caplog.records)
    assert_nothing_deleted(damaged, started.files)
    if positions < set(range(COPY)) or positions < set(range(COPY, HEADER)):
        assert started.recovered["victim"] == expected(pristine, "victim"), sorted(positions)


def expected(pristine: Pristine, name: str) -> list[StoredMessage]:
    return [pristine.appended[name][msg_id] for msg_id in pristine.live[name]]


def assert_served_intact(started: Started, pristine: Pristine) -> None:
    for name, served in started.recovered.items():
        originals = pristine.appended.get(name, {})
        for message in served:
            assert originals.get(message.msg_id) == message, f"{name}: not as appended"


def assert_losses_reported(
    started: Started,
    pristine: Pristine,
    case: Case,
    data_dir: Path,
    log_records: list[logging.LogRecord],
) -> None:
    level = logging.WARNING if case.torn_ok else logging.ERROR
    for name in QUEUES:
        served = {message.msg_id for message in started.recovered.get(name, [])}
        lost = [msg_id for msg_id in pristine.live[name] if msg_id not in served]
        if not lost:
            continue
        directory = queue_dir(data_dir, name).name
        reports = [
            record
            for record in log_records
            if record.levelno >= level and directory in record.getMessage()
        ]
        assert reports, f"{name}: {len(lost)} messages lost without a log line naming its log"


def assert_nothing_deleted(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    """Whatever left its place (or changed) is in the quarantine, whole, as a cut tail or as a
    rewritten header (or both)."""
    kept = {path: data for path, data in after.items() if path.startswith("quarantine/")}
    for path, data in before.items():
        now = after.get(path)
        if now == data or Path(path).name == CLEAN_STOP:
            continue
        name = Path(path).name
        whole = [k for k, v in kept.items() if Path(k).name == name and v == data]
        headers = [v for k, v in kept.items() if Path(k).name == f"{name}.header"]
        bases = [now] + [v + now[len(v) :] for v in headers if now is not None]
        tails = [
            k
            for k, v in kept.items()
            for base in bases
            if base is not None
            and Path(k).name.startswith(f"{name}.tail-from-")
            and base + v == data
        ]
        repaired = [base for base in bases if base == data]
        zeros_cut = any(
            base is not None and data.startswith(base) and not data[len(base) :].strip(b"\0")
            for base in bases
        )
        assert whole or tails or repaired or zeros_cut, (
            f"{path}: changed or gone, and not in the quarantine"
        )


# -- the cases behind the issue, one by one ------------------------------------------------------


def damaged_copy(pristine: Pristine, tmp_path: Path, target: str, damage: Damage) -> Path:
    data_dir = tmp_path / "data"
    shutil.copytree(pristine.path, data_dir)
    damage(target_path(data_dir, target))
    return data_dir


def quarantined(data_dir: Path) -> list[str]:
    root = data_dir / "quarantine"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def errors_naming(caplog, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and text in r.getMessage()
    ]


def test_a_lost_journal_sets_queue_logs_aside_instead_of_deleting_them(pristine, tmp_path, caplog):
    """The bug: with definitions.log missing, every unknown queue's log was deleted silently."""
    data_dir = damaged_copy(pristine, tmp_path, "definitions.log", delete)
    late = queue_dir(data_dir, "late")
    segments_before = sorted(p.name for p in late.iterdir())

    started = start_up(data_dir)

    assert "late" not in started.recovered  # its definition was only in the lost journal
    assert started.recovered["healthy"] == expected(pristine, "healthy")
    assert not late.exists()
    (entry,) = (data_dir / "quarantine").glob(f"*-queue-{late.name}")
    assert sorted(p.name for p in (entry / late.name).iterdir()) == segments_before
    assert "'late'" in (entry / "REASON.txt").read_text()
    assert errors_naming(caplog, late.name)
    assert any("definitions.log: missing" in r.getMessage() for r in caplog.records)


def test_a_flipped_version_byte_stops_nothing_and_is_repaired(pristine, tmp_path, caplog):
    data_dir = damaged_copy(pristine, tmp_path, OLD_SEGMENT, flip(4, mask=0x02))
    segment = target_path(data_dir, OLD_SEGMENT)
    caplog.set_level(logging.WARNING)

    started = start_up(data_dir)

    assert started.recovered["victim"] == expected(pristine, "victim")
    (line,) = [r.getMessage() for r in caplog.records if OLD_SEGMENT in r.getMessage()]
    assert "its first copy is damaged (version), the second copy is intact" in line
    assert records.parse_file_header(segment.read_bytes()).state is records.HeaderState.VALID
    kept = quarantined(data_dir)
    assert [Path(name).name for name in kept] == ["REASON.txt", f"{OLD_SEGMENT}.header"]
    caplog.clear()
    assert start_up(data_dir).recovered["victim"] == expected(pristine, "victim")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # repaired: clean
    assert quarantined(data_dir) == kept


@pytest.mark.parametrize("position", range(HEADER))
def test_any_one_damaged_header_byte_is_repaired_from_the_other_copy(
    position, pristine, tmp_path, caplog
):
    """Item 12: one flipped byte in a segment's salt used to make all its records unreadable."""
    data_dir = damaged_copy(pristine, tmp_path, OLD_SEGMENT, flip(position, mask=0xFF))
    caplog.set_level(logging.WARNING)

    started = start_up(data_dir)

    assert started.recovered["victim"] == expected(pristine, "victim")
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "restored from the intact copy, all 4 records recovered" in caplog.records[0].message


def test_a_salt_damaged_in_both_copies_is_found_by_the_records(pristine, tmp_path, caplog):
    """Two damaged fields: no copy verifies, but the first copy's salt is intact, and the
    records that verify with it prove it (the version 2 rule)."""
    damage = both(flip(4, mask=0x02), flip(COPY + 10))
    data_dir = damaged_copy(pristine, tmp_path, OLD_SEGMENT, damage)

    started = start_up(data_dir)

    assert started.recovered["victim"] == expected(pristine, "victim")
    (line,) = errors_naming(caplog, OLD_SEGMENT)
    assert "4 records verify with the salt it holds and are recovered" in line
    segment = target_path(data_dir, OLD_SEGMENT)
    assert records.parse_file_header(segment.read_bytes()).state is records.HeaderState.VALID


def test_a_queue_json_naming_another_queue_is_rewritten(pristine, tmp_path, caplog):
    label = rewrite(b'{"vhost": "/", "queue": "healthy"}')
    data_dir = damaged_copy(pristine, tmp_path, "queue.json", label)

    started = start_up(data_dir)

    assert started.recovered["victim"] == expected(pristine, "victim")
    assert started.recovered["healthy"] == expected(pristine, "healthy")
    assert layout.read_names(queue_dir(data_dir, "victim")) == ("/", "victim")
    assert errors_naming(caplog, "queue.json")
    assert [Path(name).name for name in quarantined(data_dir)] == ["REASON.txt", "queue.json"]


def test_a_queue_whose_recovery_fails_is_held_back_alone(pristine, tmp_path, caplog):
    """Any error recovering one log sets that log aside; the queue starts empty and works."""

    def unreadable(path: Path) -> None:  # read_bytes() raises IsADirectoryError
        path.unlink()
        path.mkdir()

    data_dir = damaged_copy(pristine, tmp_path, "msgs.0000000002", unreadable)
    victim = queue_dir(data_dir, "victim")

    started = start_up(data_dir)

    assert started.recovered["victim"] == []
    assert started.recovered["healthy"] == expected(pristine, "healthy")
    assert started.recovered["late"] == expected(pristine, "late")
    (entry,) = (data_dir / "quarantine").glob(f"*-queue-{victim.name}")
    assert (entry / victim.name / OLD_SEGMENT).is_file()
    assert errors_naming(caplog, "'victim'")
    store = open_messages(data_dir)
    try:
        log = store.open_queue("/", "victim")
        msg_id = log.append(**fields(99))
        store.sync()
    finally:
        store.close()
    assert [m.msg_id for m in start_up(data_dir).recovered["victim"]] == [msg_id]


def test_an_unreadable_segment_is_moved_aside_with_its_acks(pristine, tmp_path, caplog):
    salts = both(flip(10), flip(COPY + 10))  # the salt, in both copies of the header
    data_dir = damaged_copy(pristine, tmp_path, OLD_SEGMENT, salts)

    started = start_up(data_dir)

    in_old_segment = {i for i in pristine.live["victim"] if i >> 32 == 1}
    assert [m.msg_id for m in started.recovered["victim"]] == [
        i for i in pristine.live["victim"] if i not in in_old_segment
    ]
    assert sorted(Path(name).name for name in quarantined(data_dir)) == [
        "REASON.txt",
        "acks.0000000001",
        OLD_SEGMENT,
    ]
    assert errors_naming(caplog, OLD_SEGMENT)


def test_an_empty_segment_file_is_reported(pristine, tmp_path, caplog):
    def empty_newer_segment(directory: Path) -> None:
        (directory / "msgs.0000000004").write_bytes(b"")

    data_dir = tmp_path / "data"
    shutil.copytree(pristine.path, data_dir)
    empty_newer_segment(queue_dir(data_dir, "victim"))
    caplog.set_level(logging.WARNING)

    started = start_up(data_dir)

    assert started.recovered["victim"] == expected(pristine, "victim")
    assert any("msgs.0000000004" in r.getMessage() for r in caplog.records)


# -- forged records (item 5) ---------------------------------------------------------------------

GUESSED_SALTS = (0, 1, (1 << 64) - 1)


def forged_records(first: int, number: int) -> bytes:
    """Records an attacker can build from the public format, each claiming the position it
    will sit at once the body lands at ``first``; the salt is unknown, so it is guessed."""
    body = b"FORGED: nobody published this"
    fake = {
        "enqueued_at_ms": 1,
        "expire_at_ms": 0,
        "exchange": b"",
        "routing_key": b"forged",
        "raw_properties": b"\x00\x00",
    }
    forged = b""
    for salt in (None, *GUESSED_SALTS):
        position = first + len(forged)
        seed = 0 if salt is None else records.record_seed(salt, position)  # 0: a plain CRC32
        msg_id = (number << 32) | position
        forged += records.encode_head(seed=seed, msg_id=msg_id, body=body, **fake) + body
    return forged


def carrier_store(data_dir: Path) -> tuple[list[int], int, int, Path]:
    """A log of: one message, a message whose body holds forged records, one more message.

    Returns the honest ids, where the carrier record starts and ends, and the segment path.
    """
    store = MessageStore(data_dir, segment_size=1 << 20)
    try:
        log = store.open_queue("/", "q")
        first = log.append(**fields(0))
        carrier_at = (first & 0xFFFF_FFFF) + records.record_size(
            exchange=b"amq.direct",
            routing_key=b"key.0",
            raw_properties=fields(0)["raw_properties"],
            body=fields(0)["body"],
        )
        honest = fields(1)
        body_at = carrier_at + records.record_size(
            exchange=b"amq.direct",
            routing_key=b"key.1",
            raw_properties=honest["raw_properties"],
            body=b"",
        )
        honest["body"] = forged_records(body_at, first >> 32) + b"tail of the carrier body"
        carrier = log.append(**honest)
        assert carrier & 0xFFFF_FFFF == carrier_at
        last = log.append(**fields(2))
        store.sync()
        directory = log.directory
    finally:
        store.close()
    carrier_end = last & 0xFFFF_FFFF
    return [first, carrier, last], carrier_at, carrier_end, directory / "msgs.0000000001"


@pytest.mark.parametrize(
    "damage",
    ["torn-tail-in-carrier", "carrier-checksum", "carrier-length", "carrier-body-after-forgery"],
)
def test_a_record_inside_a_body_is_never_served(tmp_path, damage):
    data_dir = tmp_path / "data"
    ids, carrier_at, carrier_end, segment = carrier_store(data_dir)
    data = bytearray(segment.read_bytes())
    if damage == "torn-tail-in-carrier":
        data = data[: carrier_end - 10]
    elif damage == "carrier-checksum":
        data[carrier_at] ^= 0x01
    elif damage == "carrier-length":
        data[carrier_at + 8] ^= 0x01
    else:
        data[carrier_end - 3] ^= 0x01
    segment.write_bytes(bytes(data))

    store = MessageStore(data_dir, segment_size=1 << 20)
    try:
        served = store.open_queue("/", "q").recover()
    finally:
        store.close()

    assert [m.routing_key for m in served if m.routing_key == "forged"] == []
    assert ids[1] not in [m.msg_id for m in served]  # the damaged carrier itself
    assert [m.msg_id for m in served] == [ids[0]] + ([ids[2]] if "tail" not in damage else [])
