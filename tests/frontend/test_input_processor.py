"""InputProcessor: bad prompts are refused with messages that name the numbers."""

from __future__ import annotations

import pytest
from frontend_fakes import processor_for

from infercore.frontend.input_processor import InputError, InputProcessor
from infercore.sampling_params import SamplingParams


@pytest.fixture
def inputs(tokenizer) -> InputProcessor:
    return processor_for(tokenizer, max_model_len=64)


def test_text_prompt_is_tokenized(inputs, tokenizer):
    processed = inputs.process("r", "hello 你好", SamplingParams(max_tokens=5), arrival_time=12.5, priority=3,
                               cache_salt="tenant")
    assert processed.prompt == "hello 你好" and processed.prompt_token_ids == tokenizer.encode("hello 你好")
    (req,) = processed.engine_requests
    assert (req.request_id, req.parent_id, req.arrival_time, req.priority, req.cache_salt) == ("r", None, 12.5, 3, "tenant")
    assert req.eos_token_id == tokenizer.eos_token_id and req.sampling_params.max_tokens == 5


def test_prompt_too_long(inputs):
    with pytest.raises(InputError, match="prompt has 64 tokens but max_model_len is 64") as info:
        inputs.process("r", [5] * 64, SamplingParams())
    assert "--max-model-len" in str(info.value) and info.value.param == "prompt"


def test_prompt_plus_max_tokens_too_long(inputs):
    with pytest.raises(InputError, match=r"prompt has 60 tokens and max_tokens is 10, 70 in all, but max_model_len is "
                                         r"64; lower max_tokens to at most 4") as info:
        inputs.process("r", [5] * 60, SamplingParams(max_tokens=10))
    assert info.value.param == "max_tokens"


def test_max_tokens_none_fills_the_context(inputs):
    processed = inputs.process("r", [5] * 60, SamplingParams(max_tokens=None))
    assert processed.engine_requests[0].sampling_params.max_tokens == 4


@pytest.mark.parametrize("prompt", ["", [], {"prompt_token_ids": []}])
def test_empty_prompt(inputs, prompt):
    with pytest.raises(InputError, match="prompt is empty"):
        inputs.process("r", prompt, SamplingParams())


def test_out_of_vocabulary_ids(inputs, tokenizer):
    n = len(tokenizer)
    with pytest.raises(InputError, match=f"token id {n} at position 1 is outside the vocabulary of {n} tokens"):
        inputs.process("r", [1, n], SamplingParams())
    with pytest.raises(InputError, match="token id -1 at position 0"):
        inputs.process("r", [-1], SamplingParams())


@pytest.mark.parametrize("prompt", [[1.5], ["a"], [True], 5])
def test_non_integer_ids(inputs, prompt):
    with pytest.raises(InputError, match="list of integer token ids"):
        inputs.process("r", prompt, SamplingParams())


def test_dict_prompts(inputs, tokenizer):
    ids = inputs.process("r", {"prompt_token_ids": [3, 4], "prompt": "x"}, SamplingParams()).prompt_token_ids
    assert ids == [3, 4]
    text = inputs.process("r", {"prompt": "hi", "add_special_tokens": False}, SamplingParams())
    assert text.prompt_token_ids == tokenizer.encode("hi", add_special_tokens=False)
    with pytest.raises(InputError, match="'prompt'"):
        inputs.process("r", {"text": "hi"}, SamplingParams())


def test_without_tokenizer_needs_token_ids(tokenizer):
    inputs = InputProcessor(None, max_model_len=64, vocab_size=len(tokenizer), max_logprobs=5, eos_token_id=2,
                            generation_stop_ids=[])
    assert inputs.process("r", [5, 6], SamplingParams()).prompt is None
    with pytest.raises(InputError, match="token ids"):
        inputs.process("r", "hello", SamplingParams())
    with pytest.raises(InputError, match="stop strings need"):
        inputs.process("r", [5], SamplingParams(stop=["x"]))


def test_model_limits(inputs, tokenizer):
    with pytest.raises(InputError, match="logprobs=21 exceeds the server's limit of 20") as info:
        inputs.process("r", [5], SamplingParams(logprobs=21))
    assert info.value.param == "logprobs"
    with pytest.raises(InputError, match="logprobs=-1 asks for all"):
        inputs.process("r", [5], SamplingParams(logprobs=-1))
    with pytest.raises(InputError, match="outside the vocabulary"):
        inputs.process("r", [5], SamplingParams(stop_token_ids=[len(tokenizer) + 3]))
    with pytest.raises(InputError, match="min_tokens is 10 but only 4 tokens fit"):
        inputs.process("r", [5] * 60, SamplingParams(max_tokens=None, min_tokens=10))


def test_stop_token_ids_merge_generation_config(tokenizer):
    inputs = InputProcessor(tokenizer, max_model_len=64, vocab_size=len(tokenizer), max_logprobs=5,
                            eos_token_id=2, generation_stop_ids=[0, 2])
    params = inputs.process("r", [5], SamplingParams(stop_token_ids=[7])).params
    assert params.all_stop_token_ids == [0, 7]
    params = inputs.process("r", [5], SamplingParams(stop_token_ids=[7], ignore_eos=True)).params
    assert params.all_stop_token_ids == [7]
