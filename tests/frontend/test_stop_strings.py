"""Stop strings: caught across tokens, never partly streamed, truncated or kept as asked."""

from __future__ import annotations

import pytest
from frontend_fakes import processor_for, token_by_token

from infercore.frontend.output_processor import OutputProcessor, RequestOutputKind
from infercore.frontend.stop_checker import StopChecker
from infercore.sampling_params import SamplingParams
from infercore.wire.messages import EngineCoreOutput

TEXT = "The weather in Paris: 你好，世界！ then the end of the city stream."


def stream(tokenizer, text, **params):
    """Feed ``text`` token by token as DELTA; return (deltas, final delta output, all token ids, reqs_to_abort)."""
    ids = tokenizer.encode(text)
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", SamplingParams(max_tokens=200, **params)),
                     RequestOutputKind.DELTA)
    deltas, token_ids, last, aborted = [], [], None, []
    for out in token_by_token("r", ids):
        result = proc.process_outputs([out])
        aborted += result.reqs_to_abort
        for ro in result.request_outputs:
            deltas.append(ro.outputs[0].text)
            token_ids += ro.outputs[0].token_ids
            last = ro
        if last is not None and last.finished:
            break
    assert not proc.has_unfinished_requests()
    return deltas, last.outputs[0], token_ids, aborted


def assert_never_shown(deltas, final_text):
    shown = ""
    for d in deltas:
        shown += d
        assert final_text.startswith(shown), f"{shown!r} was shown but the text is {final_text!r}"
    assert shown == final_text


@pytest.mark.parametrize("stop", ["世界", "the end", "Paris: 你"])
def test_stop_string_spanning_tokens_is_caught_and_never_shown(tokenizer, stop):
    assert all(stop not in tokenizer.decode([t]) for t in tokenizer.encode(TEXT))
    deltas, out, token_ids, aborted = stream(tokenizer, TEXT, stop=[stop])
    expected = TEXT[:TEXT.index(stop)]
    assert_never_shown(deltas, expected)
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert aborted == ["r"]
    assert tokenizer.decode(token_ids).startswith(expected + stop[0])


def test_include_stop_str_in_output(tokenizer):
    deltas, out, _, _ = stream(tokenizer, TEXT, stop=["世界"], include_stop_str_in_output=True)
    expected = TEXT[:TEXT.index("世界") + 2]
    assert "".join(deltas) == expected
    assert out.stop_reason == "世界"


def test_stop_string_at_the_very_start(tokenizer):
    deltas, out, token_ids, aborted = stream(tokenizer, TEXT, stop=["The weather"])
    assert "".join(deltas) == "" and out.finish_reason == "stop" and aborted == ["r"]


def test_earliest_of_several_stop_strings_wins(tokenizer):
    deltas, out, _, _ = stream(tokenizer, TEXT, stop=["city", "世界", "Paris"])
    assert "".join(deltas) == "The weather in " and out.stop_reason == "Paris"


def test_held_back_prefix_is_released_when_the_stop_string_does_not_follow(tokenizer):
    deltas, out, token_ids, aborted = stream(tokenizer, "the end of the cit", stop=["city"])
    assert "".join(deltas) == "the end of the cit"
    assert out.finish_reason == "length" and aborted == []


def test_min_tokens_delays_stop_strings(tokenizer):
    deltas, out, _, _ = stream(tokenizer, "the end the end the end.", stop=["end"], min_tokens=6)
    assert "".join(deltas) == "the end the " and out.stop_reason == "end"


def test_stop_inside_a_multi_token_step_drops_later_tokens(tokenizer):
    ids = tokenizer.encode("alpha STOP beta gamma")
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", SamplingParams(stop=["STOP"])))
    result = proc.process_outputs([EngineCoreOutput("r", ids)])
    out = result.request_outputs[0].outputs[0]
    assert out.text == "alpha "
    assert "beta" not in tokenizer.decode(out.token_ids)
    assert result.reqs_to_abort == ["r"]


def test_holdback_is_the_longest_stop_prefix_at_the_end():
    checker = StopChecker(["abc", "cd", "bcx"])
    assert checker.holdback("xxab") == 2
    assert checker.holdback("xxabc") == 2
    assert checker.holdback("zzz") == 0
    assert StopChecker(["abc"], include_in_output=True).holdback("ab") == 0


def test_find_looks_only_at_matches_ending_in_new_text():
    checker = StopChecker(["abc"])
    assert checker.find("abc xx", new_from=5) is None
    match = checker.find("xx abc", new_from=5)
    assert match is not None and (match.stop, match.text_end) == ("abc", 3)
