"""/v1/completions ``echo`` with ``logprobs`` scores the prompt (its tokens lead the logprobs lists, the first
without a logprob); ``echo`` with ``max_tokens=0`` scores it and generates nothing; ``prompt_logprobs`` is
answered on completions and chat. Served logprobs equal offline ``LLM.generate`` prompt_logprobs."""

from __future__ import annotations

import httpx
import openai
import pytest

from infercore import SamplingParams

PROMPT = [5, 6, 7, 8, 9, 10, 11]
GREEDY = dict(model="tiny", temperature=0, extra_body={"ignore_eos": True})


def _prompt_text(server) -> str:
    return httpx.post(server.url + "/detokenize", json={"tokens": PROMPT}).json()["prompt"]


def _offline_prompt_logprobs(llm) -> list[float]:
    [out] = llm.generate([PROMPT], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    return [position[token].logprob for token, position in zip(PROMPT[1:], out.prompt_logprobs[1:])]


def test_echo_with_logprobs_puts_the_prompt_tokens_first(client, protocol_server, offline_llm) -> None:
    result = client.completions.create(prompt=PROMPT, max_tokens=3, logprobs=2, echo=True, **GREEDY)
    [choice] = result.choices
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == len(PROMPT) + 3
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None and lp.text_offset[0] == 0
    expected = _offline_prompt_logprobs(offline_llm)
    assert lp.token_logprobs[1:len(PROMPT)] == pytest.approx(expected, abs=1e-4)
    assert all(top and len(top) <= 3 for top in lp.top_logprobs[1:])
    assert all(value <= 0 for value in lp.token_logprobs[1:])
    prompt_text = _prompt_text(protocol_server)
    assert choice.text.startswith(prompt_text) and lp.text_offset[len(PROMPT)] == len(prompt_text)
    assert lp.text_offset == sorted(lp.text_offset)
    assert result.usage.prompt_tokens == len(PROMPT) and result.usage.completion_tokens == 3


def test_streamed_echo_logprobs_match_the_whole_response(client) -> None:
    whole = client.completions.create(prompt=PROMPT, max_tokens=3, logprobs=1, echo=True, **GREEDY).choices[0]
    tokens: list[str] = []
    values: list[float | None] = []
    text = ""
    for chunk in client.completions.create(prompt=PROMPT, max_tokens=3, logprobs=1, echo=True, stream=True,
                                           **GREEDY):
        for choice in chunk.choices:
            text += choice.text
            if choice.logprobs is not None:
                tokens += choice.logprobs.tokens
                values += choice.logprobs.token_logprobs
    assert text == whole.text and tokens == whole.logprobs.tokens
    assert values[0] is None and values[1:] == pytest.approx(whole.logprobs.token_logprobs[1:], abs=1e-4)


def test_echo_with_max_tokens_0_scores_the_prompt_only(client, protocol_server, offline_llm) -> None:
    result = client.completions.create(prompt=PROMPT, max_tokens=0, logprobs=1, echo=True, **GREEDY)
    [choice] = result.choices
    assert choice.text == _prompt_text(protocol_server) and choice.finish_reason == "length"
    assert result.usage.completion_tokens == 0 and result.usage.prompt_tokens == len(PROMPT)
    assert len(choice.logprobs.tokens) == len(PROMPT) and choice.logprobs.token_logprobs[0] is None
    assert choice.logprobs.token_logprobs[1:] == pytest.approx(_offline_prompt_logprobs(offline_llm), abs=1e-4)
    stream = list(client.completions.create(prompt=PROMPT, max_tokens=0, echo=True, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    assert "".join(c.text for chunk in stream for c in chunk.choices) == choice.text
    assert stream[-1].usage.completion_tokens == 0


def test_max_tokens_0_without_echo_is_refused(client) -> None:
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(prompt=PROMPT, max_tokens=0, **GREEDY)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=0)


def test_offline_max_tokens_0_computes_the_prompt_and_generates_nothing(offline_llm) -> None:
    [out] = offline_llm.generate([PROMPT], SamplingParams(max_tokens=0, prompt_logprobs=1), use_tqdm=False)
    [completion] = out.outputs
    assert completion.token_ids == [] and completion.text == "" and completion.finish_reason == "length"
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(PROMPT)
    assert all(token in position for token, position in zip(PROMPT[1:], out.prompt_logprobs[1:]))


def test_prompt_logprobs_are_answered(client, offline_llm) -> None:
    expected = _offline_prompt_logprobs(offline_llm)
    result = client.completions.create(prompt=PROMPT, max_tokens=2, extra_body={"prompt_logprobs": 2},
                                       model="tiny", temperature=0)
    answered = result.choices[0].model_extra["prompt_logprobs"]
    assert len(answered) == len(PROMPT) and answered[0] is None
    for token, position, value in zip(PROMPT[1:], answered[1:], expected):
        assert position[str(token)]["logprob"] == pytest.approx(value, abs=1e-4)
        assert {entry["rank"] for entry in position.values()} >= {1, 2}
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                          extra_body={"prompt_logprobs": 0})
    chat_answer = chat.model_extra["prompt_logprobs"]
    assert chat_answer[0] is None and len(chat_answer) == chat.usage.prompt_tokens
    assert all(len(position) >= 1 for position in chat_answer[1:])
    with pytest.raises(openai.BadRequestError, match="prompt_logprobs"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       stream=True, extra_body={"prompt_logprobs": 0})
