"""The C run loop (``hutch_spark._framescan``) against its Python twin (``framescan.scan_python``).

Why its own tests: the C loop reads a broker's bytes at positions it computes from them, so it
must stop exactly where the twin stops (a delivery cut short, a frame of another kind, a field
running past its frame, another template, an unexpected offset, the end) and return the same
bodies, position and tag where it does not; and an executor must not fall back to the slower
loop unnoticed. The parser's own tests (test_streamframes) run with each loop and with none.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hutch_spark import framescan, streamframes
from hutch_spark.streamplan import Slice
from hutch_spark.streamreads import SliceCursor

from tests.spark.deliveries import delivery

twin = framescan.scan_python
Scan = Callable[..., tuple[int, list[bytes], int]]


@pytest.fixture(scope="module")
def native() -> Scan:
    """The C loop; an ImportError (not built) fails the tests rather than skipping them."""
    from hutch_spark import _framescan  # type: ignore[attr-defined]

    return _framescan.scan  # type: ignore[no-any-return]


def template_of(raw: bytes) -> tuple[bytes, int]:
    """The run key and offset place the parser keeps after the first delivery of ``raw``."""
    parser = streamframes.SliceParser(
        "s", SliceCursor(Slice("s", 0, 1 << 40), fail_on_data_loss=True)
    )
    parser.feed(raw, 0)
    [key] = parser._keys
    return key, parser._last_at


def like(first: int, count: int, **props: Any) -> bytes:
    props.setdefault("message_id", "same")
    props.setdefault("headers", {"tenant": "acme", "n": 7})
    return b"".join(delivery(n, b"body-%d" % n, **props) for n in range(first, first + count))


def same(native: Scan, *args: Any) -> tuple[int, list[bytes], int]:
    """Both loops' answer to ``args``, which must be equal (errors included)."""
    try:
        expected: Any = twin(*args)
    except Exception as error:  # noqa: BLE001 - compared below
        expected = type(error)
    try:
        found: Any = native(*args)
    except Exception as error:  # noqa: BLE001
        found = type(error)
    assert found == expected, args[1:]
    return expected  # type: ignore[no-any-return]


def test_a_run_of_like_deliveries_and_every_cut_of_it(native: Scan) -> None:
    raw = like(0, 30)
    key, at = template_of(raw)
    pos, bodies, tag = same(native, raw, 0, key, at, 0, 1 << 40)
    assert (pos, bodies, tag) == (len(raw), [b"body-%d" % n for n in range(30)], 30)
    for cut in range(len(raw) + 1):  # a delivery cut anywhere is not taken
        pos, bodies, _ = same(native, raw[:cut], 0, key, at, 0, 1 << 40)
        assert raw[:pos] == like(0, len(bodies))


def test_it_stops_at_the_end_at_an_unexpected_offset_and_at_another_template(
    native: Scan,
) -> None:
    raw = like(0, 10)
    key, at = template_of(raw)
    one = len(delivery(0, b"body-0", message_id="same", headers={"tenant": "acme", "n": 7}))
    assert same(native, raw, 0, key, at, 0, 4)[1] == [b"body-%d" % n for n in range(4)]
    assert same(native, raw, 0, key, at, 3, 1 << 40) == (0, [], 0)  # offset 0, 3 expected
    assert same(native, raw, one, key, at, 1, 5)[0] == 5 * one
    gap = like(0, 3) + like(5, 3)
    assert same(native, gap, 0, key, at, 0, 100)[0:2] == (
        3 * one,
        [b"body-0", b"body-1", b"body-2"],
    )
    other = like(0, 2) + like(2, 2, message_id="other") + like(4, 2)
    assert len(same(native, other, 0, key, at, 0, 100)[1]) == 2
    assert same(native, raw, 0, key + b"x", at, 0, 100) == (0, [], 0)
    for wrong_at in (-1, at - 1, at + 1, 0, 10_000):
        assert same(native, raw, 0, key, wrong_at, 0, 100)[1] == []


def test_content_it_leaves_to_the_parser(native: Scan) -> None:
    key, at = template_of(like(0, 1))
    props = {"message_id": "same", "headers": {"tenant": "acme", "n": 7}}
    several = delivery(0, b"x" * 5000, frame_max=4096, **props)  # two body frames
    empty = delivery(0, b"", **props)  # no body frame
    heartbeat = b"\x08\x00\x00\x00\x00\x00\x00\xce"
    for raw in (several, empty, heartbeat + like(0, 2)):
        assert same(native, raw, 0, key, at, 0, 100) == (0, [], 0)


def test_every_byte_of_the_first_deliveries_changed(native: Scan) -> None:
    raw = like(0, 3)
    key, at = template_of(raw)
    for index in range(len(raw)):
        for value in {raw[index] ^ 0xFF, (raw[index] + 1) & 0xFF, 0, 0xFF}:
            damaged = raw[:index] + bytes([value]) + raw[index + 1 :]
            same(native, damaged, 0, key, at, 0, 100)


def test_random_bytes_positions_and_arguments(native: Scan) -> None:
    rng = random.Random(28)
    good = like(0, 4)
    key, at = template_of(good)
    for _ in range(3000):
        raw = bytearray(good)
        for _ in range(rng.randrange(6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        if rng.random() < 0.3:
            raw = bytearray(rng.randbytes(rng.randrange(200)))
        buf = bytes(raw[: rng.randrange(len(raw) + 1)])
        pos = rng.choice([0, 0, rng.randrange(len(buf) + 1)])
        same(native, buf, pos, key, rng.choice([at, at, rng.randrange(-2, 60)]),
             rng.choice([0, 0, rng.randrange(-3, 6)]), rng.choice([1 << 40, rng.randrange(6)]))  # fmt: skip


def test_a_position_outside_the_buffer_is_an_error(native: Scan) -> None:
    key, at = template_of(like(0, 1))
    for pos in (-1, 4):
        with pytest.raises(ValueError, match="outside the buffer"):
            native(b"abc", pos, key, at, 0, 10)
        with pytest.raises(ValueError, match="outside the buffer"):
            twin(b"abc", pos, key, at, 0, 10)


def test_executors_run_the_c_loop_unless_told_not_to(
    native: Scan, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert framescan.NATIVE and framescan.scan is native
    monkeypatch.setenv("HUTCH_SPARK_PURE_PYTHON", "1")
    assert framescan._load_native() is None
    monkeypatch.delenv("HUTCH_SPARK_PURE_PYTHON")
    assert framescan._load_native() is native
