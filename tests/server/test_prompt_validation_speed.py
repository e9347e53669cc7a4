"""Token-id prompts are validated in C-level passes: a long prompt costs less than one Python loop over
its ids, and every refusal still names the offending id and position."""

from __future__ import annotations

import random
import time

import pytest

from infercore.frontend.input_processor import InputError, InputProcessor
from infercore.sampling_params import SamplingParams

pytestmark = pytest.mark.serial  # a time bound: runs after the parallel pass, alone

VOCAB = 1000
PROMPT_LEN = 4096
REPEATS = 15


def _fastest_s(*works) -> list[float]:
    """Each work's fastest of REPEATS runs, the works taking turns: a busy machine slows some runs of
    each, not all of one."""
    best = [float("inf")] * len(works)
    for _ in range(REPEATS):
        for i, work in enumerate(works):
            start = time.perf_counter()
            work()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def _processor() -> InputProcessor:
    return InputProcessor(None, 2 * PROMPT_LEN, VOCAB, 20, 0, [0])


def test_long_prompt_costs_less_than_one_python_pass() -> None:
    processor, params = _processor(), SamplingParams(max_tokens=4)
    ids = [random.Random(0).randrange(VOCAB) for _ in range(PROMPT_LEN)]
    processor.process("warm", {"prompt_token_ids": ids}, params)
    one_pass, validate = _fastest_s(lambda: [0 <= t < VOCAB for t in ids],
                                    lambda: processor.process("r", {"prompt_token_ids": ids}, params))
    assert validate < one_pass, f"validating {PROMPT_LEN} ids took {validate * 1e6:.0f} us, one pass {one_pass * 1e6:.0f} us"


class TokenInt(int):
    """An int subclass (an IntEnum-like id): still a token id."""


@pytest.mark.parametrize(("prompt", "message"), [
    ([1, True], "list of integer token ids"), ([1, 2.0], "list of integer token ids"),
    ([3, "4"], "list of integer token ids"), ([5, 3, VOCAB], f"token id {VOCAB} at position 2"),
    ([-1, 3], "token id -1 at position 0"), ([], "empty"),
])
def test_bad_ids_are_refused_by_name(prompt, message) -> None:
    with pytest.raises(InputError, match=message):
        _processor().process("r", {"prompt_token_ids": prompt}, SamplingParams(max_tokens=4))


def test_int_subclasses_and_tuples_are_token_ids() -> None:
    processed = _processor().process("r", {"prompt_token_ids": (TokenInt(7), 8)}, SamplingParams(max_tokens=4))
    assert processed.prompt_token_ids == [7, 8]
