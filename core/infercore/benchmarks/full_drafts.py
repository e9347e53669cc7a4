"""``bench_ngram_full``: a benchmark-only speculative method that always drafts ``k`` tokens.

With random weights the n-gram proposer drafts only where the target happens to repeat itself, so a
benchmark at a forced acceptance rate would measure few draft tokens. This method runs the n-gram
lookup as usual and tops each row's drafts up to the allowed count by repeating its last token, so every
step verifies ``k`` drafts per row and pays the proposer's real host cost. The benchmarks register it in
their own process (:func:`register_full_drafts`); nothing else does.
"""

from __future__ import annotations

import numpy as np

from infercore.plugins.hookspecs import RegisterFn, hookimpl
from infercore.plugins.manager import get_plugin_manager
from infercore.spec_decode.ngram import NgramProposer
from infercore.spec_decode.proposer import Drafts

METHOD = "bench_ngram_full"


class FullNgramProposer(NgramProposer):
    """N-gram drafts, topped up to ``num_drafts[b]`` with the row's last token."""

    def propose(self, *, token_ids: np.ndarray, num_tokens: np.ndarray, num_drafts: np.ndarray) -> Drafts:
        found = super().propose(token_ids=token_ids, num_tokens=num_tokens, num_drafts=num_drafts)
        width = found.token_ids.shape[1]
        last = token_ids[np.arange(len(num_tokens)), num_tokens - 1].astype(np.int32)
        columns = np.arange(width)
        filler = (columns >= found.num_drafts[:, None]) & (columns < num_drafts[:, None])
        tokens = np.where(filler, last[:, None], found.token_ids)
        return Drafts(tokens, num_drafts.astype(np.int32))


class _FullDraftsPlugin:
    """The benchmark's own plugin: registers :class:`FullNgramProposer`."""

    INFERCORE_PLUGIN_API = (1, 6)

    @hookimpl
    def register_speculative_methods(self, register: RegisterFn) -> None:
        register(METHOD, "infercore.benchmarks.full_drafts:FullNgramProposer", needs_model=False)


def register_full_drafts() -> None:
    """Make ``bench_ngram_full`` known to this process's plugin manager (once)."""
    manager = get_plugin_manager()
    if METHOD not in manager.registry("speculative_method").names():
        manager.register_module(_FullDraftsPlugin(), "bench_full_drafts", "infercore", "0")
