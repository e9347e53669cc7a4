"""Speculative methods are a plugin point: core registers n-gram through the hook, a plugin adds its own."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import infercore.plugin_api as api
from infercore.config import ConfigError, InfercoreConfig
from infercore.plugins.manager import PluginManager, get_plugin_manager, reset_plugin_manager
from infercore.spec_decode.ngram import NgramProposer


class RepeatLastProposer(api.Proposer):
    """Proposes the row's last token again (a throwaway proposer built only from the facade)."""

    def propose(self, *, token_ids: np.ndarray, num_tokens: np.ndarray, num_drafts: np.ndarray) -> api.Drafts:
        width = int(num_drafts.max())
        last = token_ids[np.arange(len(num_tokens)), num_tokens - 1]
        tokens = np.where(np.arange(width) < num_drafts[:, None], last[:, None], -1).astype(np.int32)
        return api.Drafts(tokens, num_drafts.astype(np.int32))


class _RepeatPlugin:
    INFERCORE_PLUGIN_API = (1, 6)

    @api.hookimpl
    def register_speculative_methods(self, register: api.RegisterFn) -> None:
        register("repeat_last", "test_speculative_plugin_point:RepeatLastProposer")
        register("tiny_draft", "test_speculative_plugin_point:RepeatLastProposer", needs_model=True)


@pytest.fixture
def with_repeat_plugin() -> Iterator[PluginManager]:
    manager = PluginManager()
    manager.load_entry_points()
    manager.register_module(_RepeatPlugin(), "repeat", "infercore-repeat", "0.1")
    reset_plugin_manager(manager)
    yield manager
    reset_plugin_manager(None)


def test_core_registers_ngram_through_the_hook() -> None:
    registration = get_plugin_manager().registry("speculative_method").get("ngram")
    assert registration.plugin == "builtin" and registration.metadata == {"needs_model": False}
    assert registration.load() is NgramProposer


def test_facade_exports_the_proposer_contract() -> None:
    assert api.API_VERSION >= (1, 6)
    for name in ("Proposer", "ProposerSpec", "Drafts", "SpeculativeConfig"):
        assert name in api.__all__
    assert "num_tokens" in api.Proposer.__doc__ and "Drafts" in api.Proposer.__doc__
    assert "accept_drafts" in api.CUSTOM_OPS


def test_a_plugin_method_is_configured_and_built(with_repeat_plugin: PluginManager) -> None:
    config = InfercoreConfig.from_kwargs(speculative_config={"method": "repeat_last", "num_speculative_tokens": 2})
    spec = config.speculative.speculative_config
    cls = with_repeat_plugin.registry("speculative_method").load(spec.method)
    proposer = cls(api.ProposerSpec(config=spec, vocab_size=100, max_num_seqs=8, max_model_len=64))
    drafts = proposer.propose(token_ids=np.array([[1, 2, 3], [4, 5, 0]]), num_tokens=np.array([3, 2]),
                              num_drafts=np.array([2, 1]))
    assert drafts.token_ids.tolist() == [[3, 3], [5, -1]] and drafts.num_drafts.tolist() == [2, 1]


def test_a_plugin_method_that_needs_a_model_is_refused_without_one(with_repeat_plugin: PluginManager) -> None:
    with pytest.raises(ConfigError, match="'tiny_draft' proposes with a draft model"):
        InfercoreConfig.from_kwargs(speculative_config={"method": "tiny_draft", "num_speculative_tokens": 2})
    with pytest.raises(ConfigError, match="repeat_last, tiny_draft"):
        InfercoreConfig.from_kwargs(speculative_config={"method": "unknown", "num_speculative_tokens": 2})
