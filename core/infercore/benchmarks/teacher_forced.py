"""Teacher-forced scoring for the accuracy benchmarks (``benchmarks/kv_fp8_logprobs.py``,
``benchmarks/quant_logprobs.py``): an engine's logprobs of given token sequences, and closing an engine so
the next one built in the same process gets the device memory back."""

from __future__ import annotations

import gc
from typing import Any

import torch

from infercore.sampling_params import SamplingParams


def score(llm: Any, sequences: list[list[int]], output_len: int) -> tuple[list[float], list[int]]:
    """Each sequence's logprobs of its tokens after the first, and the ranks of its last ``output_len``."""
    params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": s} for s in sequences], params, use_tqdm=False)
    logprobs: list[float] = []
    ranks: list[int] = []
    for out, seq in zip(outs, sequences, strict=True):
        positions = list(zip(out.prompt_logprobs[1:], seq[1:], strict=True))
        logprobs += [p[t].logprob for p, t in positions]
        ranks += [p[t].rank for p, t in positions[-output_len:]]
    return logprobs, ranks


def close(llm: Any) -> None:
    """Shut the engine down and give its device memory back before the next one is built."""
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
