"""The speculative benchmarks' configs: each method reads the model folder it needs."""

from __future__ import annotations

from infercore.benchmarks.spec_folders import speculative_config


def test_speculative_config_reads_the_method_s_model_folder() -> None:
    folders = {"draft": "/d", "eagle3": "/h"}
    assert speculative_config("eagle3", 3, folders) == {"method": "eagle3", "num_speculative_tokens": 3, "model": "/h"}
    assert speculative_config("draft_model", 4, folders)["model"] == "/d"
    assert speculative_config("ngram", 2, folders) == {"method": "ngram", "num_speculative_tokens": 2}
