"""Spark's Python worker collects garbage after every task; the source and sink keep that cheap.

Why: a Python worker forked by `pyspark.daemon` is reused for task after task, and after each
one the daemon calls `gc.collect()`, a full collection of every object the worker tracks. After
importing pyspark, pyarrow and this package that is about 56,000 objects, all of them modules,
classes and functions that live as long as the process, and the collection frees none of them:
27-32 ms each on the 2.6 GHz Xeon, once per task, so twice per micro-batch of a stream query read
in two slices, on a machine whose two cores the query keeps busy (docs/spark.md, "Nothing for
the worker's garbage collector to walk between tasks"). `gc.freeze()` moves every object
tracked at the time to a permanent generation that collections skip: the same collection then
walks the ~5,000 objects later tasks made, 0.7 ms.

What it costs: the cycle collector never frees an object that was alive at the freeze
(reference counting still does). The freeze happens once per process, at the first task's start
in a source's `read()` or a sink's `write()`, when the daemon has just collected and what is
alive is the imports and that task's command; a per-task freeze would instead keep, for good,
whatever of each task's leftovers later became cyclic garbage, a leak that grows with the
process's life. Called only from those Spark entry points, never from the helpers that tests
and benchmarks call in their own process.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_imports() -> bool:
    """Freeze what this process tracks now, the first time only; whether this call did."""
    global _frozen  # noqa: PLW0603 - once per process, by design
    if _frozen:
        return False
    _frozen = True
    gc.freeze()
    return True
