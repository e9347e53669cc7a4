"""A bounded, thread-safe LRU cache of compiled grammars keyed by the constraint."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from infercore.sampling_params import StructuredOutputsParams

V = TypeVar("V")
GrammarKey = tuple[str, str]


def grammar_key(params: StructuredOutputsParams) -> GrammarKey:
    """``(kind, canonical text)``: equal for constraints that compile to the same grammar
    (a JSON schema given as a dict or as text with other spacing or key order)."""
    kind = params.kind
    if kind == "json":
        schema = params.json
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError:
                return kind, schema  # invalid JSON: the compile reports it
        return kind, json.dumps(schema, sort_keys=True, separators=(",", ":"))
    if kind == "choice":
        return kind, json.dumps(params.choice)
    if kind == "json_object":
        return kind, ""
    return kind, str(getattr(params, kind))


class LRUCache(Generic[V]):
    """At most ``capacity`` entries and, with ``max_bytes``, at most that many bytes as ``size_of``
    measures them; the least recently used entry is dropped first, and a value larger than
    ``max_bytes`` on its own is not kept."""

    def __init__(self, capacity: int, max_bytes: int | None = None,
                 size_of: Callable[[V], int] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, got {capacity}")
        if max_bytes is not None and (max_bytes < 1 or size_of is None):
            raise ValueError("a byte-bounded cache needs max_bytes >= 1 and a size_of function")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._size_of = size_of or (lambda _: 0)
        self._items: OrderedDict[GrammarKey, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: GrammarKey) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: GrammarKey, value: V) -> None:
        size = max(0, int(self._size_of(value)))
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if self.max_bytes is not None and size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > self.capacity or (self.max_bytes is not None and self._bytes > self.max_bytes):
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    @property
    def num_bytes(self) -> int:
        """Bytes held, as ``size_of`` measures them."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
