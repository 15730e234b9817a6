"""Types of the C extension ``_content.c`` (contentscan's Python twins)."""

def scan(
    buffer: bytearray, pos: int, channel: int, frame_max: int, max_body: int, last_raw: bytes, /
) -> tuple[bytes, bytes, int] | None: ...
def scan_publish(
    buffer: bytearray,
    pos: int,
    channel: int,
    frame_max: int,
    max_body: int,
    last_payload: bytes,
    last_raw: bytes,
    /,
) -> tuple[bytes, bytes, int] | None: ...
def deliver(
    channel: int,
    const: bytes,
    delivery_tag: int,
    redelivered: bool,
    names: bytes,
    raw_properties: bytes,
    body: bytes,
    /,
) -> bytes: ...
