"""The ``--api-server-count N`` launcher spawns the engines and the API servers before any heavy import
(torch, transformers and uvicorn are the children's own imports, run side by side), and a parser flag no
plugin serves is still refused, with exit code 2, before anything starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Runs `infercore serve --api-server-count 2` with the launcher's process spawns recorded, not made.
_PROBE = textwrap.dedent("""
    import json, sys
    from infercore.entrypoints import api_server_procs, cli

    seen = {}

    def start(self, sock, socket_dir):
        seen["servers"] = True
        seen["heavy_at_spawn"] = sorted(m for m in ("torch", "transformers", "uvicorn", "fastapi")
                                        if m in sys.modules)
        self.stop_signal = 15  # watch() returns at once

    api_server_procs._Launcher.start = start
    code = cli.main(["serve", "--api-server-count", "2", "--port", "0", *sys.argv[1:]])
    print(json.dumps({"code": code, **seen}))
""")


def _probe(*flags: str) -> tuple[dict, str]:
    import json

    from infercore.demo import ensure_demo_model

    # Built here first: the launcher builds a missing demo folder itself (torch and transformers) before spawning.
    ensure_demo_model()
    done = subprocess.run([sys.executable, "-c", _PROBE, *flags], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_launcher_spawns_every_child_before_any_heavy_import() -> None:
    seen, stderr = _probe("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    assert seen["heavy_at_spawn"] == [], stderr[-2000:]
    assert seen.get("servers") and seen["code"] == 0


def test_an_unknown_tool_parser_is_refused_and_nothing_starts() -> None:
    seen, stderr = _probe("--enable-auto-tool-choice", "--tool-call-parser", "no_such_parser")
    assert seen["code"] == 2
    assert "servers" not in seen and "heavy_at_spawn" not in seen
    assert "no_such_parser" in stderr
