"""The shared-memory broadcast queue: ordering, messages larger than a slot, back-pressure, timeouts."""

from __future__ import annotations

import os

import pytest

from infercore.distributed.shm_queue import QueueTimeout, ShmQueue


@pytest.fixture
def queue():
    q = ShmQueue.create(num_readers=2, num_slots=3, slot_bytes=64)
    yield q
    q.close()


def test_every_reader_sees_every_message_in_order(queue: ShmQueue) -> None:
    readers = [queue.reader(0), queue.reader(1)]
    messages = [b"", b"x", os.urandom(64), os.urandom(150)]  # 150 bytes span three 64-byte slots
    for message in messages:
        queue.write(message, timeout=1)
        assert [r.read(timeout=1) for r in readers] == [message, message]


def test_a_reader_across_processes_attaches_by_name(queue: ShmQueue) -> None:
    reader = ShmQueue.attach(queue.name, reader_index=1)
    queue.write(b"hello", timeout=1)
    assert reader.read(timeout=1) == b"hello"
    reader.close()
    assert queue.reader(0).read(timeout=1) == b"hello"  # closing a reader leaves the segment


def test_read_times_out_when_nothing_comes(queue: ShmQueue) -> None:
    with pytest.raises(QueueTimeout):
        queue.reader(0).read(timeout=0.05)


def test_writer_waits_for_the_slowest_reader(queue: ShmQueue) -> None:
    fast = queue.reader(0)
    for i in range(3):
        queue.write(bytes([i]), timeout=1)
        fast.read(timeout=1)
    # Reader 1 has read nothing: all three slots are still its, so a fourth write cannot go in.
    with pytest.raises(QueueTimeout):
        queue.write(b"blocked", timeout=0.05)


def test_a_dead_peer_ends_the_wait_early(queue: ShmQueue) -> None:
    with pytest.raises(QueueTimeout, match="peer died"):
        queue.reader(0).read(timeout=30, still_alive=lambda: False)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one reader"):
        ShmQueue.create(num_readers=0)


def test_unlinked_segment_keeps_working_for_attached_ends(queue: ShmQueue) -> None:
    reader = ShmQueue.attach(queue.name, reader_index=0)
    queue.unlink()
    with pytest.raises(FileNotFoundError):
        ShmQueue.attach(queue.name, reader_index=1)
    queue.write(b"still here", timeout=1)
    assert reader.read(timeout=1) == b"still here"
    reader.close()


def test_message_larger_than_the_ring_with_a_concurrent_reader(queue: ShmQueue) -> None:
    import threading

    message = os.urandom(64 * 10)  # ten slots' worth through a ring of three
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend([queue.reader(0).read(timeout=5)]))
    reader.start()
    slow = queue.reader(1)
    drain = threading.Thread(target=lambda: got.append(slow.read(timeout=5)))
    drain.start()
    queue.write(message, timeout=5)
    reader.join(5)
    drain.join(5)
    assert got == [message, message]
