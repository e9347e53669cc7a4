"""SingleKVCacheManager: allocation, prefix hits, sharing, salts, freeing."""

from sched_fakes import make_request

from infercore.scheduler.single_kv_cache_manager import SingleKVCacheManager


def _schedule(kv: SingleKVCacheManager, request, num_new=None):
    """Allocate a waiting request the way the scheduler does."""
    hit, num_hit = kv.get_computed_blocks(request)
    num_new = request.num_tokens - num_hit if num_new is None else num_new
    ids = kv.allocate_slots(request, num_new, hit)
    assert ids is not None
    request.num_computed_tokens = num_hit
    return ids, num_hit


def test_allocate_rounds_up_and_returns_only_new_blocks():
    kv = SingleKVCacheManager(num_blocks=10, block_size=4)
    req = make_request("a", 6)
    ids, _ = _schedule(kv, req)
    assert len(ids) == 2 and kv.num_free_blocks == 7
    req.num_computed_tokens = 6
    assert kv.allocate_slots(req, 2) == []
    req.num_computed_tokens = 8
    new = kv.allocate_slots(req, 1)
    assert len(new) == 1 and kv.get_block_ids(req) == ids + new
    assert abs(kv.usage - 3 / 9) < 1e-9


def test_allocation_failure_changes_nothing():
    kv = SingleKVCacheManager(num_blocks=4, block_size=4)
    req = make_request("a", 20)
    assert kv.allocate_slots(req, 20, []) is None
    assert kv.num_free_blocks == 3 and kv.get_block_ids(req) == []


def test_prefix_hit_shares_blocks_and_leaves_one_token():
    kv = SingleKVCacheManager(num_blocks=20, block_size=4)
    prompt = list(range(10, 20))  # 10 tokens: 2 full blocks
    a = make_request("a", prompt)
    a_ids, hit = _schedule(kv, a)
    assert hit == 0
    b = make_request("b", prompt)
    b_ids, hit = _schedule(kv, b)
    assert hit == 8 and b_ids[:2] == a_ids[:2] and b_ids[2] != a_ids[2]
    assert [blk.ref_cnt for blk in kv.get_blocks(b)] == [2, 2, 1]
    # A prompt that is an exact number of blocks still computes its last token.
    c = make_request("c", prompt[:8])
    _, hit = _schedule(kv, c)
    assert hit == 4
    assert kv.prefix_cache_queries == 28 and kv.prefix_cache_hits == 12


def test_cache_salt_isolates():
    kv = SingleKVCacheManager(num_blocks=20, block_size=4)
    prompt = list(range(12))
    _schedule(kv, make_request("a", prompt, cache_salt="alice"))
    assert _schedule(kv, make_request("b", prompt, cache_salt="bob"))[1] == 0
    assert _schedule(kv, make_request("c", prompt))[1] == 0
    assert _schedule(kv, make_request("d", prompt, cache_salt="alice"))[1] == 8


def test_freed_blocks_stay_cached_until_evicted_lru():
    kv = SingleKVCacheManager(num_blocks=9, block_size=4)  # 8 usable
    a, b = make_request("a", list(range(100, 109))), make_request("b", list(range(200, 209)))
    for req in (a, b):
        _schedule(kv, req)
        req.num_computed_tokens = req.num_tokens
    kv.free(a)
    kv.free(b)
    assert kv.num_free_blocks == 8
    # Eviction takes the uncached blocks first, then a's cached blocks (freed before b's),
    # the tail of a sequence before its head.
    kv.pool.allocate(5)
    assert kv.get_computed_blocks(make_request("a2", list(range(100, 109))))[1] == 4
    kv.pool.allocate(1)
    assert kv.get_computed_blocks(make_request("a3", list(range(100, 109))))[1] == 0
    assert kv.get_computed_blocks(make_request("b2", list(range(200, 209))))[1] == 8


def test_free_uncaches_blocks_that_were_never_computed():
    kv = SingleKVCacheManager(num_blocks=20, block_size=4)
    prompt = list(range(16))
    a = make_request("a", prompt)
    _schedule(kv, a)  # blocks cached for the coming step...
    kv.free(a)  # ...which never ran (num_computed_tokens is 0)
    assert _schedule(kv, make_request("b", prompt))[1] == 0


def test_prompt_logprobs_skip_the_cache():
    kv = SingleKVCacheManager(num_blocks=20, block_size=4)
    _schedule(kv, make_request("a", list(range(12))))
    assert kv.get_computed_blocks(make_request("b", list(range(12)), prompt_logprobs=1)) == ([], 0)


def test_caching_disabled():
    kv = SingleKVCacheManager(num_blocks=20, block_size=4, enable_caching=False)
    a = make_request("a", list(range(12)))
    _schedule(kv, a)
    assert _schedule(kv, make_request("b", list(range(12))))[1] == 0
    assert a.block_hashes == []
