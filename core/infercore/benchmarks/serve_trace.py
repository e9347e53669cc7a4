"""Where serving latency goes: join the latency trace's records and print each stage's percentiles.

``INFERCORE_TRACE_LATENCY=1`` makes ``infercore serve`` (engine and API servers) and ``infercore bench
serve`` write one JSON line per request (:mod:`infercore.engine.latency_trace`). This joins the three
records of each request by its id and prints JSON lines, grouped by the client run's ``--label``:

* ``path: first_token`` - one line per hop from the client's send to its first event (client, HTTP
  parse, body, request model, validation, engine socket, engine queue, prefill step, IO thread, ZMQ,
  API server, client), and the totals ``ttft_client``, ``ttft_api`` (app start to first write) and
  ``ttft_engine`` (engine receipt to the first output written).
* ``path: per_token`` - every token's delay from one stage to the next (step done, written by the
  engine's IO thread, read by the API server, written as an event, read by the client).
* ``path: gaps`` - at each of those stages, the gaps between a request's successive deliveries
  (inter-token latency as that stage sees it) and their p99 over the median time per output token: the
  stage where this ratio jumps is where tokens start to arrive in bursts.
* ``path: occupancy`` - where the client's in-flight slots go: the mean number of requests in each phase
  (on the way in, queued in the engine, in their prefill step, decoding, on the way out) and the slots the
  client left empty, over the whole run and over its steady part (from the first time the most requests
  were in flight to the last send). Throughput at a fixed concurrency is the decoding share.

    python3 -m infercore.benchmarks.serve_trace /tmp/infercore-latency-trace [--label c1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercore.engine.latency_trace import base_request_id, trace_dir

#: The first-token hops, in order: (role, stamp); a list stamp means its first element.
FIRST_TOKEN_STAMPS = [
    ("client", "send"), ("api", "http_begin"), ("api", "app_start"), ("api", "body_read"), ("api", "parsed"),
    ("api", "validated"), ("api", "handed"), ("engine", "recv"), ("engine", "added"), ("engine", "first_step"),
    ("engine", "step_done"), ("engine", "written"), ("api", "recv"), ("api", "sse"), ("client", "events"),
]
#: The stages every token passes, in order.
TOKEN_STAGES = ["step_done", "written", "api_recv", "sse", "client"]


@dataclass
class TracedRequest:
    """The three records of one request (any may be missing)."""

    client: dict[str, Any]
    api: dict[str, Any] | None
    engine: dict[str, Any] | None


def load_records(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every record of the trace files in ``directory``, by role."""
    by_role: dict[str, list[dict[str, Any]]] = {"client": [], "api": [], "engine": []}
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed process
            if isinstance(record, dict) and record.get("role") in by_role:
                by_role[record["role"]].append(record)
    return by_role


def join(by_role: dict[str, list[dict[str, Any]]]) -> dict[str, list[TracedRequest]]:
    """The client's records with their API server's and engine's, grouped by the client run's label."""
    api = {base_request_id(r["id"]): r for r in by_role["api"]}
    engine = {base_request_id(r["id"]): r for r in by_role["engine"]}
    groups: dict[str, list[TracedRequest]] = {}
    for record in by_role["client"]:
        if record.get("id") is None:
            continue  # failed before its first event
        key = base_request_id(record["id"])
        label = record.get("label") or "unlabelled"
        groups.setdefault(label, []).append(TracedRequest(record, api.get(key), engine.get(key)))
    return groups


def percentiles(values_ns: list[float]) -> dict[str, float]:
    """Mean, p50, p90, p99 in ms (nearest rank, as ``infercore bench serve``) and the count."""
    if not values_ns:
        return {"n": 0}
    ordered = sorted(values_ns)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6, 4)

    return {"n": len(ordered), "mean_ms": round(statistics.fmean(ordered) / 1e6, 4), "p50_ms": pct(0.5),
            "p90_ms": pct(0.9), "p99_ms": pct(0.99)}


def _stamp(request: TracedRequest, role: str, name: str) -> int | None:
    record = getattr(request, role)
    value = record.get(name) if record is not None else None
    if isinstance(value, list):
        return value[0] if value else None
    return value


