"""The store's error tree, so callers can tell a broken disk from a caller mistake.

::

    StoreError
    ├── StoreClosedError          the QueueStore/MessageStore was closed or destroyed
    ├── StoreLockedError          another process has the data directory open
    ├── MessageNotFoundError      read() of an id that was acked, purged or never existed
    ├── CorruptRecordError        read() found a record whose checksum does not match
    ├── UnsupportedFormatError    files written in another format version (an intact header)
    └── CorruptDefinitionsError   definitions.json is not a JSON object, or a journal record
        │                         that passed its checksum makes no sense
        └── MissingDefinitionsError  definitions.json missing or empty in a data directory
                                     that holds message logs or a definitions journal

Torn tails (of a message log or of the definitions journal) found during recovery are not
errors: they are the expected result of a crash, are logged and cut off (their bytes kept in
the quarantine). Damage confined to one queue log is not an error either: recovery reports it
and sets the data aside (``quarantine``), so one queue never stops the broker.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error raised by ``hutch_broker.store``."""


class StoreClosedError(StoreError):
    pass


class StoreLockedError(StoreError):
    pass


class MessageNotFoundError(StoreError):
    pass


class CorruptRecordError(StoreError):
    pass


class UnsupportedFormatError(StoreError):
    pass


class CorruptDefinitionsError(StoreError):
    pass


class MissingDefinitionsError(CorruptDefinitionsError):
    pass
