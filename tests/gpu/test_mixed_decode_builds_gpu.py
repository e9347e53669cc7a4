"""Steps with prompt tokens that run eagerly (``max_mixed_graph_tokens=0``: every one) beside decodes of short and
long contexts build no kernel while serving: start-up ran their decode launches (``warm_up_mixed_decodes``). The
engine runs in a fresh process, so no variant is in memory from an earlier test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpu_marks import requires_gpu

pytestmark = requires_gpu

_RUN = """
import json, sys
from infercore import LLM, SamplingParams
from infercore.jit_builds import JitBuildCounter
llm = LLM(model=sys.argv[1], dtype="bfloat16", max_model_len=2048, max_num_seqs=12, max_num_batched_tokens=1024,
          max_mixed_graph_tokens=0, gpu_memory_utilization=0.3)
# Prompts of 30 to 1,900 tokens, outputs of 4 to 40: requests finish at different steps and the waiting ones come in
# beside the decodes of the others, long prompts in chunks, at many decode counts.
lengths = [30 + (i * 997) % 1870 for i in range(30)]
prompts = [{"prompt_token_ids": [(7 * i + j) % 100 + 1 for j in range(n)]} for i, n in enumerate(lengths)]
params = [SamplingParams(temperature=0, max_tokens=4 + (i * 13) % 37, ignore_eos=True) for i in range(30)]
with JitBuildCounter() as builds:
    outs = llm.generate(prompts, params, use_tqdm=False)
print(json.dumps({"outputs": [len(o.outputs[0].token_ids) for o in outs], "builds_while_serving": dict(builds.builds)}))
"""


def test_eager_mixed_steps_build_no_kernel_while_serving(tiny_model_factory, tmp_path) -> None:
    folder = str(tiny_model_factory("Qwen3ForCausalLM"))
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", _RUN, folder], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["outputs"] == [4 + (i * 13) % 37 for i in range(30)]
    assert result["builds_while_serving"] == {}, result
