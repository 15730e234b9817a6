"""The errors hutch_spark raises, so callers can tell a bad option from a broken broker.

Spark wraps whatever a Python data source raises in its own exception types (an
``AnalysisException`` when a query is planned, a ``StreamingQueryException`` when a stream
fails), keeping the original class name and message in the text. Every message here therefore
names the option, queue or batch it is about, so it reads well inside Spark's wrapping.

    HutchSparkError
     +-- HutchOptionError(ValueError)   an option is missing, malformed or out of range
     +-- HutchOffsetError               a checkpointed offset belongs to another queue, or
     |                                  a stream holds nothing at or after its starting moment
     +-- HutchDataLossError             a stream no longer holds offsets a query needs
     +-- HutchConnectionError           the broker is unreachable for too long, refused us,
     |                                  or cancelled our consumer (queue deleted)
     +-- HutchPublishError              the sink's messages were nacked or returned unroutable
"""

from __future__ import annotations


class HutchSparkError(Exception):
    """Base class of every error raised by hutch_spark."""


class HutchOptionError(HutchSparkError, ValueError):
    """A data source option is missing, malformed or out of range (raised before any I/O)."""


class HutchOffsetError(HutchSparkError):
    """A streaming offset does not belong to this source (for example another queue), or a
    stream holds no message at or after its starting moment
    (`startingOffsetsByTimestampStrategy` `error`)."""


class HutchDataLossError(HutchSparkError):
    """Retention removed stream offsets a query still needs (failOnDataLoss=true)."""


class HutchConnectionError(HutchSparkError):
    """The broker cannot be used: unreachable past the retry budget, refused, or cancelled."""


class HutchPublishError(HutchSparkError):
    """The broker did not accept a published message (basic.nack or basic.return)."""
