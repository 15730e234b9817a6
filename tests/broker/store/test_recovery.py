"""Recovery from damaged files: torn tails, flipped bits, torn ack files, stray files.

Every case builds a pristine log once, then damages a fresh copy of it per variant, so each
recovery starts from exactly the bytes a crash (or a bad disk) would leave behind.
"""

from __future__ import annotations

import shutil

import pytest
from hutch_broker.store import StoredMessage, UnsupportedFormatError, records, segments


@pytest.fixture
def pristine(open_store, fill, data_dir, tmp_path):
    """A closed log of five small messages in one segment: (data dir, msg_ids, segment path)."""
    store = open_store(segment_size=64 * 1024)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 5, body_size=30)
    store.close()
    template = tmp_path / "pristine"
    shutil.copytree(data_dir, template)
    (segment,) = template.glob(f"msgs/*/{segments.segment_name(ids[0] >> 32)}")
    return template, ids, segment


@pytest.fixture
def damaged(tmp_path, open_store):
    """Copy the pristine log, let ``damage`` edit the copy, then reopen it: its QueueStore."""
    counter = iter(range(1_000_000))

    def build(template, damage):
        copy = tmp_path / f"copy-{next(counter)}"
        shutil.copytree(template, copy)
        (queue_dir,) = _queue_dirs(copy)
        damage(queue_dir)
        store = open_store(copy, segment_size=64 * 1024)
        return store, store.open_queue("/", "q")

    return build


def _queue_dirs(copy):
    return [path for path in (copy / "msgs").iterdir() if path.is_dir()]


def _expected(fields, ids):
    return [StoredMessage(msg_id=msg_id, **fields(i, body_size=30)) for i, msg_id in enumerate(ids)]


def _truncate(name, size):
    def damage(queue_dir):
        with open(queue_dir / name, "r+b") as file:
            file.truncate(size)

    return damage


def test_torn_tail_at_every_byte_of_the_last_record(pristine, damaged, fields, read_back):
    template, ids, segment = pristine
    last = ids[-1] & records.OFFSET_MASK
    end = segment.stat().st_size
    complete = _expected(fields, ids[:-1])
    for cut in range(last, end):
        store, queue = damaged(template, _truncate(segment.name, cut))
        assert read_back(queue) == complete, f"cut at {cut}"
        assert (queue.directory / segment.name).stat().st_size == last  # tail truncated
        store.close()


def test_appending_after_a_torn_tail_recovers_both(pristine, damaged, fields, fill, open_store):
    template, ids, segment = pristine
    store, queue = damaged(template, _truncate(segment.name, segment.stat().st_size - 3))
    queue.recover()
    new_ids = fill(queue, 2, first=100, body_size=30)
    directory = queue.directory.parent.parent
    store.close()

    again = open_store(directory, segment_size=64 * 1024).open_queue("/", "q")

    assert [message.msg_id for message in again.recover()] == ids[:-1] + new_ids


def _flip(name, position, mask=0x01):
    def damage(queue_dir):
        with open(queue_dir / name, "r+b") as file:
            file.seek(position)
            byte = file.read(1)[0]
            file.seek(position)
            file.write(bytes([byte ^ mask]))

    return damage


def test_a_flipped_bit_anywhere_in_a_record_is_never_served(pristine, damaged, fields, read_back):
    template, ids, segment = pristine
    start, end = ids[2] & records.OFFSET_MASK, ids[3] & records.OFFSET_MASK
    originals = dict(zip(ids, _expected(fields, ids), strict=True))
    for position in range(start, end):
        store, queue = damaged(template, _flip(segment.name, position))
        recovered = read_back(queue)
        assert ids[2] not in [message.msg_id for message in recovered], f"flip at {position}"
        assert recovered == [originals[i] for i in ids if i != ids[2]], f"flip at {position}"
        store.close()


def test_a_flipped_bit_in_the_file_header_does_not_hide_records(
    pristine, damaged, fields, read_back
):
    template, ids, segment = pristine
    _store, queue = damaged(template, _flip(segment.name, 1))
    assert read_back(queue) == _expected(fields, ids)


