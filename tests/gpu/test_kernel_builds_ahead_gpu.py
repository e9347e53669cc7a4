"""``INFERCORE_KERNEL_BUILDS_AHEAD=1`` on a GPU, each engine in a fresh process over an empty Triton cache: start-up
builds its kernels ahead (the phase is in its timeline), serving then builds none, and the greedy tokens are those
of an engine that built them one by one. Each run's start-up seconds are printed for comparison."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpu_marks import requires_gpu

pytestmark = requires_gpu

_RUN = """
import json, sys, time
start = time.perf_counter()
from infercore import LLM, SamplingParams
from infercore.jit_builds import JitBuildCounter
llm = LLM(model=sys.argv[1], dtype="bfloat16", max_model_len=512, max_num_seqs=16, gpu_memory_utilization=0.3)
ready = time.perf_counter() - start
prompts = [{"prompt_token_ids": [(7 * i + j) % 100 + 1 for j in range(20 + 9 * i)]} for i in range(6)]
with JitBuildCounter() as builds:
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
print(json.dumps({"ready_s": round(ready, 2), "tokens": [o.outputs[0].token_ids for o in outs],
                  "builds_while_serving": dict(builds.builds)}))
"""


def _run(folder: str, cache: str, ahead: bool) -> tuple[dict, str]:
    env = {"TRITON_CACHE_DIR": cache, "INFERCORE_KERNEL_BUILDS_AHEAD": "1" if ahead else "0", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", _RUN, folder], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_kernels_built_ahead_serve_the_same_tokens(tiny_model_factory, tmp_path) -> None:
    folder = str(tiny_model_factory("Qwen3ForCausalLM"))
    plain, _ = _run(folder, str(tmp_path / "cache-plain"), ahead=False)
    ahead, log = _run(folder, str(tmp_path / "cache-ahead"), ahead=True)
    print(json.dumps({"ready_s_one_by_one": plain["ready_s"], "ready_s_ahead": ahead["ready_s"]}))
    assert "kernel builds ahead took" in log, log[-3000:]
    assert "stopped early" not in log, log[-3000:]
    assert ahead["builds_while_serving"] == {}
    assert ahead["tokens"] == plain["tokens"]
