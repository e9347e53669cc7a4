"""``python -m infercore ARGS`` runs the ``infercore`` command (useful where the script is not on PATH)."""

from __future__ import annotations

import sys

from infercore.entrypoints.cli import main

if __name__ == "__main__":
    sys.exit(main())
