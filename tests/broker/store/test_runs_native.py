"""The C ``decode_run`` (``hutch_broker.store._runs``) against its Python twin.

Why its own tests: the C loop reads client-chosen bytes at offsets it computes, so it must stop
exactly where the Python loop stops (a record that is cut, damaged, sealed for another position,
numbered for another position, or whose index length is not its framed length) and return the
same records where it does not; and the broker must not fall back to the slower loop unnoticed.
Runs are made by the store's own encoder (``records.encode_head``), then cut at every byte and
flipped at every bit.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib

import aiohttp
import pytest
from hutch_broker.protocol import contentscan
from hutch_broker.store import records
from hutch_demo import probes

SALT = 0x1F2E_3D4C_5B6A_7988
OFFSET = 80  # where a segment's first record sits, after the file header
MSG_BASE = records.msg_id_of(7, OFFSET)

python_twin = records.decode_run_python


def native():
    """The C loop, called as ``records.decode_run`` calls it."""
    from hutch_broker.store import _runs

    def decode(chunk, msg_id, lengths, *, salt, offset):
        return _runs.decode_run(records.RunRecord, chunk, msg_id, lengths, salt, offset)

    return decode


def a_run(messages, *, salt=SALT, offset=OFFSET, msg_base=MSG_BASE):
    """(chunk, lengths) of these (exchange, routing key, properties, body) laid end to end as a
    segment holds them from ``offset``."""
    chunk = bytearray()
    lengths = []
    for index, (exchange, routing_key, properties, body) in enumerate(messages):
        at = len(chunk)
        head = records.encode_head(
            seed=records.record_seed(salt, offset + at),
            msg_id=msg_base + at,
            enqueued_at_ms=1_700_000_000_000 + index,
            expire_at_ms=0 if index % 2 else 1_700_000_060_000 + index,
            exchange=records.encode_name(exchange, what="exchange"),
            routing_key=records.encode_name(routing_key, what="routing key"),
            raw_properties=properties,
            body=body,
        )
        chunk += head + body
        lengths.append(len(head) + len(body))
    return bytes(chunk), lengths


MESSAGES = [
    ("amq.topic", "orders.eu.created", b"\x80\x00\x02", b'{"id": 1}'),
    ("", "q", b"", b""),  # the default exchange, no properties, an empty body
    ("ex-\u00e9\u4e2d", "k\udcff" + "r" * 200, bytes(range(40)), b"\x00" * 3000),
    ("x" * 255, "y" * 255, b"\xff" * 7, os.urandom(70_000)),  # the longest names
    ("logs", "", b"\x90\x00\x00\x00\x00\x01", b"tail"),
]


@pytest.fixture(scope="module")
def decode_native():
    try:
        return native()
    except ImportError as error:  # pragma: no cover - the message is the point
        pytest.fail(
            f"the broker's C extension is not built ({error}): `make bootstrap` builds it, with "
            "gcc and zlib's headers installed (docs/broker.md, 'Native code')"
        )


def both(decode_native, chunk, lengths, **where):
    """Both loops' results (or exceptions' types) for one input: they must be equal."""
    args = {"msg_id": MSG_BASE, "salt": SALT, "offset": OFFSET, **where}
    results = []
    for decode in (python_twin, decode_native):
        try:
            results.append(decode(chunk, args["msg_id"], lengths, salt=args["salt"],
                                  offset=args["offset"]))  # fmt: skip
        except Exception as error:  # noqa: BLE001 - compared, not swallowed
            results.append(type(error))
    return results


def test_the_broker_runs_the_c_loop_unless_told_not_to(decode_native):
    """Fails loudly where the extension did not build, instead of the broker quietly taking
    the slower loop (the install treats it as optional)."""
    if os.environ.get("HUTCH_BROKER_PURE_PYTHON"):
        assert not records.NATIVE_RUNS
    else:
        assert records.NATIVE_RUNS
        assert records.decode_run is not python_twin


def test_a_whole_run_decodes_to_the_same_records_with_the_same_types(decode_native):
    chunk, lengths = a_run(MESSAGES)
    python, c = both(decode_native, chunk, lengths)
    assert len(python) == len(MESSAGES)
    assert c == python
    for mine, theirs in zip(c, python, strict=True):
        assert type(mine) is records.RunRecord
        assert [type(field) for field in mine] == [type(field) for field in theirs]
    assert [record.routing_key for record in c] == [m[1] for m in MESSAGES]
    assert [record.body for record in c] == [m[3] for m in MESSAGES]
    assert [record.length for record in c] == lengths


def test_every_cut_stops_both_loops_at_the_same_record(decode_native):
    chunk, lengths = a_run(MESSAGES[:3])
    for end in range(len(chunk) + 1):
        python, c = both(decode_native, chunk[:end], lengths)
        assert c == python, end
    assert len(python) == 3


def test_every_flipped_bit_stops_both_loops_at_the_same_record(decode_native):
    """Headers, fields, names, properties and body of the first records (the 3 kB body is
    sampled): a flip anywhere fails that record's checksum, or its framing before it."""
    chunk, lengths = a_run(MESSAGES[:3])
    positions = [*range(lengths[0] + lengths[1] + 400), *range(lengths[0] + lengths[1] + 400,
                 len(chunk), 97)]  # fmt: skip
    stops = set()
    for position in positions:
        for bit in range(8):
            damaged = bytearray(chunk)
            damaged[position] ^= 1 << bit
            python, c = both(decode_native, bytes(damaged), lengths)
            assert c == python, (position, bit)
            stops.add(len(python))
    assert stops == {0, 1, 2}


