"""Opt-in latency trace of the serving path: a timestamp at every hop of a request, one JSON line each.

Off unless ``INFERCORE_TRACE_LATENCY=1`` is set; then each process of ``infercore serve`` (the engine,
every API server) and of ``infercore bench serve`` appends one JSON line per finished request to its own
file, ``<dir>/<role>-<pid>.jsonl``, where ``<dir>`` is ``INFERCORE_TRACE_LATENCY_DIR`` (default
``infercore-latency-trace`` in the temporary folder). Off, it costs one ``is None`` test per hop.

Every timestamp is ``time.perf_counter_ns()``: CLOCK_MONOTONIC on Linux, one clock for all processes of
a host, so the hops of one request can be subtracted across processes. The records of one request share
its id (``cmpl-…``; the engine's and the API server's carry the API server's prefix and the prompt index,
which :func:`base_request_id` strips); ``infercore.benchmarks.serve_trace`` joins them and prints each
stage's percentiles.

The stamps, in the order a request meets them:

* API server (role ``api``): ``http_begin`` (the parser saw the request's first bytes), ``app_start``
  (the application got the parsed head), ``body_read``, ``parsed`` (the JSON body validated into the
  request model), ``validated`` (prompt and sampling parameters checked, the engine request built),
  ``handed`` (written to the engine's input socket; the engine may read it before this stamp); per
  batch of engine outputs ``recv`` (read off the output socket) with its ``recv_tokens``; per
  server-sent-event write ``sse`` (the events are encoded and handed to the HTTP layer) with its
  ``sse_events`` (events in that write) and ``sse_tokens`` (tokens sent so far).
* Engine (role ``engine``): ``recv`` (read off the input socket), ``added`` (in the scheduler's queue),
  ``first_step`` (the start of the first step after it was added), per output ``step_done`` with its
  ``tokens``, and ``written`` (the IO thread has encoded that output and hands it to the API server's
  socket).
* Client (role ``client``, ``infercore bench serve``): ``send`` (before the request is written), ``events``
  (the arrival of each server-sent event with choices), and the run's ``label``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TextIO

from infercore.wire.messages import EngineCoreOutput

#: Set to 1 to write the trace.
ENV_ENABLE = "INFERCORE_TRACE_LATENCY"
#: The folder of the trace files (default: ``infercore-latency-trace`` in the temporary folder).
ENV_DIR = "INFERCORE_TRACE_LATENCY_DIR"
#: The key under which the HTTP protocol leaves its stamps in an ASGI scope.
SCOPE_KEY = "infercore.latency_trace"
#: The stamps of the HTTP request the current task serves, taken before the request has an id (set by
#: the HTTP layer, read by ``AsyncLLM.generate``); None when the trace is off.
request_stamps: ContextVar[dict[str, int] | None] = ContextVar("infercore_request_stamps", default=None)

now_ns = time.perf_counter_ns

_API_PREFIX = re.compile(r"^\d+:")
_FAN_OUT_PREFIX = re.compile(r"^\d+_")
_PROMPT_SUFFIX = re.compile(r"-\d+$")


def trace_enabled() -> bool:
    """Whether ``INFERCORE_TRACE_LATENCY`` asks for the trace."""
    return os.environ.get(ENV_ENABLE, "").strip().lower() in ("1", "true", "yes", "on")


def trace_dir() -> Path:
    """The folder the trace files go to."""
    return Path(os.environ.get(ENV_DIR) or Path(tempfile.gettempdir()) / "infercore-latency-trace")


def base_request_id(request_id: str) -> str:
    """The id the client sees (``cmpl-…``) of an engine or API server request id: without the API
    server's ``N:`` prefix, the ``i_`` of a fanned-out sample, and the ``-i`` prompt index."""
    return _PROMPT_SUFFIX.sub("", _FAN_OUT_PREFIX.sub("", _API_PREFIX.sub("", request_id)))


