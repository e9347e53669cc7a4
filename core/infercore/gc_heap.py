"""Long-lived processes freeze their start-up heap, so the cyclic collector stops walking it.

A process that imported torch, transformers, FastAPI and pydantic holds hundreds of thousands of
objects that live until exit. Every full collection walks all of them: tens of milliseconds in which an
API server streams nothing and an engine launches nothing. Collected once and frozen (moved to the
permanent generation) after start-up, they are skipped; what is allocated later is collected as usual.
"""

from __future__ import annotations

import atexit
import gc

_unfreeze_registered = False


def freeze_startup_heap() -> int:
    """Collect, then freeze every object still alive; returns how many objects are frozen now.

    They are unfrozen at exit, so the interpreter's last collection still finalises them."""
    global _unfreeze_registered
    gc.collect()
    gc.freeze()
    if not _unfreeze_registered:
        atexit.register(gc.unfreeze)
        _unfreeze_registered = True
    return gc.get_freeze_count()
