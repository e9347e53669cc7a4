"""A bounded, thread-safe LRU cache of compiled grammars keyed by the constraint."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
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
    """At most ``capacity`` entries; the least recently used one is dropped first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[GrammarKey, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: GrammarKey) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: GrammarKey, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