class TraceWriter:
    """Appends one JSON line per record to ``<dir>/<role>-<pid>.jsonl``; safe to call from any thread."""

    def __init__(self, directory: Path, role: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{role}-{os.getpid()}.jsonl"
        self.role = role
        self._file: TextIO = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"role": self.role, **record}, separators=(",", ":"))
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def open_writer(role: str) -> TraceWriter | None:
    """This process's trace writer for ``role``, or None when the trace is off."""
    return TraceWriter(trace_dir(), role) if trace_enabled() else None


class EngineTrace:
    """The engine process's stamps. ``received``, ``step_started``, ``step_done`` and ``forget`` run on
    the step loop; ``written`` runs on the output IO thread and writes a request's line once its last
    output is out."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self._records: dict[str, dict[str, Any]] = {}
        self._unstepped: list[dict[str, Any]] = []

    def received(self, request_id: str, recv_ns: int) -> None:
        """A request read off an input socket at ``recv_ns`` is in the scheduler's queue now."""
        record = {"id": request_id, "recv": recv_ns, "added": now_ns(), "first_step": None,
                  "step_done": [], "tokens": [], "written": []}
        self._records[request_id] = record
        self._unstepped.append(record)

    def step_started(self) -> None:
        """A step begins: it is the first for every request added since the previous one."""
        if self._unstepped:
            start = now_ns()
            for record in self._unstepped:
                record["first_step"] = start
            self._unstepped.clear()

    def step_done(self, outputs: Iterable[EngineCoreOutput]) -> None:
        """A step returned these outputs."""
        done = now_ns()
        for output in outputs:
            record = self._records.get(output.request_id)
            if record is not None:
                record["step_done"].append(done)
                record["tokens"].append(len(output.new_token_ids))

    def written(self, outputs: Iterable[EngineCoreOutput]) -> None:
        """The IO thread encoded these outputs and is about to send them to their API server's socket
        (stamped before the send: once it returns, the step loop may hold the interpreter a while)."""
        written = now_ns()
        for output in outputs:
            record = self._records.get(output.request_id)
            if record is None:
                continue
            record["written"].append(written)
            if output.finished:
                self._records.pop(output.request_id, None)
                self.writer.write(record)

    def forget(self, request_ids: Iterable[str]) -> None:
        """Aborted requests: no line is written for them."""
        for request_id in request_ids:
            self._records.pop(request_id, None)


class ApiTrace:
    """An API server's stamps, per request id of ``AsyncLLM.generate``; the line is written at ``finish``."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self._records: dict[str, dict[str, Any]] = {}
        self._of_engine_id: dict[str, dict[str, Any]] = {}

    def begin(self, request_id: str, engine_ids: Iterable[str], stamps: dict[str, int]) -> None:
        """Start ``request_id``'s record with the stamps taken before it had an id."""
        record: dict[str, Any] = {"id": request_id, **stamps, "recv": [], "recv_tokens": [], "sse": [],
                                  "sse_events": [], "sse_tokens": []}
        self._records[request_id] = record
        for engine_id in engine_ids:
            self._of_engine_id[engine_id] = record

    def stamp(self, request_id: str, name: str) -> None:
        """Stamp ``name`` on ``request_id``'s record now."""
        record = self._records.get(request_id)
        if record is not None:
            record[name] = now_ns()

    def received(self, outputs: Iterable[EngineCoreOutput], recv_ns: int) -> None:
        """A batch of engine outputs read off the output socket at ``recv_ns``."""
        for output in outputs:
            record = self._of_engine_id.get(output.request_id)
            if record is not None:
                record["recv"].append(recv_ns)
                record["recv_tokens"].append(len(output.new_token_ids))

    def sse_written(self, request_id: str, events: int, tokens: int) -> None:
        """``events`` server-sent events go to the HTTP layer now, ``tokens`` tokens sent with them."""
        record = self._records.get(request_id)
        if record is not None:
            record["sse"].append(now_ns())
            record["sse_events"].append(events)
            record["sse_tokens"].append(tokens)

    def finish(self, request_id: str, engine_ids: Iterable[str], aborted: bool) -> None:
        """Write ``request_id``'s line (unless it was aborted) and drop it."""
        record = self._records.pop(request_id, None)
        for engine_id in engine_ids:
            self._of_engine_id.pop(engine_id, None)
        if record is not None and not aborted:
            self.writer.write(record)
