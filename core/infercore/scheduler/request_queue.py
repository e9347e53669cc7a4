"""Scheduling policies: the order of the waiting queue and which running request to preempt."""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from typing import Literal

from infercore.scheduler.request import Request


class RequestQueue(ABC):
    """Waiting requests in the order a policy serves them."""

    @abstractmethod
    def add(self, request: Request) -> None:
        ...

    @abstractmethod
    def add_preempted(self, request: Request) -> None:
        """Requeue a preempted request so that it is served before later arrivals."""
        ...

    @abstractmethod
    def peek(self) -> Request:
        ...

    @abstractmethod
    def pop(self) -> Request:
        ...

    @abstractmethod
    def remove(self, request_ids: set[str]) -> None:
        ...

    @abstractmethod
    def __len__(self) -> int:
        ...

    @abstractmethod
    def __iter__(self) -> Iterator[Request]:
        ...

    @staticmethod
    @abstractmethod
    def preemption_key(request: Request) -> tuple[float, ...]:
        """The running request with the largest key is preempted first."""
        ...


class FCFSQueue(RequestQueue):
    """First come, first served; the latest arrival is preempted first."""

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def add_preempted(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request_ids: set[str]) -> None:
        self._queue = deque(r for r in self._queue if r.request_id not in request_ids)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)

    @staticmethod
    def preemption_key(request: Request) -> tuple[float, ...]:
        return (request.arrival_time,)


class PriorityQueue(RequestQueue):
    """Lowest ``priority`` value first, then earliest arrival; the reverse order is preempted first."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._counter = itertools.count()

    def add(self, request: Request) -> None:
        heapq.heappush(self._heap, (request.priority, request.arrival_time, next(self._counter), request))

    add_preempted = add

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request_ids: set[str]) -> None:
        self._heap = [e for e in self._heap if e[3].request_id not in request_ids]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (e[3] for e in sorted(self._heap))

    @staticmethod
    def preemption_key(request: Request) -> tuple[float, ...]:
        return (request.priority, request.arrival_time)


def create_request_queue(policy: Literal["fcfs", "priority"]) -> RequestQueue:
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}; use 'fcfs' or 'priority'")
