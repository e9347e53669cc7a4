"""GPU runs of the Triton kernels at real shapes; they share the cases of ``tests/triton``.

Run this folder in its own pytest process: ``tests/triton`` switches Triton to its interpreter.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "triton"))
