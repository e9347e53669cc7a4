"""Incremental detokenization never shows a broken character and adds up to the full decode."""

from __future__ import annotations

import time

import pytest
from frontend_fakes import processor_for, token_by_token

from infercore.frontend.detokenizer import StreamDetokenizer, WindowDetokenizer, make_detokenizer
from infercore.frontend.output_processor import OutputProcessor, RequestOutputKind
from infercore.sampling_params import SamplingParams
from infercore.wire.messages import FinishReason

CJK_EMOJI = "你好，世界！这是一个测试。日本語のテキストです。emoji: 😀 🚀 ✨ 👍🏽 🇫🇷 — naïve café <tool_call> done"
DETOKENIZERS = [StreamDetokenizer, WindowDetokenizer]


def test_text_splits_characters_over_tokens(tokenizer):
    ids = tokenizer.encode(CJK_EMOJI)
    partial = [i for i in ids if "\ufffd" in tokenizer.decode([i])]
    assert len(partial) > 10, "the corpus should split multi-byte characters over tokens"


@pytest.mark.parametrize("cls", DETOKENIZERS)
def test_stream_never_yields_replacement_char(tokenizer, cls):
    ids = tokenizer.encode(CJK_EMOJI)
    detok = cls(tokenizer, tokenizer.encode("Say:"), skip_special_tokens=True)
    deltas = [detok.step(t) for t in ids]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == tokenizer.decode(ids, skip_special_tokens=True) == CJK_EMOJI


@pytest.mark.parametrize("cls", DETOKENIZERS)
@pytest.mark.parametrize("skip", [True, False])
def test_special_tokens_shown_or_skipped(tokenizer, cls, skip):
    ids = tokenizer.encode("<|im_start|>assistant\n你好<|im_end|>")
    detok = cls(tokenizer, [], skip_special_tokens=skip)
    text = "".join(detok.step(t) for t in ids)
    assert text == tokenizer.decode(ids, skip_special_tokens=skip)
    assert ("<|im_start|>" in text) is not skip


def test_make_detokenizer_picks_the_stream_for_fast_tokenizers(tokenizer):
    assert isinstance(make_detokenizer(tokenizer, [1, 2, 3]), StreamDetokenizer)


@pytest.mark.serial  # a time bound: runs after the parallel pass, alone
@pytest.mark.parametrize("cls", DETOKENIZERS)
def test_per_token_cost_is_small(tokenizer, cls):
    ids = tokenizer.encode(CJK_EMOJI * 40)
    detok = cls(tokenizer, [], skip_special_tokens=True)
    start = time.perf_counter()
    for t in ids:
        detok.step(t)
    per_token_us = (time.perf_counter() - start) / len(ids) * 1e6
    assert per_token_us < 100, f"{cls.__name__}: {per_token_us:.1f} µs per token"


def test_streaming_deltas_through_the_output_processor(tokenizer):
    ids = tokenizer.encode(CJK_EMOJI)
    processed = processor_for(tokenizer).process("r", "hi", SamplingParams(max_tokens=len(ids)))
    proc = OutputProcessor(tokenizer)
    proc.add_request(processed, RequestOutputKind.DELTA)
    deltas = []
    for out in token_by_token("r", ids):
        for ro in proc.process_outputs([out]).request_outputs:
            deltas.append(ro.outputs[0].text)
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == tokenizer.decode(ids)
    assert not proc.has_unfinished_requests()


def test_eos_text_is_not_shown(tokenizer):
    ids = tokenizer.encode("hello") + [tokenizer.eos_token_id]
    params = SamplingParams(skip_special_tokens=False)
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", params))
    out = proc.process_outputs(token_by_token("r", ids, FinishReason.STOP)).request_outputs[-1].outputs[0]
    assert out.text == "hello"
    assert out.token_ids == ids
    assert out.finish_reason == "stop" and out.stop_reason is None
