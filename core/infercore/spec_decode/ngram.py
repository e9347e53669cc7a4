"""N-gram (prompt lookup) proposer: drafts are the tokens that followed the last time the history's
suffix occurred, in the prompt or the output.

For each row, the suffix of ``n`` tokens is looked up earlier in the row's history, for ``n`` from
``prompt_lookup_max`` down to ``prompt_lookup_min``; the longest suffix that occurs wins, and among its
occurrences the most recent one. The tokens after that occurrence (up to ``k``, fewer when the history
ends first) are the drafts.

The search is vectorised across rows. A match is found by its last token ``e``: the suffix of length
``n`` ends at ``e`` when ``history[e - m] == history[L - 1 - m]`` for every ``m < n``. One dense
comparison over the batch finds the positions equal to each row's last token; each longer suffix then
only filters those candidates by one more comparison, so the cost is one pass over the histories plus
work proportional to the candidates, with no Python loop over rows or tokens.
"""

from __future__ import annotations

import numpy as np

from infercore.spec_decode.proposer import PAD_TOKEN_ID, Drafts, Proposer, ProposerSpec


class NgramProposer(Proposer):
    """Prompt-lookup drafts from each row's own prompt and output (no model, no device work)."""

    def __init__(self, spec: ProposerSpec) -> None:
        super().__init__(spec)
        self.min_n, self.max_n = spec.config.lookup_range

    def propose(self, *, token_ids: np.ndarray, num_tokens: np.ndarray, num_drafts: np.ndarray) -> Drafts:
        """Drafts from the most recent earlier occurrence of each row's longest matching suffix."""
        num_rows = len(num_tokens)
        width = int(num_drafts.max()) if num_rows else 0
        drafts = Drafts.empty(num_rows, width)
        # A match needs its suffix and, before the last token, room for the occurrence that ends earlier.
        rows = np.flatnonzero((num_drafts > 0) & (num_tokens > self.min_n))
        if not len(rows):
            return drafts
        lengths = num_tokens[rows].astype(np.int64)
        match_end = self._latest_match_ends(token_ids, rows, lengths)
        found = match_end >= 0
        rows, lengths, start = rows[found], lengths[found], match_end[found] + 1
        if not len(rows):
            return drafts
        count = np.minimum(num_drafts[rows], lengths - start)
        offsets = np.arange(width)
        columns = np.minimum(start[:, None] + offsets, token_ids.shape[1] - 1)
        tokens = token_ids[rows[:, None], columns]
        drafts.token_ids[rows] = np.where(offsets < count[:, None], tokens, PAD_TOKEN_ID)
        drafts.num_drafts[rows] = count
        return drafts

    def _latest_match_ends(self, token_ids: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """[R] per row of ``rows``: where the latest earlier occurrence of its longest matching suffix
        (``min_n`` to ``max_n`` tokens) ends, or -1 when no suffix of ``min_n`` tokens occurs earlier."""
        span = int(lengths.max()) - 1  # an occurrence ends at most at L - 2, before the suffix's last token
        history = token_ids[:, :span] if len(rows) == len(token_ids) else token_ids[rows, :span]
        last = token_ids[rows, lengths - 1]
        # Row-major flat indices: each row's candidates come in increasing order of their end.
        cand_row, cand_end = np.divmod(np.flatnonzero(history == last[:, None]), span)
        keep = cand_end < lengths[cand_row] - 1  # a shorter row's garbage after its history
        cand_row, cand_end = cand_row[keep], cand_end[keep]
        source, suffix_end = rows[cand_row], lengths[cand_row] - 1
        best = np.full(len(rows), -1, dtype=np.int64)
        for n in range(1, self.max_n + 1):
            if n > 1:
                m = n - 1
                # A candidate too close to the start reads a wrapped (negative) index, masked out by its bound.
                keep = (cand_end >= m) & (token_ids[source, cand_end - m] == token_ids[source, suffix_end - m])
                cand_row, cand_end, source, suffix_end = cand_row[keep], cand_end[keep], source[keep], suffix_end[keep]
            if not len(cand_row):
                break
            if n >= self.min_n:
                latest = np.empty(len(cand_row), dtype=bool)  # each row's last candidate: its latest end
                np.not_equal(cand_row[1:], cand_row[:-1], out=latest[:-1])
                latest[-1] = True
                best[cand_row[latest]] = cand_end[latest]
        return best
