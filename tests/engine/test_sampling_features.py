"""Stop strings, streamed multi-byte text, min_tokens, logit_bias and penalties through the engine."""

from __future__ import annotations

from engine_cases import GREEDY_32, PROMPTS, generate_tokens, stream_deltas

from infercore import SamplingParams
from infercore.sampling_params import StructuredOutputsParams

REPLACEMENT = "\ufffd"


def boundary_stop(tokenizer, token_ids: list[int], text: str) -> tuple[str, int, int]:
    """A printable stop string in ``text`` that starts in one token and ends in the next: the string,
    where it first occurs, and how many tokens it takes to complete it."""
    for i in range(3, len(token_ids) - 1):
        boundary = len(tokenizer.decode(token_ids[:i]))
        if not text.startswith(tokenizer.decode(token_ids[:i])):
            continue
        stop = text[boundary - 2: boundary + 2]
        if len(stop) == 4 and stop.isprintable() and REPLACEMENT not in stop and text.find(stop) == boundary - 2:
            ends = next(j for j in range(i + 1, len(token_ids) + 1)
                        if len(tokenizer.decode(token_ids[:j])) >= boundary + 2)
            return stop, boundary - 2, ends
    raise AssertionError(f"no usable stop string in {text!r}")


def test_stop_string_across_tokens(make_llm) -> None:
    llm = make_llm()
    tokenizer = llm.get_tokenizer()
    first = llm.generate([PROMPTS[1]], GREEDY_32, use_tqdm=False)[0].outputs[0]
    stop, at, num_tokens = boundary_stop(tokenizer, first.token_ids, first.text)
    stopped = llm.generate([PROMPTS[1]], GREEDY_32.clone(stop=[stop]), use_tqdm=False)[0].outputs[0]
    assert stopped.text == first.text[:at]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop
    assert stopped.token_ids == first.token_ids[:num_tokens]
    kept = llm.generate([PROMPTS[1]], GREEDY_32.clone(stop=[stop], include_stop_str_in_output=True),
                        use_tqdm=False)[0].outputs[0]
    assert kept.text == first.text[:at + len(stop)]


def test_streamed_stop_string_is_never_partly_sent(make_llm) -> None:
    llm = make_llm()
    tokenizer = llm.get_tokenizer()
    first = llm.generate([PROMPTS[8]], GREEDY_32, use_tqdm=False)[0].outputs[0]
    stop, at, _ = boundary_stop(tokenizer, first.token_ids, first.text)
    deltas = stream_deltas(llm.llm_engine, "streamed-stop", PROMPTS[8], GREEDY_32.clone(stop=[stop]))
    texts = [d.outputs[0].text for d in deltas]
    assert "".join(texts) == first.text[:at]
    sent = ""
    for text in texts:
        sent += text
        assert not sent.endswith(stop[:1]) or sent == first.text[:at], "a stop string's start was streamed"
    assert deltas[-1].outputs[0].finish_reason == "stop" and deltas[-1].outputs[0].stop_reason == stop


def test_streamed_cjk_and_emoji_never_show_replacement_chars(make_llm) -> None:
    """A grammar makes the random model spell multi-byte text over byte-sized tokens."""
    llm = make_llm()
    tokenizer = llm.get_tokenizer()
    target = "你好，世界！😀🚀✨ 日本語 👍🏽 한국어"
    params = SamplingParams(temperature=0, max_tokens=80,
                            structured_outputs=StructuredOutputsParams(choice=[target]))
    deltas = stream_deltas(llm.llm_engine, "cjk", "emoji: ", params)
    texts = [d.outputs[0].text for d in deltas]
    token_ids = [t for d in deltas for t in d.outputs[0].token_ids]
    assert sum(REPLACEMENT in tokenizer.decode([t]) for t in token_ids) >= 4, "characters should span tokens"
    assert len(deltas) >= 10, "the text should arrive over many steps"
    assert all(REPLACEMENT not in text for text in texts), texts
    assert "".join(texts) == target
    assert deltas[-1].finished and deltas[-1].outputs[0].finish_reason == "stop"


def test_min_tokens_holds_back_a_forced_eos(make_llm) -> None:
    llm = make_llm()
    eos = llm.llm_engine.model_info.eos_token_id
    assert eos is not None
    push_eos = SamplingParams(temperature=0, max_tokens=20, logit_bias={eos: 100.0})
    early = llm.generate([PROMPTS[0]], push_eos, use_tqdm=False)[0].outputs[0]
    assert early.token_ids == [eos] and early.finish_reason == "stop"
    held = llm.generate([PROMPTS[0]], push_eos.clone(min_tokens=7), use_tqdm=False)[0].outputs[0]
    assert len(held.token_ids) == 8 and held.token_ids[-1] == eos and held.finish_reason == "stop"
    assert eos not in held.token_ids[:-1]


def test_logit_bias_forces_and_forbids_tokens(make_llm) -> None:
    llm = make_llm()
    forced_token = llm.get_tokenizer().encode(" the")[0]
    forced = generate_tokens(llm, [PROMPTS[2]], GREEDY_32.clone(logit_bias={forced_token: 100.0}))[0]
    assert forced == [forced_token] * 32
    plain = generate_tokens(llm, [PROMPTS[2]])[0]
    banned = generate_tokens(llm, [PROMPTS[2]], GREEDY_32.clone(logit_bias={plain[0]: -100.0}))[0]
    assert banned[0] != plain[0] and plain[0] not in banned


def test_penalties_change_greedy_output(make_llm) -> None:
    llm = make_llm()
    prompt = [PROMPTS[7]]  # repetitive text
    plain = generate_tokens(llm, prompt)[0]
    assert len(set(plain)) < len(plain), "the unpenalised output should repeat tokens"
    for name, value in (("repetition_penalty", 1.8), ("presence_penalty", 2.0), ("frequency_penalty", 2.0)):
        penalised = generate_tokens(llm, prompt, GREEDY_32.clone(**{name: value}))[0]
        assert penalised != plain, name
    # Penalties scale: a penalty of zero (or one, for repetition) leaves the output alone.
    neutral = GREEDY_32.clone(repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    assert generate_tokens(llm, prompt, neutral)[0] == plain
    # Presence counts a token once, frequency per occurrence: with many repeats they differ.
    presence = generate_tokens(llm, prompt, GREEDY_32.clone(presence_penalty=0.5))[0]
    frequency = generate_tokens(llm, prompt, GREEDY_32.clone(frequency_penalty=0.5))[0]
    assert presence != frequency