def first_token_stages(requests: list[TracedRequest]) -> list[tuple[str, list[float]]]:
    """Per hop of the first token (``role.stamp>role.stamp``), each request's time in it (ns); a missing
    stamp (say, ``http_begin`` under the h11 parser) joins its neighbours into one hop."""
    stages: dict[str, list[float]] = {}
    for request in requests:
        previous: tuple[str, int] | None = None
        for role, name in FIRST_TOKEN_STAMPS:
            value = _stamp(request, role, name)
            if value is None:
                continue
            here = f"{role}.{name}"
            if previous is not None:
                stages.setdefault(f"{previous[0]}>{here}", []).append(value - previous[1])
            previous = (here, value)
    totals = {
        "ttft_client": (("client", "send"), ("client", "events")),
        "ttft_api": (("api", "app_start"), ("api", "sse")),
        "ttft_engine": (("engine", "recv"), ("engine", "written")),
    }
    ordered = sorted(stages.items(), key=lambda item: _order(item[0]))
    for name, (start, end) in totals.items():
        spans = [(e - s) for r in requests if (s := _stamp(r, *start)) is not None and (e := _stamp(r, *end)) is not None]
        ordered.append((name, spans))
    return ordered


def _order(stage: str) -> int:
    first = stage.split(">")[0]
    names = [f"{role}.{name}" for role, name in FIRST_TOKEN_STAMPS]
    return names.index(first) if first in names else len(names)


def _arrivals(times: list[int], counts: list[int], cumulative: bool) -> list[int]:
    """The time each token (in order) reached a stage, from its deliveries' times and token counts."""
    arrivals: list[int] = []
    total = 0
    for when, count in zip(times, counts):
        total = count if cumulative else total + count
        arrivals.extend([when] * max(0, total - len(arrivals)))
    return arrivals


def token_arrivals(request: TracedRequest) -> dict[str, list[int]] | None:
    """Each token's arrival at each of :data:`TOKEN_STAGES` (ns), or None if a record is missing."""
    engine, api, client = request.engine, request.api, request.client
    if engine is None or api is None:
        return None
    stages = {
        "step_done": _arrivals(engine["step_done"], engine["tokens"], cumulative=False),
        "written": _arrivals(engine["written"], engine["tokens"], cumulative=False),
        "api_recv": _arrivals(api["recv"], api["recv_tokens"], cumulative=False),
        "sse": _arrivals(api["sse"], api["sse_tokens"], cumulative=True),
    }
    # Client event k is the k-th event written; a write's tokens reached the client with its last event.
    events, client_times, written = client["events"], [], 0
    for count in api["sse_events"]:
        written += count
        if written > len(events):
            break
        client_times.append(events[written - 1])
    stages["client"] = _arrivals(client_times, api["sse_tokens"][:len(client_times)], cumulative=True)
    return stages


def token_report(requests: list[TracedRequest]) -> tuple[dict[str, list[float]], dict[str, dict[str, Any]]]:
    """Per-token delays between consecutive stages, and per stage its delivery gaps and time per token."""
    delays: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {stage: [] for stage in TOKEN_STAGES}
    per_token: dict[str, list[float]] = {stage: [] for stage in TOKEN_STAGES}
    for request in requests:
        stages = token_arrivals(request)
        if stages is None:
            continue
        count = min(len(times) for times in stages.values())
        for earlier, later in zip(TOKEN_STAGES, TOKEN_STAGES[1:]):
            delays.setdefault(f"{earlier}>{later}", []).extend(
                stages[later][j] - stages[earlier][j] for j in range(count))
        for stage in TOKEN_STAGES:
            times = stages[stage][:count]
            gaps[stage].extend(b - a for a, b in zip(times, times[1:]) if b > a)
            if count > 1:
                per_token[stage].append((times[-1] - times[0]) / (count - 1))
    summary: dict[str, dict[str, Any]] = {}
    for stage in TOKEN_STAGES:
        line = percentiles(gaps[stage])
        tpot = percentiles(per_token[stage])
        if tpot["n"]:
            line["tpot_p50_ms"] = tpot["p50_ms"]
            if line["n"] and tpot["p50_ms"] > 0:
                line["p99_over_tpot_p50"] = round(line["p99_ms"] / tpot["p50_ms"], 3)
        summary[stage] = line
    return delays, summary


