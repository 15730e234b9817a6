"""Types of the C extension ``_content.c`` (contentscan.scan_python's twin)."""

def scan(
    buffer: bytearray, pos: int, channel: int, frame_max: int, max_body: int, last_raw: bytes, /
) -> tuple[bytes, bytes, int] | None: ...
