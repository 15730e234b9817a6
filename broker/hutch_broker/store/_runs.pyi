"""Types of the C extension ``_runs.c`` (records.decode_run's loop)."""

from hutch_broker.store.records import RunRecord

def decode_run(
    record_type: type[RunRecord],
    chunk: bytes,
    msg_id: int,
    lengths: list[int],
    salt: int,
    offset: int,
    /,
) -> list[RunRecord]: ...
