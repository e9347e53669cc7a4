#!/usr/bin/env python3
"""Where a process spends its time, as text, from a `py-spy record --format speedscope` profile.

For each profile file: samples per thread, then the top functions by self time (the frame a sample
was taken in) and by total time (any frame of the sample's stack, counted once per sample).

    python3 scripts/pyspy_summary.py OUT/pyspy-api.speedscope.json OUT/pyspy-engine.speedscope.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ProfileSummary:
    """Sampled time of one profile (in ``unit``): per thread, per function by self time and by total time."""

    unit: str
    total: float
    threads: Counter[str]
    self_time: Counter[str]
    total_time: Counter[str]


def _frame_names(frames: list[dict[str, Any]]) -> list[str]:
    names = []
    for frame in frames:
        where = Path(frame.get("file") or "?").name
        line = frame.get("line")
        names.append(f"{frame.get('name', '?')} ({where}{f':{line}' if line else ''})")
    return names


def summarize(profile: dict[str, Any]) -> ProfileSummary:
    """Add up a speedscope document's samples (stacks listed root first, each weighted by its time, as
    py-spy writes them)."""
    names = _frame_names(profile.get("shared", {}).get("frames", []))
    threads = profile.get("profiles", [])
    unit = threads[0].get("unit", "samples") if threads else "samples"
    summary = ProfileSummary(unit, 0.0, Counter(), Counter(), Counter())
    for thread in threads:
        samples = thread.get("samples", [])
        weights = thread.get("weights") or [1] * len(samples)
        for stack, weight in zip(samples, weights, strict=False):
            summary.total += weight
            summary.threads[thread.get("name", "?")] += weight
            if not stack:
                continue
            summary.self_time[names[stack[-1]]] += weight
            for name in {names[i] for i in stack}:
                summary.total_time[name] += weight
    return summary


def render(title: str, summary: ProfileSummary, top: int) -> str:
    """The summary as text: shares of all samples."""
    if not summary.total:
        return f"## {title}: no samples (the process was idle, or py-spy could not attach)"
    lines = [f"## {title}: {summary.total:.2f} {summary.unit} sampled (shares below), all threads"]

    def section(heading: str, counts: Counter[str], limit: int) -> None:
        lines.append(f"### {heading}")
        for name, count in counts.most_common(limit):
            lines.append(f"{100 * count / summary.total:6.1f}%  {name}")

    section("threads", summary.threads, 20)
    section(f"top {top} by self time", summary.self_time, top)
    section(f"top {top} by total time", summary.total_time, top)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print each profile's summary; 1 if a file is missing or not a speedscope document."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profiles", nargs="+", type=Path, help="speedscope JSON files written by py-spy record")
    parser.add_argument("--top", type=int, default=25, help="functions listed per ranking")
    args = parser.parse_args(argv)
    status = 0
    for path in args.profiles:
        try:
            profile = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"## {path.name}: not readable as a speedscope profile ({exc})")
            status = 1
            continue
        print(render(path.name, summarize(profile), args.top))
        print()
    return status


if __name__ == "__main__":
    sys.exit(main())
