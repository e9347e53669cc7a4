"""Custom ops: torch references in :mod:`infercore.ops.reference`, platform kernels through plugins."""

from infercore.ops.dispatch import get_op

__all__ = ["get_op"]