def test_a_run_sealed_or_numbered_for_elsewhere_is_refused_by_both(decode_native):
    chunk, lengths = a_run(MESSAGES)
    for where in (
        {"offset": OFFSET + 1},
        {"salt": SALT ^ 1},
        {"msg_id": MSG_BASE + 1},
        {"msg_id": MSG_BASE - 1},
        {"msg_id": 0},
    ):
        python, c = both(decode_native, chunk, lengths, **where)
        assert c == python == [], where


def test_index_lengths_that_disagree_with_the_records_end_the_run(decode_native):
    """The lengths come from the store's index: one that is not the record's framed length
    (too short, too long, zero, negative, huge) ends the run there, never a read elsewhere."""
    chunk, lengths = a_run(MESSAGES)
    for wrong in (lengths[1] - 1, lengths[1] + 1, 0, -lengths[0], 1 << 62, 1 << 70, -(1 << 70)):
        changed = [*lengths[:1], wrong, *lengths[2:]]
        python, c = both(decode_native, chunk, changed)
        assert c == python, wrong
        assert len(c) == 1
    assert both(decode_native, chunk, [])[1] == []
    python, c = both(decode_native, chunk, [*lengths, lengths[0]])  # more lengths than records
    assert c == python
    assert len(c) == len(MESSAGES)


def forged(field_lengths, payload_tail=b""):
    """One record whose checksum holds but whose field lengths are these (exchange, key,
    properties, body): written as the encoder would if it were wrong. Tests the length
    arithmetic after the checksum, which damage alone never reaches."""
    exchange_length, key_length, properties_length, body_length = field_lengths
    fields = struct.pack("<QQQBBIQ", MSG_BASE, 1, 0, exchange_length, key_length,
                         properties_length, body_length) + payload_tail  # fmt: skip
    framing = struct.pack("<HHI", records.RECORD_MAGIC, records.RECORD_VERSION, len(fields))
    crc = zlib.crc32(framing + fields, records.record_seed(SALT, OFFSET))
    return struct.pack("<I", crc) + framing + fields


@pytest.mark.parametrize(
    "field_lengths",
    [
        (0, 0, 0, 10),  # the body claims the 10 bytes there are
        (0, 0, 0, 11),  # one more than the payload holds
        (0, 0, 0, 9),
        (255, 255, 0, 0),  # names past the payload's end
        (0, 0, 0xFFFF_FFFF, 0),  # properties past it
        (0, 0, 0xFFFF_FFFF, (1 << 64) - 0xFFFF_FFFF + 10),  # wraps 64 bits onto the payload
        (0, 0, 0, (1 << 64) - 1),
        (3, 3, 3, 1),
    ],
)
def test_field_lengths_that_do_not_add_up_to_the_payload_are_refused_alike(
    decode_native, field_lengths
):
    record = forged(field_lengths, b"abcdefghij")
    python, c = both(decode_native, record, [len(record)])
    assert c == python
    assert len(c) == (1 if sum(field_lengths) == 10 else 0)


def test_misuse_is_an_error_not_a_read(decode_native):
    chunk, lengths = a_run(MESSAGES[:1])
    with pytest.raises(ValueError, match="salt"):
        decode_native(chunk, MSG_BASE, lengths, salt=-1, offset=OFFSET)
    with pytest.raises(ValueError, match="msg_id"):
        decode_native(chunk, 1 << 64, lengths, salt=SALT, offset=OFFSET)
    with pytest.raises(ValueError, match="4 GiB"):
        decode_native(chunk, MSG_BASE, lengths, salt=SALT, offset=1 << 32)
    with pytest.raises(TypeError):
        decode_native(bytearray(chunk), MSG_BASE, lengths, salt=SALT, offset=OFFSET)
    with pytest.raises(TypeError):
        decode_native(chunk, MSG_BASE, tuple(lengths), salt=SALT, offset=OFFSET)
    with pytest.raises(TypeError):
        decode_native(chunk, MSG_BASE, ["x"], salt=SALT, offset=OFFSET)


@pytest.fixture
def info_logs(caplog):
    """The broker's INFO lines from here on (requested before ``server``, so its start)."""
    caplog.set_level(logging.INFO, logger="hutch_broker")
    return caplog


@pytest.mark.broker  # starts a broker (hutch_testing.levels)
async def test_a_running_broker_says_which_c_loops_it_runs(info_logs, server):
    """In its start log and in /api/nodes' applications, as RabbitMQ lists its plugins: where
    the extension did not load, a user sees it without reading code."""
    url = f"http://127.0.0.1:{server.config.http_port}/api/nodes"
    headers = {"Authorization": probes.basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=headers) as session, session.get(url) as reply:
        (node,) = await reply.json()
    names = [application["name"] for application in node["applications"]]
    started = [record.getMessage() for record in info_logs.get_records("setup")]
    assert started, "the broker's start log was not captured"
    if records.NATIVE_RUNS:
        assert "hutch_broker.store._runs" in names
        assert "stream reads decode records in C (hutch_broker.store._runs)" in started
    else:
        assert "hutch_broker.store._runs" not in names
        assert any(line.startswith("stream reads decode records in Python") for line in started)
    # The other extension, the publish's content frames (tests/broker/protocol/test_content_native.py)
    content = "publishes' content frames are read in"
    if contentscan.NATIVE is not None:
        assert "hutch_broker.protocol._content" in names
        assert f"{content} C (hutch_broker.protocol._content)" in started
    else:
        assert "hutch_broker.protocol._content" not in names
        assert any(line.startswith(f"{content} Python") for line in started)
