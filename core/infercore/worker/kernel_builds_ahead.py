"""Start-up's passes run once ahead of themselves, inside the platform's
:meth:`~infercore.platforms.interface.Platform.kernel_builds_ahead`: their kernels build side by side and nothing
is computed, so that running them for real finds every kernel built."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from infercore.startup_timeline import startup_phase

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def build_kernels_ahead(runner: ModelRunner, passes: Callable[[], None]) -> None:
    """Run ``passes`` once inside the runner's platform's ``kernel_builds_ahead`` (nothing where it offers none).
    A failure there costs only the builds it did not reach: those happen when the passes first run, as without
    it. One device only: with tensor or pipeline parallelism the passes hold collectives (unmeasured there)."""
    parallel = runner.config.parallel
    if parallel.tensor_parallel_size * parallel.pipeline_parallel_size > 1:
        return
    ahead = runner.platform.kernel_builds_ahead()
    if ahead is None:
        return
    with startup_phase("kernel builds ahead"):
        try:
            with ahead:
                passes()
        except Exception as exc:
            logger.info("building kernels ahead stopped early (%s: %s); the rest build when first run",
                        type(exc).__name__, exc)
        runner.platform.synchronize()
        runner.platform.empty_cache()
