"""An EngineCore that reports, for the data-parallel expert-parallelism tests, which experts its
worker holds and how many dummy steps it ran: JSON in ``$INFERCORE_TEST_EXPERT_PROBE/engine-<rank>.json``
(rewritten on each dummy step). Used as the engine factory ``dp_expert_probe:ProbedEngineCore``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from infercore.config import InfercoreConfig
from infercore.engine.core import EngineCore
from infercore.layers.fused_moe import FusedMoE

PROBE_DIR_ENV = "INFERCORE_TEST_EXPERT_PROBE"


class ProbedEngineCore(EngineCore):
    """EngineCore (``uni`` executor) writing its experts and dummy-step count to the probe folder."""

    def __init__(self, config: InfercoreConfig) -> None:
        super().__init__(config)
        model = self.executor.runner.model  # type: ignore[attr-defined]
        self.report: dict[str, Any] = {
            "experts": {name: list(module.local_expert_ids) for name, module in model.named_modules()
                        if isinstance(module, FusedMoE)},
            "ep_ranks": sorted({module.ep_rank for module in model.modules() if isinstance(module, FusedMoE)}),
            "dummy_steps": 0,
        }
        self.path = Path(os.environ[PROBE_DIR_ENV]) / f"engine-{config.parallel.data_parallel_rank}.json"
        self._write()
        rpc = self.executor.collective_rpc

        def counted(method: str, args: tuple[Any, ...] = ()) -> list[Any]:
            if method == "execute_dummy_batch":
                self.report["dummy_steps"] += 1
                self._write()
            return rpc(method, args)

        self.executor.collective_rpc = counted  # type: ignore[method-assign]

    def _write(self) -> None:
        # Whole or not at all: the test kills an engine at any moment.
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.report))
        os.replace(scratch, self.path)


def read_probe(folder: Path, rank: int) -> dict[str, Any]:
    """What data-parallel engine ``rank`` reported."""
    return json.loads((folder / f"engine-{rank}.json").read_text())
