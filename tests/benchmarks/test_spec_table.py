"""scripts/spec_table.py: the k × rate tables of speculative decoding against the plain runs, from the JSON lines
`bench latency` and `bench throughput` print (spread over several files, as over several device calls)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("spec_table", ROOT / "scripts" / "spec_table.py")
assert _spec is not None and _spec.loader is not None
spec_table = importlib.util.module_from_spec(_spec)
sys.modules["spec_table"] = spec_table
_spec.loader.exec_module(spec_table)

EAGLE = {"method": "eagle3", "num_speculative_tokens": 4, "model": "/x"}
DRAFT = {"method": "draft_model", "num_speculative_tokens": 3, "model": "/y"}


def test_ratios_against_the_plain_runs_across_files(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("\n".join(json.dumps(line) for line in [
        {"benchmark": "latency", "speculative_config": None, "decode_ms_per_token": 6.0, "decode_ms_per_token_mean": 6.1},
        {"benchmark": "latency", "speculative_config": EAGLE, "benchmark_acceptance_rate": 0.7,
         "decode_ms_per_token": 3.0, "decode_ms_per_token_mean": 4.0, "spec_mean_accepted_length": 2.9},
        {"engine": "infercore", "async_scheduling": True, "output_tok_s": 8000.0},
        {"engine": "infercore", "async_scheduling": False, "output_tok_s": 7000.0},
        {"part": "table", "plain_tok_s": 1.0},  # an earlier table line in the same file is not a run
    ]) + "\n")
    second.write_text(json.dumps({"engine": "infercore", "async_scheduling": True, "output_tok_s": 6000.0,
                                  "speculative_config": json.dumps(DRAFT), "benchmark_acceptance_rate": 0.0,
                                  "spec_mean_accepted_length": 1.0}) + "\n")
    table = spec_table.tables(spec_table._lines([str(first), str(second)]))
    assert table["plain_ms_per_token"] == 6.0 and table["plain_tok_s"] == 8000.0  # the async plain run
    cell = table["latency"]["eagle3 k=4"]["0.7"]
    assert (cell["ratio"], cell["mean_ratio"], cell["accepted_length"]) == (2.0, 1.5, 2.9)
    assert table["throughput"]["draft_model k=3"]["0.0"]["ratio"] == 0.75  # a JSON-string config is read too
    text = spec_table.markdown(table)
    assert "| eagle3 k=4 | 2.0× (1.5), len 2.9 |" in text and "| draft_model k=3 | 0.75×, len 1.0 |" in text
