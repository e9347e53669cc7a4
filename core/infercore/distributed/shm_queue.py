"""A single-writer, multi-reader message queue in shared memory: the control path to the workers.

The segment holds a header, one acknowledgement counter per reader and a ring of fixed-size slots.
Each slot has a sequence number, a length and a "more" flag; a message larger than a slot spans
consecutive slots. The writer fills a slot only once every reader has acknowledged the message that
used it before, and publishes a slot by writing its sequence number last. Readers poll with a
timeout, so nobody waits forever on a peer that died: both sides take a ``still_alive`` check that
is called while they wait, and raise :class:`QueueTimeout` when the deadline passes.
"""

from __future__ import annotations

import contextlib
import struct
import time
import uuid
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory

_HEADER = struct.Struct("<qqq")  # num_readers, num_slots, slot_bytes
_SLOT_HEADER = struct.Struct("<qqq")  # sequence number, payload bytes, more-follows flag
_COUNTER = struct.Struct("<q")
#: Busy polling this long before sleeping between polls (keeps step latency low without burning a core).
_SPIN_S = 0.0005
_MAX_SLEEP_S = 0.002


class QueueTimeout(TimeoutError):
    """No message (or no free slot) within the timeout."""


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    """Attach to an existing segment without registering it with this process's resource tracker:
    its creator owns it and unlinks it, and a reader that exits must not take it away."""
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register  # type: ignore[assignment]


class ShmQueue:
    """One end of a shared-memory queue. :meth:`create` makes the segment; :meth:`attach` joins it.

    A process either writes (the only writer) or reads as reader ``reader_index``; the creator may
    be either. Messages are ``bytes``; callers encode them (msgspec) — nothing here unpickles.
    """

    def __init__(self, shm: shared_memory.SharedMemory, owner: bool, reader_index: int | None) -> None:
        self.shm = shm
        self.owner = owner
        self.reader_index = reader_index
        self.num_readers, self.num_slots, self.slot_bytes = _HEADER.unpack_from(shm.buf, 0)
        self._acks_at = _HEADER.size
        self._slots_at = self._acks_at + _COUNTER.size * self.num_readers
        self._stride = _SLOT_HEADER.size + self.slot_bytes
        self._next_seq = 1
        if reader_index is not None:
            if not 0 <= reader_index < self.num_readers:
                raise ValueError(f"reader index {reader_index} is outside 0..{self.num_readers - 1}")
            self._next_seq = self._ack(reader_index) + 1

    @classmethod
    def create(cls, num_readers: int, num_slots: int = 8, slot_bytes: int = 1 << 20) -> ShmQueue:
        """A new segment; this end is the owner and unlinks it on :meth:`close`."""
        if num_readers < 1 or num_slots < 2 or slot_bytes < 64:
            raise ValueError("a queue needs at least one reader, two slots and 64-byte slots")
        size = _HEADER.size + _COUNTER.size * num_readers + num_slots * (_SLOT_HEADER.size + slot_bytes)
        shm = shared_memory.SharedMemory(name=f"infercore-{uuid.uuid4().hex[:16]}", create=True, size=size)
        shm.buf[:size] = bytes(size)
        _HEADER.pack_into(shm.buf, 0, num_readers, num_slots, slot_bytes)
        return cls(shm, owner=True, reader_index=None)

    @classmethod
    def attach(cls, name: str, reader_index: int | None = None) -> ShmQueue:
        """Join the segment ``name`` as the writer (``reader_index=None``) or as a reader."""
        return cls(_attach_untracked(name), owner=False, reader_index=reader_index)

    @property
    def name(self) -> str:
        return self.shm.name

    def reader(self, reader_index: int) -> ShmQueue:
        """A reading end over the same segment (for readers living in the creator's process)."""
        return ShmQueue(self.shm, owner=False, reader_index=reader_index)

    # -- layout helpers -------------------------------------------------------------------------
    def _ack(self, reader: int) -> int:
        return _COUNTER.unpack_from(self.shm.buf, self._acks_at + _COUNTER.size * reader)[0]

    def _slot(self, seq: int) -> int:
        return self._slots_at + ((seq - 1) % self.num_slots) * self._stride

    @staticmethod
    def _wait(ready: Callable[[], bool], timeout: float | None, still_alive: Callable[[], bool] | None,
              what: str) -> None:
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        sleep = 0.0
        next_check = start + 0.1
        while not ready():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise QueueTimeout(f"no {what} within {timeout:.1f} s")
            if still_alive is not None and now >= next_check:
                next_check = now + 0.1
                if not still_alive():
                    raise QueueTimeout(f"a peer died while waiting for {what}")
            if now - start > _SPIN_S:
                sleep = min(max(sleep * 2, 1e-5), _MAX_SLEEP_S)
            time.sleep(sleep)

    # -- writing --------------------------------------------------------------------------------
    def write(self, data: bytes, timeout: float | None = None, still_alive: Callable[[], bool] | None = None) -> None:
        """Publish ``data`` to every reader; waits (up to ``timeout``) for slots the readers still hold."""
        if self.reader_index is not None:
            raise RuntimeError("a reading end of the queue cannot write")
        view = memoryview(data)
        offset = 0
        while True:
            chunk = view[offset: offset + self.slot_bytes]
            offset += len(chunk)
            more = offset < len(view)
            seq = self._next_seq
            oldest_allowed = seq - self.num_slots
            self._wait(lambda oldest=oldest_allowed: all(self._ack(r) >= oldest for r in range(self.num_readers)),
                       timeout, still_alive, "free slot (a reader is not keeping up)")
            at = self._slot(seq)
            body = at + _SLOT_HEADER.size
            self.shm.buf[body: body + len(chunk)] = chunk
            # The sequence number goes in last: readers take the slot as soon as they see it.
            struct.pack_into("<qq", self.shm.buf, at + 8, len(chunk), int(more))
            struct.pack_into("<q", self.shm.buf, at, seq)
            self._next_seq = seq + 1
            if not more:
                return

    # -- reading --------------------------------------------------------------------------------
    def _published(self, seq: int) -> bool:
        return struct.unpack_from("<q", self.shm.buf, self._slot(seq))[0] == seq

    def poll(self) -> bool:
        """Whether a message is waiting for this reader."""
        return self._published(self._next_seq)

    def read(self, timeout: float | None = None, still_alive: Callable[[], bool] | None = None) -> bytes:
        """The next message; raises :class:`QueueTimeout` if none arrives within ``timeout``."""
        if self.reader_index is None:
            raise RuntimeError("the writing end of the queue cannot read")
        parts: list[bytes] = []
        while True:
            seq = self._next_seq
            self._wait(lambda seq=seq: self._published(seq), timeout, still_alive, "message")
            at = self._slot(seq)
            length, more = struct.unpack_from("<qq", self.shm.buf, at + 8)
            body = at + _SLOT_HEADER.size
            parts.append(bytes(self.shm.buf[body: body + length]))
            _COUNTER.pack_into(self.shm.buf, self._acks_at + _COUNTER.size * self.reader_index, seq)
            self._next_seq = seq + 1
            if not more:
                return parts[0] if len(parts) == 1 else b"".join(parts)

    def unlink(self) -> None:
        """Remove the segment's name once every process has attached: the mappings stay valid, and
        nothing is left behind however the processes end."""
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
            self.owner = False

    def close(self) -> None:
        """Detach; the owner also removes the segment."""
        with contextlib.suppress(BufferError):
            self.shm.close()
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
