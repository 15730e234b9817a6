"""The broker's optional C extensions, loaded one way (docs/broker.md, "Native code").

Why a module: each extension has a Python twin and is optional to the install (no C compiler
where the broker was installed: the install still succeeds), and ``HUTCH_BROKER_PURE_PYTHON``
selects every twin at once, to compare the two or to rule the extensions out. The modules that
own an extension (``store.records``, ``protocol.contentscan``) ask here which one runs.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

PURE_PYTHON = "HUTCH_BROKER_PURE_PYTHON"
LOADED: list[str] = []  # the extension modules ``load`` found, for /api/nodes and the bench


def load(module: str, name: str) -> Any:
    """``module``'s ``name``, or None when the extension is not built or the twins are asked
    for (``HUTCH_BROKER_PURE_PYTHON``)."""
    if os.environ.get(PURE_PYTHON):
        return None
    try:
        found = getattr(importlib.import_module(module), name)
    except ImportError:
        return None
    if module not in LOADED:  # one module may give several functions
        LOADED.append(module)
    return found
