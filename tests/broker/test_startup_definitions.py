"""Issue "Broker trust II", item 11: a data directory without its definitions refuses to start.

Before, a missing ``definitions.json`` started a broker with the default user only, set every
queue log aside in the quarantine and rewrote the definitions files: one lost file cost every
queue. Now a missing or empty snapshot next to message logs or a definitions journal refuses the
start, in one line that says how to start fresh on purpose (move the data directory aside), and
leaves every file as it was. An empty data directory still starts with the defaults. Real
hutch-broker processes throughout.
"""

from __future__ import annotations

import pika
import pytest
from hutch_demo.processes import BrokerStartError
from hutch_testing.clients import connect, drain

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def files_under(directory):
    return {
        path.relative_to(directory): path.read_bytes() if path.is_file() else None
        for path in sorted(directory.rglob("*"))
        if path.name != ".lock"
    }


def refused_line(broker) -> str:
    lines = [line for line in broker.log_tail().splitlines() if line.startswith("hutch-broker: ")]
    assert len(lines) == 1, broker.log_tail()
    return lines[0]


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_item_11_message_logs_without_definitions_refuse_to_start(hutch_broker, damage):
    channel = connect(hutch_broker).channel()
    channel.queue_declare("kept", durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", "kept", b"body", PERSISTENT)
    hutch_broker.stop(keep_files=True)
    data = hutch_broker.data_dir
    snapshot = data / "definitions.json"
    if damage == "missing":
        snapshot.unlink()
    else:
        snapshot.write_bytes(b"")
    before = files_under(data)

    with pytest.raises(BrokerStartError):
        hutch_broker.start()

    line = refused_line(hutch_broker)
    assert line.startswith(f"hutch-broker: {snapshot}: {damage} while the data directory holds")
    assert "refusing to start" in line
    assert f"move the data directory {data} aside" in line
    assert files_under(data) == before  # nothing quarantined, nothing rewritten

    aside = data.with_name("data-aside")
    data.rename(aside)
    hutch_broker.start()  # starting fresh on purpose: the data directory moved aside
    fresh = connect(hutch_broker).channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        fresh.queue_declare("kept", passive=True)


def test_item_11_a_definitions_journal_without_the_snapshot_refuses_to_start(hutch_broker):
    """No queue log at all (the queue never held a message): the journal alone is data."""
    connect(hutch_broker).channel().queue_declare("declared-only", durable=True)
    hutch_broker.stop(keep_files=True)
    data = hutch_broker.data_dir
    assert not [p for p in (data / "msgs" / "msgs").iterdir() if p.is_dir()]
    (data / "definitions.json").unlink()

    with pytest.raises(BrokerStartError):
        hutch_broker.start()
    line = refused_line(hutch_broker)
    assert "missing while the data directory holds a definitions journal" in line
    assert "move the data directory" in line


def test_item_11_restoring_the_file_starts_with_everything(hutch_broker):
    channel = connect(hutch_broker).channel()
    channel.queue_declare("kept", durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", "kept", b"body", PERSISTENT)
    hutch_broker.stop(keep_files=True)
    snapshot = hutch_broker.data_dir / "definitions.json"
    saved = snapshot.read_bytes()
    snapshot.unlink()
    with pytest.raises(BrokerStartError):
        hutch_broker.start()
    snapshot.write_bytes(saved)
    hutch_broker.start()
    assert drain(connect(hutch_broker).channel(), "kept") == [b"body"]


def test_item_11_an_empty_data_directory_starts_with_the_defaults(hutch_broker_factory, tmp_path):
    data = tmp_path / "fresh"
    data.mkdir()
    broker = hutch_broker_factory(data_dir=data)
    channel = connect(broker).channel()  # guest/guest, the default user
    channel.queue_declare("new", durable=True)
    assert (data / "definitions.json").stat().st_size > 0
