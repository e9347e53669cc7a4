"""The `infercore` command: serve, plugins, bench."""

from __future__ import annotations

import argparse
import sys

from infercore.entrypoints.missing_dependency import add_unavailable_parser
from infercore.version import __version__

#: The subcommands, each built only when asked for (their imports cost the serve command's start-up).
COMMANDS = ("plugins", "serve", "bench")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``command`` (one of :data:`COMMANDS`) only that subcommand's part."""
    parser = argparse.ArgumentParser(prog="infercore", description="infercore: LLM inference and serving engine")
    parser.add_argument("--version", action="version", version=f"infercore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command in (None, "plugins"):
        from infercore.entrypoints import plugins_cmd

        plugins_cmd.add_parser(sub)
    if command in (None, "serve"):
        try:
            from infercore.entrypoints import serve_args as serve
        except ImportError as exc:  # a dependency of the server is missing: say which
            add_unavailable_parser(sub, "serve", "start the OpenAI-compatible server", exc)
        else:
            serve.add_serve_parser(sub)
    if command in (None, "bench"):
        _add_bench_parsers(sub)
    return parser


def _add_bench_parsers(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks: throughput, latency, structured (offline) and serve (online)")
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    from infercore.benchmarks import latency, structured, throughput

    throughput.add_parser(bench_sub)
    latency.add_parser(bench_sub)
    structured.add_parser(bench_sub)
    try:
        from infercore.benchmarks import serve as bench_serve
    except ImportError as exc:  # a dependency of the client is missing: say which
        add_unavailable_parser(bench_sub, "serve", "load an OpenAI-compatible server and measure latency", exc)
    else:
        bench_serve.add_bench_serve_parser(bench_sub)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    # The subcommand's parser alone when the first word names one (anything else, help included, gets them all).
    command = args_in[0] if args_in and args_in[0] in COMMANDS else None
    parser = build_parser(command)
    args = parser.parse_args(args_in)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
