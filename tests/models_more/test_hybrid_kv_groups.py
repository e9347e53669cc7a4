"""Gemma 3's sliding and global layers as two KV cache groups, end to end (CPU backend): each layer's
cache is as large as its group's pool, the sliding layers hold only their window of each request while
it runs, and a memory budget holds more primary blocks than one pool serving every layer would.
Tokens against HF transformers are the oracle test's (``test_dense_oracle.py``, the same engine)."""

from __future__ import annotations

from dense_cases import ENGINE_ARGS

from infercore import LLM, SamplingParams
from infercore.scheduler.hybrid_kv_cache_manager import HybridKVCacheManager

WINDOW = 8  # the tiny Gemma 3's sliding window; layer 2 of 3 is global


def test_gemma3_runs_a_global_and_a_sliding_group_that_holds_only_its_window(case_folder) -> None:
    # Two seats and 32-token steps make the sliding pool (9 blocks) smaller than the block ids the global
    # group hands out, so a layer reading the other group's table would leave its cache.
    llm = LLM(model=str(case_folder("gemma3")), **{**ENGINE_ARGS, "max_num_seqs": 2, "max_num_batched_tokens": 32})
    core = llm.llm_engine.engine_core
    runner = core.executor.runner
    kv = core.scheduler.kv_cache_manager
    assert isinstance(kv, HybridKVCacheManager)
    layout = core.kv_layout
    assert layout is runner.kv_layout and layout.windows == [None, WINDOW] and layout.layer_groups == [1, 1, 0]
    sizes = [group.pool.num_blocks for group in kv.groups]
    assert layout.pool_sizes == sizes == [160, 9]
    per_block = runner.kv_caches[2].numel() // sizes[0]
    assert [cache.numel() // per_block for cache in runner.kv_caches] == [sizes[1], sizes[1], sizes[0]]

    held: list[tuple[int, int, int]] = []  # per allocation: new tokens, blocks held in each group
    most_id = [0]  # the largest block id of the global group
    allocate = kv.allocate_slots

    def watching(request, num_new_tokens, new_computed_blocks=None):
        ids = allocate(request, num_new_tokens, new_computed_blocks)
        held.append((num_new_tokens, *(sum(1 for b in g.get_blocks(request) if b.block_id) for g in kv.groups)))
        most_id[0] = max(most_id[0], *kv.groups[0].get_block_ids(request))
        return ids

    kv.allocate_slots = watching
    prompts = [{"prompt_token_ids": list(range(3 + i, 60 + 7 * i))} for i in range(3)]
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == 40 for o in outputs)
    bs = runner.block_size
    longest = max(len(p["prompt_token_ids"]) for p in prompts) + 40
    assert max(primary for _, primary, _ in held) == -(-longest // bs)
    assert most_id[0] >= sizes[1]  # past the end of a sliding layer's cache
    # A query reads WINDOW - 1 earlier keys: with a step's 32 new tokens at most 4 blocks of 16, and
    # 2 for a decode.
    assert max(sliding for _, _, sliding in held) <= 4
    assert max(sliding for new, _, sliding in held if new == 1) <= 2
    assert all(g.num_free_blocks == g.num_usable_blocks for g in kv.groups)


def test_a_memory_budget_holds_more_global_blocks_with_a_small_sliding_pool(case_folder) -> None:
    args = {**ENGINE_ARGS, "max_model_len": 1024, "num_gpu_blocks_override": None}
    probe = LLM(model=str(case_folder("gemma3")), **{**args, "num_gpu_blocks_override": 80})
    runner = probe.llm_engine.engine_core.executor.runner
    page = runner.kv_spec.page_size_bytes
    bound = runner.kv_setup.layout(10**6).pool_sizes[1]
    budget = 1024 * page
    llm = LLM(model=str(case_folder("gemma3")), **{**args, "kv_cache_memory_bytes": budget})
    kv = llm.llm_engine.engine_core.scheduler.kv_cache_manager
    primary, sliding = (g.pool.num_blocks for g in kv.groups)
    # One global layer, two sliding layers of `bound` blocks; one pool for all three would hold 341.
    assert sliding == bound and primary == 1024 - 2 * bound
    assert primary > 1.9 * (budget // (3 * page))


def test_disabling_hybrid_groups_gives_one_table_and_the_same_tokens(case_folder) -> None:
    prompts = [{"prompt_token_ids": list(range(3, 50))}, {"prompt_token_ids": list(range(9, 30))}]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    runs = {}
    for disable in (False, True):
        llm = LLM(model=str(case_folder("gemma3")), **ENGINE_ARGS, disable_hybrid_kv_cache_manager=disable)
        kv = llm.llm_engine.engine_core.scheduler.kv_cache_manager
        assert isinstance(kv, HybridKVCacheManager) != disable
        runs[disable] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    assert runs[True] == runs[False]
    assert llm.llm_engine.engine_core.kv_layout.windows == [None]
