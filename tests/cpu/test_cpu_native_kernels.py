"""The CPU platform's C kernels against the torch code they replace, and the fallback without a compiler."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import torch
from test_cpu_attention import STEPS, expected_output, make_step

from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec
from infercore.ops import reference
from infercore_cpu import kernels, native
from infercore_cpu.attention import TorchPagedAttentionBackend

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler: the CPU kernels are not built")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor, common, heads: int,
            kv_heads: int, head: int, window: int | None) -> torch.Tensor:
    spec = KVCacheSpec(cache.shape[2], kv_heads, head, cache.dtype)
    meta = TorchPagedAttentionBackend.get_builder_cls()(spec, torch.device("cpu"), 16, 256).build(common)
    impl = TorchPagedAttentionBackend.get_impl_cls()(AttentionLayerSpec(
        num_heads=heads, head_size=head, scale=head**-0.5, num_kv_heads=kv_heads, sliding_window=window))
    return impl.forward(q, k, v, cache, meta, torch.empty_like(q))


@pytest.mark.parametrize("window", [None, 7, 40])
@pytest.mark.parametrize("name", ["pure decode", "mixed, decodes not first", "many decodes and a prefill"])
def test_decode_kernel_matches_torch_path_and_dense(name: str, window: int | None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from test_cpu_attention import HEAD, HEADS, KV_HEADS

    q, k, v, cache, common, contexts = make_step(STEPS[name])
    native_out = _attend(q, k, v, cache.clone(), common, HEADS, KV_HEADS, HEAD, window)
    monkeypatch.setenv("INFERCORE_CPU_KERNELS", "0")
    torch_out = _attend(q, k, v, cache.clone(), common, HEADS, KV_HEADS, HEAD, window)
    torch.testing.assert_close(native_out, torch_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(native_out, expected_output(q, common, contexts, window), atol=1e-5, rtol=1e-5)


def _random_decode_step(lens: list[int], block: int, heads: int, kv_heads: int, head: int, dtype: torch.dtype,
                        seed: int = 0):
    """Decode-only step over a shuffled cache: q [n, heads, head] (a column slice of a wider QKV row)."""
    from infercore.attention import CommonAttentionMetadata

    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-s // block) for s in lens) + 8
    cache = torch.randn(2, num_blocks, block, kv_heads, head, generator=gen).to(dtype)
    order = torch.randperm(num_blocks - 1, generator=gen) + 1
    width = max(-(-s // block) for s in lens) + 2
    table = torch.zeros(len(lens), width, dtype=torch.int32)
    used = 0
    slots = []
    for i, seq_len in enumerate(lens):
        count = -(-seq_len // block)
        table[i, :count] = order[used:used + count].to(torch.int32)
        used += count
        slots.append(int(table[i, (seq_len - 1) // block]) * block + (seq_len - 1) % block)
    n = len(lens)
    qkv = torch.randn(n, (heads + 2 * kv_heads) * head, generator=gen).to(dtype)
    q = qkv[:, : heads * head].view(n, heads, head)
    k = qkv[:, heads * head:(heads + kv_heads) * head].view(n, kv_heads, head)
    v = qkv[:, (heads + kv_heads) * head:].view(n, kv_heads, head)
    qsl = torch.arange(n + 1, dtype=torch.int32)
    seq = torch.tensor(lens, dtype=torch.int32)
    common = CommonAttentionMetadata(
        num_reqs=n, num_actual_tokens=n, max_query_len=1, max_seq_len=max(lens), query_start_loc=qsl,
        seq_lens=seq, block_table=table, slot_mapping=torch.tensor(slots, dtype=torch.int64),
        query_start_loc_cpu=qsl, seq_lens_cpu=seq)
    return q, k, v, cache, common


@pytest.mark.parametrize("window", [None, 21])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize(("heads", "kv_heads", "head", "block"),
                         [(8, 2, 64, 16), (4, 2, 128, 16), (6, 6, 40, 32), (12, 1, 24, 8)])
def test_decode_kernel_gqa_dtypes_and_odd_lengths(dtype: torch.dtype, tol: float, heads: int, kv_heads: int,
                                                  head: int, block: int, window: int | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Head sizes 64 and 128 take the kernel's inlined float32 loops, the others its general ones.
    lens = [1, 2, block - 1, block, block + 1, 3 * block + 5, 77, 130]
    q, k, v, cache, common = _random_decode_step(lens, block, heads, kv_heads, head, dtype)
    native_cache = cache.clone()
    native_out = _attend(q, k, v, native_cache, common, heads, kv_heads, head, window)
    monkeypatch.setenv("INFERCORE_CPU_KERNELS", "0")
    torch_cache = cache.clone()
    torch_out = _attend(q, k, v, torch_cache, common, heads, kv_heads, head, window)
    assert torch.equal(native_cache, torch_cache)  # the KV write is exact
    torch.testing.assert_close(native_out.float(), torch_out.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("shape", [(5, 64), (3, 37), (2, 3, 512), (1, 1)])
def test_norms_and_silu_match_the_references(shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(1)
    x, res = torch.randn(*shape, generator=gen) * 3, torch.randn(*shape, generator=gen)
    w = torch.randn(shape[-1], generator=gen)
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6), atol=1e-6, rtol=1e-5)
    got, expected = kernels.fused_add_rms_norm(x, res, w, 1e-5), reference.fused_add_rms_norm(x, res, w, 1e-5)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    both = torch.cat([x, res * 20], dim=-1)  # large negative and positive gates
    torch.testing.assert_close(kernels.silu_and_mul(both), reference.silu_and_mul(both), atol=1e-5, rtol=1e-5)


def test_strided_rows_and_other_dtypes() -> None:
    gen = torch.Generator().manual_seed(2)
    wide = torch.randn(7, 300, generator=gen)
    x, w = wide[:, 10:138], torch.randn(128, generator=gen)  # rows 300 apart
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(kernels.silu_and_mul(wide[:, :256]), reference.silu_and_mul(wide[:, :256]),
                               atol=1e-6, rtol=1e-5)
    bf = x.to(torch.bfloat16)
    assert torch.equal(kernels.rms_norm(bf, w.to(torch.bfloat16), 1e-6),
                       reference.rms_norm(bf, w.to(torch.bfloat16), 1e-6))


@pytest.mark.parametrize("is_neox", [True, False])
def test_qk_norm_rotary_matches_the_reference(is_neox: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    head, heads, kv_heads, rows = 64, 4, 2, 9
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head, generator=gen)
    angles = torch.outer(torch.arange(100, dtype=torch.float32), torch.rand(head // 2, generator=gen))
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1)
    positions = torch.randint(0, 100, (rows,), generator=gen)
    qw, kw = torch.randn(head, generator=gen), torch.randn(head, generator=gen)
    expected_q, expected_k = reference.qk_norm_rotary(positions, qkv[:, :heads * head].clone(),
                                                      qkv[:, heads * head:(heads + kv_heads) * head].clone(),
                                                      qw, kw, 1e-6, cos_sin, head, is_neox)
    q, k = qkv[:, :heads * head], qkv[:, heads * head:(heads + kv_heads) * head]  # strided views, in place
    kernels.qk_norm_rotary(positions, q, k, qw, kw, 1e-6, cos_sin, head, is_neox)
    torch.testing.assert_close(q, expected_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k, expected_k, atol=1e-5, rtol=1e-5)


def test_no_compiler_falls_back_to_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    from test_cpu_attention import HEAD, HEADS, KV_HEADS

    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("INFERCORE_CACHE_DIR", str(tmp_path / "cache"))
    try:
        with caplog.at_level(logging.INFO, logger="infercore_cpu.native"):
            assert native.library() is None
            assert native.library() is None
        assert sum("torch kernels" in r.getMessage() for r in caplog.records) == 1  # logged once
        x, w = torch.randn(3, 16), torch.randn(16)
        assert torch.equal(kernels.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6))
        assert torch.equal(kernels.silu_and_mul(x), reference.silu_and_mul(x))
        q, k, v, cache, common, contexts = make_step(STEPS["many decodes and a prefill"])
        out = _attend(q, k, v, cache, common, HEADS, KV_HEADS, HEAD, None)
        torch.testing.assert_close(out, expected_output(q, common, contexts, None), atol=1e-5, rtol=1e-5)
    finally:
        monkeypatch.undo()
        native.reset()


def test_concurrent_builds_share_one_cached_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INFERCORE_CACHE_DIR", str(tmp_path))
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(native.build())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in results)
    built = list((tmp_path / "cpu_kernels").iterdir())
    assert len(built) == 1 and built[0].suffix == ".so"  # no temporary files left behind
