"""`infercore plugins`: what is installed, what each plugin registered, each platform's probe, and
which plugins are broken (then it exits non-zero)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from infercore.plugins.manager import PluginError, PluginManager


def _probe(manager: PluginManager, platform: str) -> dict[str, Any]:
    """One platform's probe as JSON; a probe that raises is reported, not fatal."""
    from infercore.platforms.interface import ProbeResult

    reg = manager.registry("platform").get(platform)
    try:
        result = reg.load().probe()
    except Exception as exc:
        return {"available": False, "priority": 0, "error": f"{type(exc).__name__}: {exc}",
                "reason": f"the probe failed: {type(exc).__name__}: {exc}"}
    if "priority" in reg.metadata and result.available:
        result = ProbeResult(result.available, result.reason, int(reg.metadata["priority"]))
    return result.to_json()


def describe_plugins(manager: PluginManager | None = None) -> list[dict[str, Any]]:
    """One JSON-able record per plugin: loaded ones with what they registered and their platforms'
    probes, broken ones with ``broken: true`` and their error."""
    if manager is None:
        manager = PluginManager()
        manager.load_entry_points(keep_going=True)
    records = []
    for name, info in manager.plugins.items():
        if name in manager.broken:
            continue
        record = info.to_json()
        record["registered"] = manager.registered_by(name)
        platforms = record["registered"].get("platform", [])
        if platforms:
            record["probe"] = {p: _probe(manager, p) for p in platforms}
        records.append(record)
    records.extend(b.to_json() for b in manager.broken.values())
    return records


def is_broken(record: dict[str, Any]) -> bool:
    """Whether a plugin record shows a plugin that failed to load or a probe that raised."""
    return bool(record.get("broken")) or any("error" in p for p in record.get("probe", {}).values())


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plugins", help="list installed plugins, what they register and platform probes")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the plugins; exit status 1 when any is broken."""
    try:
        records = describe_plugins()
    except PluginError as exc:  # a failure outside any one plugin: one line, no traceback
        print(f"error: {exc}")
        return 1
    if args.json:
        print(json.dumps(records, indent=2))
        return 1 if any(map(is_broken, records)) else 0
    for rec in records:
        print(f"{rec['name']}  ({rec['distribution']} {rec['version']})")
        if rec.get("broken"):
            print(f"  BROKEN: {rec['error']}")
            continue
        print(f"  hooks: {', '.join(rec['hooks']) or '-'}")
        for kind, names in rec["registered"].items():
            print(f"  {kind}: {', '.join(names)}")
        for platform, probe in rec.get("probe", {}).items():
            state = "available" if probe["available"] else "unavailable"
            print(f"  probe {platform}: {state} (priority {probe['priority']}) - {probe['reason']}")
    return 1 if any(map(is_broken, records)) else 0