def test_a_flipped_version_byte_is_damage_not_another_format(pristine, damaged, fields, read_back):
    """It used to stop the broker (UnsupportedFormatError); the header checksum tells apart."""
    template, ids, segment = pristine
    _store, queue = damaged(template, _flip(segment.name, 4, mask=0x02))
    assert read_back(queue) == _expected(fields, ids)


def test_an_intact_header_of_another_format_version_is_refused(pristine, damaged):
    template, _, segment = pristine

    def older_format(queue_dir):
        data = (queue_dir / segment.name).read_bytes()
        (queue_dir / segment.name).write_bytes(b"HMSG\x01\x00\x00\x00" + data[20:])

    with pytest.raises(UnsupportedFormatError, match="version 1"):
        damaged(template, older_format)


def test_zero_filled_tail_after_a_power_cut_is_dropped(pristine, damaged, fields, read_back):
    template, ids, segment = pristine

    def damage(queue_dir):
        with open(queue_dir / segment.name, "ab") as file:
            file.write(bytes(8192))

    _store, queue = damaged(template, damage)
    assert read_back(queue) == _expected(fields, ids)
    assert (queue.directory / segment.name).stat().st_size == segment.stat().st_size


@pytest.fixture
def acked_pristine(open_store, fill, data_dir, tmp_path):
    """A closed log of six messages whose first three acks are on disk."""
    store = open_store(segment_size=64 * 1024)
    queue = store.open_queue("/", "q")
    ids = fill(queue, 6, body_size=30)
    queue.sync()
    queue.ack_many(ids[:3])
    store.close()
    template = tmp_path / "acked"
    shutil.copytree(data_dir, template)
    return template, ids, segments.ack_name(ids[0] >> 32)


def test_torn_ack_file_tail_at_every_byte(acked_pristine, damaged):
    template, ids, ack_file = acked_pristine
    size = 3 * records.ACK_RECORD_SIZE
    for cut in range(size - records.ACK_RECORD_SIZE, size):
        store, queue = damaged(template, _truncate(ack_file, cut))
        assert [message.msg_id for message in queue.recover()] == ids[2:], f"cut at {cut}"
        assert (queue.directory / ack_file).stat().st_size == size - records.ACK_RECORD_SIZE
        store.close()


@pytest.mark.parametrize("tail", [bytes(8), b"\xff" * 8, b"\x01\x02\x03"])
def test_garbage_ack_tail_is_ignored_and_acks_still_append(acked_pristine, damaged, tail):
    template, ids, ack_file = acked_pristine

    def damage(queue_dir):
        with open(queue_dir / ack_file, "ab") as file:
            file.write(tail)

    _store, queue = damaged(template, damage)
    assert [message.msg_id for message in queue.recover()] == ids[3:]
    queue.ack(ids[3])
    queue.sync()
    data = (queue.directory / ack_file).read_bytes()
    found = records.scan_acks(data)
    assert found.valid_end == len(data)
    assert found.offsets == [i & records.OFFSET_MASK for i in ids[:4]]


def test_stray_and_orphan_files(pristine, damaged, fields, read_back):
    """An ack file without its segment is set aside, a segment torn at creation cleaned away."""
    template, ids, _ = pristine
    orphan = segments.ack_name(9999)

    def damage(queue_dir):
        (queue_dir / orphan).write_bytes(records.encode_ack(8))
        (queue_dir / segments.segment_name(5000)).write_bytes(records.file_header(0, bytes(16))[:3])

    _store, queue = damaged(template, damage)
    assert read_back(queue) == _expected(fields, ids)
    assert not (queue.directory / orphan).exists()
    queue.sync()
    assert not (queue.directory / segments.segment_name(5000)).exists()
    new_id = queue.append(**fields(7))
    assert new_id > max(ids)
    assert new_id >> 32 > 9999  # segment numbers are never reused, not even an orphan's
