"""A bounded cache of processed images, keyed by content hash: a repeated image (the same picture in many
requests, or a conversation's earlier turns) is not resized and normalized again."""

from __future__ import annotations

import threading
from collections import OrderedDict

from infercore.models.multimodal import ProcessedImage


class ProcessorCache:
    """Least recently used entries go first once the tensors held pass ``max_bytes`` (0: keep nothing).
    Thread-safe: processing runs in worker threads."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, ProcessedImage] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> ProcessedImage | None:
        with self._lock:
            item = self._entries.get(key)
            if item is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: str, item: ProcessedImage) -> None:
        size = item.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = item
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes

    @property
    def num_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
