"""`infercore plugins`: what is installed, what each plugin registered, and each platform's probe."""

from __future__ import annotations

import argparse
import json
from typing import Any

from infercore.plugins.manager import PluginManager, get_plugin_manager


def describe_plugins(manager: PluginManager | None = None) -> list[dict[str, Any]]:
    """One JSON-able record per loaded plugin, with its platforms' probe results."""
    from infercore.platforms.selection import probe_all

    manager = manager or get_plugin_manager()
    probes = {r.name: r.result.to_json() for r in probe_all(manager)}
    records = []
    for name, info in manager.plugins.items():
        record = info.to_json()
        record["registered"] = manager.registered_by(name)
        platforms = record["registered"].get("platform", [])
        if platforms:
            record["probe"] = {p: probes[p] for p in platforms}
        records.append(record)
    return records


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plugins", help="list installed plugins, what they register and platform probes")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    records = describe_plugins()
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    for rec in records:
        print(f"{rec['name']}  ({rec['distribution']} {rec['version']})")
        print(f"  hooks: {', '.join(rec['hooks']) or '-'}")
        for kind, names in rec["registered"].items():
            print(f"  {kind}: {', '.join(names)}")
        for platform, probe in rec.get("probe", {}).items():
            state = "available" if probe["available"] else "unavailable"
            print(f"  probe {platform}: {state} (priority {probe['priority']}) - {probe['reason']}")
    return 0
