"""The KV cache layout is one object made by the worker: its groups, pools and encoding of block ids are
read by the scheduler (which builds its manager from it) and travel over the worker RPC unchanged."""

from __future__ import annotations

from infercore.distributed.rpc_codec import decode_reply, decode_value, encode_reply
from infercore.kv_cache.groups import KVCacheGroup, kv_cache_layout
from infercore.scheduler.hybrid_kv_cache_manager import HybridKVCacheManager
from infercore.scheduler.kv_cache_manager import make_kv_cache_manager
from infercore.scheduler.single_kv_cache_manager import SingleKVCacheManager
from infercore.wire.kv_layout import KVCacheLayout, interleave


def _gemma_like() -> KVCacheLayout:
    groups = [KVCacheGroup(None, (2,)), KVCacheGroup(8, (0, 1))]
    return kv_cache_layout(groups, 500, block_size=4, max_num_seqs=8, max_num_batched_tokens=32, page_bytes=10,
                           dtype="bfloat16")


def test_the_layout_states_pools_windows_layers_and_bytes() -> None:
    layout = _gemma_like()
    assert layout.num_groups == 2 and layout.num_blocks == 500
    assert layout.windows == [None, 8] and layout.pool_sizes == [500, 41]
    assert layout.layer_groups == [1, 1, 0]
    assert layout.total_bytes == 10 * (1 * 500 + 2 * 41)
    assert "500 / 41 blocks" in layout.describe()


def test_block_ids_split_back_into_their_groups() -> None:
    layout = _gemma_like()
    assert layout.split_block_ids(interleave([[1, 2, 3], [7, 8, 9]])) == [[1, 2, 3], [7, 8, 9]]


def test_the_scheduler_s_manager_follows_the_layout() -> None:
    single = kv_cache_layout([KVCacheGroup(6, (0, 1))], 20, block_size=4, max_num_seqs=2, max_num_batched_tokens=8)
    manager = make_kv_cache_manager(single, enable_caching=True)
    assert isinstance(manager, SingleKVCacheManager) and manager.sliding_window == 6
    hybrid = make_kv_cache_manager(_gemma_like(), enable_caching=True)
    assert isinstance(hybrid, HybridKVCacheManager)
    assert [group.pool.num_blocks for group in hybrid.groups] == [500, 41]


def test_the_layout_crosses_the_worker_rpc_as_data() -> None:
    from infercore.worker.worker import Worker

    layout = _gemma_like()
    reply = decode_reply(encode_reply(0, layout))
    assert decode_value(Worker, "initialize_kv_cache", reply) == layout
