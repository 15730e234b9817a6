"""A killed driver's next run as a query in this process's session (never collected).

Why: the stream kill tests started every run as a child driver, and a driver's start (a JVM
and its Python workers) was most of each run's time. Only the run that is killed needs a
process of its own. What a restart is to the source is a new query on the killed run's
checkpoint in a driver that never saw it, and this process's session is one: the source keeps
nothing between queries but the checkpoint. The runs here write what stream_child.py writes
(`--sink batches` or the Parquet file sink) and end as it does, once the commit log reaches
every stream's end, or fail as a stalled query does in querywaits.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hutch_spark import streamplan

from tests.spark import querywaits

TRIGGER = "200 milliseconds"  # stream_child.py's


def committed_end(checkpoint: Path) -> dict[str, int] | None:
    """The source offset of the newest batch in the commit log, from the offsets log."""
    commits = [int(path.name) for path in (checkpoint / "commits").glob("[0-9]*")]
    return batch_end(checkpoint, max(commits)) if commits else None


def batch_end(checkpoint: Path, batch: int) -> dict[str, int]:
    """The source's end offsets of `batch` in Spark's offsets log (its file's last line; batch
    0's `[end, start]` of a stream it resolved as its end)."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    logged = json.loads(lines[-1])
    return streamplan.parse_offset(logged, tuple(logged))


def batch_files(output: Path) -> Callable[[Any, int], None]:
    """A foreachBatch function writing each batch's `[stream, offset, body]` rows whole to
    `<output>/batch-<id>.json` (a replayed batch replaces its own file)."""
    output.mkdir(parents=True, exist_ok=True)

    def write_batch(frame: Any, batch: int) -> None:
        rows = [
            [row.stream, row.offset, bytes(row.body).decode()]
            for row in frame.select("stream", "offset", "body").collect()
        ]
        target = output / f"batch-{batch}.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(rows))
        os.replace(temporary, target)

    return write_batch


def start(reader: Any, checkpoint: Path, *, output: Path, sink: str) -> Any:
    """Starts `reader` (a streaming frame of the `hutch` source) into `sink` ("batches" or
    "parquet") on `checkpoint`, on stream_child.py's trigger."""
    frame = reader.select("stream", "offset", "message_id", "body")
    if sink == "batches":
        writer = frame.writeStream.foreachBatch(batch_files(output))
    else:
        writer = frame.writeStream.format("parquet").option("path", str(output))
    return (
        writer.option("checkpointLocation", str(checkpoint)).trigger(processingTime=TRIGGER).start()
    )


def run_to(what: str, query: Any, checkpoint: Path, ends: Mapping[str, int]) -> None:
    """Waits until `query` has committed a batch ending at `ends` (every stream's end), then
    stops it; fails when its checkpoint shows no new batch for querywaits.STALL_S, or when
    it failed or stopped before."""
    try:
        querywaits.wait_state(
            what, lambda: committed_end(checkpoint) == dict(ends), query, querywaits.STEPS,
            lambda: querywaits.checkpoint_steps(checkpoint), active=True,
        )  # fmt: skip
    finally:
        query.stop()


def run_to_failure(what: str, query: Any, checkpoint: Path) -> str:
    """Waits until `query` ends, which it must by failing; returns its failure's text."""
    querywaits.wait_ended(
        what, query, lambda: querywaits.checkpoint_steps(checkpoint), querywaits.STEPS
    )
    failure = query.exception()
    assert failure is not None, f"{what}: the query ended without failing"
    return str(failure)
