"""A documented subcommand whose optional dependency is missing still appears, and says what to install.

A command that vanishes from ``--help`` when a package is missing looks like a typo in the docs; one that
stays and fails with the package's name tells the user what to do.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_unavailable_parser(subparsers: Any, name: str, help_text: str, error: ImportError) -> None:
    """Register ``name`` as a subcommand that accepts any arguments and exits 1 naming the missing module."""
    missing = error.name or str(error)
    # No prefix characters: every argument, flags included, lands in ``rest`` unparsed.
    parser = subparsers.add_parser(name, help=f"{help_text} (needs the missing package {missing!r})",
                                   add_help=False, prefix_chars="\0")
    parser.add_argument("rest", nargs="*")

    def explain(args: argparse.Namespace) -> int:
        print(f"error: this command needs the Python package {missing!r}, which is not installed; "
              f"pip install {missing} (or reinstall infercore with its dependencies)", file=sys.stderr)
        return 1

    parser.set_defaults(func=explain)
