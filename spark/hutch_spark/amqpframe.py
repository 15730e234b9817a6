"""AMQP 0-9-1 frame constants and the big-endian structs the stream reader unpacks them with.

Why a module of its own: the executor's frame loop (framescan), the delivery parser
(streamframes) and the socket side (streamwire) all read the same frame layout, and each had
its own copy of these numbers. They live here, below all three, so there is one of each.
Pure: constants only.
"""

from __future__ import annotations

import struct
from typing import Final

FRAME_END: Final = 0xCE
METHOD: Final = 1
HEADER: Final = 2
BODY: Final = 3
HEARTBEAT: Final = 8
BASIC_DELIVER: Final = (60 << 16) | 60  # class 60 (basic), method 60 (deliver), as one u32

FRAME: Final = struct.Struct(">BHI")  # type, channel, payload size
CLASS_METHOD: Final = struct.Struct(">HH")
U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")
U64: Final = struct.Struct(">Q")
I64: Final = struct.Struct(">q")
