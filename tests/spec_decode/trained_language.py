"""A synthetic language with structure and tiny models trained on it (CPU, seconds), for measuring what the
proposers accept on a model that has learned something.

Sentences are token ids ``BASE..BASE+M-1`` of two kinds: arithmetic sequences modulo ``M`` (start and step
drawn per sentence: ``a, a+d, a+2d, …`` with ``d`` one of ``STEPS``) and a random span of 3 to 6 tokens
repeated to the sentence's length. A model that learned them continues a sequence by its step and a span by copying; the histories
repeat themselves, so n-gram lookup finds drafts too.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

#: The language's tokens: ids BASE .. BASE + M - 1 of the tiny tokenizer.
BASE, M = 100, 24
STEPS = (1, 2, 3, -1, -2)
SEQ_LEN = 48


def sentence(generator: torch.Generator) -> list[int]:
    """One sentence of ``SEQ_LEN`` tokens: an arithmetic sequence or a repeated span."""
    if torch.rand((), generator=generator) < 0.5:
        a = int(torch.randint(0, M, (), generator=generator))
        d = STEPS[int(torch.randint(0, len(STEPS), (), generator=generator))]
        return [BASE + (a + i * d) % M for i in range(SEQ_LEN)]
    length = int(torch.randint(3, 7, (), generator=generator))
    span = torch.randint(0, M, (length,), generator=generator).tolist()
    return [BASE + span[i % length] for i in range(SEQ_LEN)]


def train_model(folder: Path, *, hidden: int, layers: int, steps: int, seed: int) -> Path:
    """A tiny Llama of the tiny tokenizer trained on the language for ``steps`` AdamW steps of 32
    sentences; saved with its tokenizer in ``folder``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infercore.tiny_models import build_tokenizer, tiny_config

    build_tokenizer(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    config = tiny_config("LlamaForCausalLM", vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                         intermediate_size=2 * hidden, num_attention_heads=4, num_key_value_heads=2)
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = None
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            batch = torch.tensor([sentence(generator) for _ in range(32)])
            loss = model(input_ids=batch, labels=batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def prompts(count: int, seed: int = 99) -> list[list[int]]:
    """Prompts of the language: each sentence's first 12 tokens."""
    generator = torch.Generator().manual_seed(seed)
    return [sentence(generator)[:12] for _ in range(count)]


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1])
    for name, hidden, layers in (("target", 64, 2), ("draft", 32, 1)):
        started = time.time()
        train_model(out / name, hidden=hidden, layers=layers, steps=int(sys.argv[2]), seed=0)
        print(name, round(time.time() - started, 1), "s")
