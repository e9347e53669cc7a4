"""The n-gram proposer: the latest earlier occurrence of the longest matching suffix, across rows at once."""

from __future__ import annotations

import numpy as np
import pytest

from infercore.spec_decode.ngram import NgramProposer
from infercore.spec_decode.proposer import ProposerSpec
from infercore.speculative_config import SpeculativeConfig


def _proposer(k: int = 3, low: int = 1, high: int = 3) -> NgramProposer:
    config = SpeculativeConfig(method="ngram", num_speculative_tokens=k, prompt_lookup_min=low, prompt_lookup_max=high)
    return NgramProposer(ProposerSpec(config, vocab_size=1000, max_num_seqs=64, max_model_len=4096))


def _propose(proposer: NgramProposer, histories: list[list[int]], k: int | list[int] = 3,
             width: int | None = None, dtype: type = np.int32) -> list[list[int]]:
    """Drafts per row, from histories laid out as the runner's table (garbage after each history)."""
    width = width or max(len(h) for h in histories) + 2
    table = np.full((len(histories), width), 777, dtype=dtype)
    for row, history in enumerate(histories):
        table[row, : len(history)] = history
    num_drafts = np.array(k if isinstance(k, list) else [k] * len(histories))
    drafts = proposer.propose(token_ids=table, num_tokens=np.array([len(h) for h in histories]),
                              num_drafts=num_drafts)
    assert drafts.token_ids.shape == (len(histories), int(num_drafts.max()))
    assert drafts.token_ids.dtype == np.int32
    out = []
    for row in range(len(histories)):
        count = int(drafts.num_drafts[row])
        assert (drafts.token_ids[row, count:] == -1).all()
        out.append(drafts.token_ids[row, :count].tolist())
    return out


def _brute_force(history: list[int], k: int, low: int, high: int) -> list[int]:
    """The definition, one row at a time."""
    length = len(history)
    for n in range(min(high, length - 1), low - 1, -1):
        suffix = history[length - n:]
        for start in range(length - n - 1, -1, -1):
            if history[start: start + n] == suffix:
                return history[start + n: start + n + k]
    return []


def test_drafts_are_the_tokens_after_the_latest_earlier_match() -> None:
    assert _propose(_proposer(), [[1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3]]) == [[5, 6, 1]]


def test_the_longest_suffix_wins_over_a_later_shorter_one() -> None:
    # Suffix (7, 8, 9) occurs at the start; (8, 9) alone occurs later. The 3-gram decides.
    assert _propose(_proposer(), [[7, 8, 9, 1, 2, 0, 8, 9, 4, 5, 7, 8, 9]]) == [[1, 2, 0]]


def test_no_match_and_short_histories_give_no_drafts() -> None:
    proposer = _proposer(low=2, high=3)
    assert _propose(proposer, [[1, 2, 3, 4, 5], [5], [], [4, 4], [3, 1, 2, 3]]) == [[], [], [], [], []]
    assert _propose(proposer, [[4, 4, 4]]) == [[4]]  # (4, 4) ends earlier at index 1; only one token follows


def test_the_suffix_itself_is_no_match() -> None:
    assert _propose(_proposer(), [[5, 6, 7, 8]]) == [[]]


def test_a_match_at_the_end_offers_the_tokens_left() -> None:
    # The latest earlier (1, 2) ends one token before the suffix: only (1, 2)'s overlap follows it.
    assert _propose(_proposer(k=5), [[9, 1, 2, 1, 2]]) == [[1, 2]]
    assert _propose(_proposer(k=5), [[1, 2, 3, 1, 2]]) == [[3, 1, 2]]


def test_k_larger_than_the_continuation_and_rows_asking_fewer() -> None:
    # Row 1's latest earlier (8, 8) ends just before the suffix's last token: one token follows it.
    histories = [[1, 2, 3, 1, 2], [8, 8, 8, 8, 8, 8], [1, 2, 3, 4, 1, 2], [5, 6, 7, 8, 5, 6]]
    assert _propose(_proposer(k=6, high=2), histories, k=[6, 2, 0, 1]) == [[3, 1, 2], [8], [], [7]]


def test_int64_tables_and_rows_shorter_than_the_table() -> None:
    histories = [[3, 4, 3], [1, 2, 1, 2, 1, 2, 1]]
    assert _propose(_proposer(), histories, width=40, dtype=np.int64) == [[4, 3], [2, 1]]


@pytest.mark.parametrize(("low", "high"), [(1, 1), (1, 3), (2, 4), (3, 5)])
def test_matches_the_definition_on_random_histories(low: int, high: int) -> None:
    rng = np.random.default_rng(low * 10 + high)
    histories = [rng.integers(0, 4, rng.integers(0, 40)).tolist() for _ in range(300)]
    k = 4
    expected = [_brute_force(h, k, low, high) for h in histories]
    assert _propose(_proposer(k=k, low=low, high=high), histories, k=k) == expected


def test_no_rows() -> None:
    proposer = _proposer()
    drafts = proposer.propose(token_ids=np.zeros((0, 8), dtype=np.int32), num_tokens=np.zeros(0, dtype=np.int64),
                              num_drafts=np.zeros(0, dtype=np.int64))
    assert drafts.token_ids.shape == (0, 0) and drafts.num_drafts.shape == (0,)