#: The phases of a request's life in the client's slot: (name, start, end); a stamp is (role, key, index),
#: the index picking one of a list's values (the first step's output, the last client event).
PHASES = [
    ("inbound", ("client", "send", 0), ("engine", "recv", 0)),
    ("queued", ("engine", "recv", 0), ("engine", "first_step", 0)),
    ("prefill", ("engine", "first_step", 0), ("engine", "step_done", 0)),
    ("decoding", ("engine", "step_done", 0), ("engine", "step_done", -1)),
    ("outbound", ("engine", "step_done", -1), ("client", "events", -1)),
]


def _phase_stamp(request: TracedRequest, role: str, key: str, index: int) -> int | None:
    record = getattr(request, role)
    value = record.get(key) if record is not None else None
    if isinstance(value, list):
        return value[index] if value else None
    return value


def _overlap(start: int, end: int, lo: int, hi: int) -> int:
    return max(0, min(end, hi) - max(start, lo))


def occupancy(requests: list[TracedRequest]) -> dict[str, Any]:
    """The mean number of requests in each phase of :data:`PHASES`, and of client slots left empty (the
    most requests ever in flight, less the mean in flight), over the run and over its steady part."""
    spans = []  # (send, end, {phase: (start, end)})
    for request in requests:
        send, end = _phase_stamp(request, "client", "send", 0), _phase_stamp(request, "client", "events", -1)
        if send is None or end is None:
            continue
        phases = {}
        for name, start_stamp, end_stamp in PHASES:
            start, stop = _phase_stamp(request, *start_stamp), _phase_stamp(request, *end_stamp)
            if start is not None and stop is not None and stop >= start:
                phases[name] = (start, stop)
        spans.append((send, end, phases))
    if not spans:
        return {"n": 0}
    edges = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    in_flight = peak = 0
    peak_at = edges[0][0]
    for when, change in edges:
        in_flight += change
        if in_flight > peak:
            peak, peak_at = in_flight, when
    windows = {"run": (min(s for s, _, _ in spans), max(e for _, e, _ in spans)),
               "steady": (peak_at, max(s for s, _, _ in spans))}
    result: dict[str, Any] = {"n": len(spans), "peak_in_flight": peak}
    for window, (lo, hi) in windows.items():
        length = hi - lo
        if length <= 0:
            continue
        in_flight_mean = sum(_overlap(s, e, lo, hi) for s, e, _ in spans) / length
        line = {"seconds": round(length / 1e9, 3), "in_flight": round(in_flight_mean, 2),
                "empty": round(peak - in_flight_mean, 2)}
        for name, _, _ in PHASES:
            line[name] = round(sum(_overlap(*p[name], lo, hi) for _, _, p in spans if name in p) / length, 2)
        result[window] = line
    return result


def report(directory: Path, label: str | None = None) -> list[dict[str, Any]]:
    """The JSON lines of the trace in ``directory`` (of one client ``label``, or of all)."""
    lines: list[dict[str, Any]] = []
    for name, requests in sorted(join(load_records(directory)).items()):
        if label is not None and name != label:
            continue
        for stage, values in first_token_stages(requests):
            lines.append({"label": name, "path": "first_token", "stage": stage, **percentiles(values)})
        delays, gaps = token_report(requests)
        for stage, values in delays.items():
            lines.append({"label": name, "path": "per_token", "stage": stage, **percentiles(values)})
        for stage, summary in gaps.items():
            lines.append({"label": name, "path": "gaps", "stage": stage, **summary})
        lines.append({"label": name, "path": "occupancy", **occupancy(requests)})
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the trace's per-stage lines; 1 when the folder holds no joined request."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", type=Path, default=None,
                        help="the trace folder (default: INFERCORE_TRACE_LATENCY_DIR or its default)")
    parser.add_argument("--label", default=None, help="only the client run of this --label")
    args = parser.parse_args(argv)
    lines = report(args.directory or trace_dir(), args.label)
    for line in lines:
        print(json.dumps(line), flush=True)
    if not lines:
        print(f"no traced request in {args.directory or trace_dir()}; serve and load with "
              "INFERCORE_TRACE_LATENCY=1", file=sys.stderr)
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main())
