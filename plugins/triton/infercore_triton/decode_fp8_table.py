"""The launch table of the decode kernel over an fp8 KV cache, written by a sweep on the machine at hand.

``INFERCORE_DECODE_FP8_TABLE`` names a JSON file (``benchmarks/decode_attention.py --fp8-sweep ...
--write-table PATH`` writes one) holding a :class:`~infercore_triton.decode_attention.DecodeConfig` and,
optionally, the decode programs per multiprocessor that split counts aim for. Without the variable, or
with a file that cannot be read, fp8 decodes keep the built-in defaults (``infercore_triton.backend``).
The table is graph-stable: one setting for every batch size.

Tables written before the decode kernel's FP8-dot and V-as-words variants were removed carry their fields
(:data:`REMOVED_FIELDS`): they still load, those fields dropped (a warning names any that was on; the rest of
the table's setting then runs on the built-in fp8 path).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercore_triton.decode_attention import DecodeConfig

logger = logging.getLogger(__name__)

TABLE_ENV = "INFERCORE_DECODE_FP8_TABLE"
TABLE_FORMAT = "infercore-decode-fp8-table/1"
#: ``DecodeConfig`` fields of variants since removed (slower than the built-in fp8 path on an H100 and an H200):
#: Q·K on the FP8 tensor cores, P·V there too, V loaded as 32-bit words. Ignored when a table names them.
REMOVED_FIELDS = frozenset({"fp8_qk_dot", "fp8_pv_dot", "fp8_v_words"})


@dataclass(frozen=True)
class Fp8DecodeTable:
    """A swept launch setting for fp8-cache decodes, and the programs per multiprocessor (``None``: the
    backend's default) that their split counts aim for."""

    config: DecodeConfig
    programs_per_sm: int | None = None

    def to_json(self, **measured: Any) -> dict[str, Any]:
        """The table as the JSON object :func:`parse_table` reads, with ``measured`` figures kept beside it."""
        return {"format": TABLE_FORMAT, "config": dataclasses.asdict(self.config),
                "programs_per_sm": self.programs_per_sm, **measured}


def parse_table(data: dict[str, Any]) -> Fp8DecodeTable:
    """A table from its JSON object; raises ``ValueError`` on another format or unknown fields. Fields of
    removed variants (:data:`REMOVED_FIELDS`) are dropped, with a warning for any that was on."""
    if data.get("format") != TABLE_FORMAT:
        raise ValueError(f"not an fp8 decode table (format {data.get('format')!r}, expected {TABLE_FORMAT!r})")
    fields = {f.name for f in dataclasses.fields(DecodeConfig)}
    config = dict(data.get("config") or {})
    removed_on = sorted(name for name in REMOVED_FIELDS & set(config) if config.pop(name))
    if removed_on:
        logger.warning("the fp8 decode table asks for %s, variants since removed: ignored, the rest of its setting "
                       "runs on the built-in fp8 path", removed_on)
    unknown = set(config) - fields
    if unknown:
        raise ValueError(f"unknown DecodeConfig fields in the fp8 decode table: {sorted(unknown)}")
    per_sm = data.get("programs_per_sm")
    if per_sm is not None and (not isinstance(per_sm, int) or per_sm < 1):
        raise ValueError(f"programs_per_sm must be a positive integer, got {per_sm!r}")
    return Fp8DecodeTable(DecodeConfig(**config), per_sm)


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Fp8DecodeTable | None:
    try:
        table = parse_table(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError) as exc:
        logger.warning("%s=%s not used (%s): fp8 decodes keep the built-in setting", TABLE_ENV, path, exc)
        return None
    logger.info("fp8 decode setting from %s: %s, %s programs per SM", path, table.config, table.programs_per_sm)
    return table


def load_table() -> Fp8DecodeTable | None:
    """The table ``INFERCORE_DECODE_FP8_TABLE`` names (read once per path), or ``None``."""
    path = os.environ.get(TABLE_ENV, "")
    return _load(path) if path else None
