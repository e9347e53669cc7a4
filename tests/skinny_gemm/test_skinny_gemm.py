"""The skinny GEMM (through Triton's interpreter) against ``F.linear``: every row bucket, odd shapes,
bias, row-strided ``x``, split K and both inner products; its launch defaults; and the ``linear`` op's
choice between the kernel and ``F.linear``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import triton

from infercore.plugins.manager import get_plugin_manager
from infercore_triton import skinny_gemm as sg

N, K = 37, 77
BF16_BOUND = 1e-2


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


def _inputs(m: int, dtype: torch.dtype, seed: int = 0, n: int = N, k: int = K,
            row_stride: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    # A row-strided x is a column slice of a wider activation, as a fused projection's output is.
    wide = torch.randn(m, row_stride or k, generator=gen).to(dtype)
    x = wide[:, 3:3 + k] if row_stride else wide
    return x, torch.randn(n, k, generator=gen).to(dtype), torch.randn(n, generator=gen).to(dtype)


@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
def test_float32_matches_f_linear_with_bias_and_strided_rows(m: int) -> None:
    x, w, b = _inputs(m, torch.float32, seed=m, row_stride=K + 11)
    assert x.stride(0) == K + 11
    assert _rel_err(sg.skinny_gemm(x, w, b), F.linear(x, w, b)) < 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_half_precision_matches_a_float32_product_of_the_same_inputs(m: int, dtype: torch.dtype) -> None:
    x, w, b = _inputs(m, dtype, seed=10 + m)
    out = sg.skinny_gemm(x, w, b)
    assert out.dtype == dtype and out.shape == (m, N)
    assert _rel_err(out, F.linear(x.float(), w.float(), b.float())) < BF16_BOUND


CONFIGS = {
    "split-k-elementwise": sg.SkinnyConfig(block_n=4, block_k=16, split_k=3, dot=False),
    "split-k-dot": sg.SkinnyConfig(block_n=16, block_k=16, split_k=2, dot=True),
    "one-row-tiles": sg.SkinnyConfig(block_n=1, block_k=128, dot=False),
    "no-prefetch": sg.SkinnyConfig(block_n=8, block_k=32, split_k=2, dot=False, prefetch=False),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("m", [1, 5])
def test_explicit_configs_compute_the_same_product(name: str, m: int) -> None:
    x, w, b = _inputs(m, torch.float32, seed=20 + m, row_stride=K + 5)
    assert _rel_err(sg.skinny_gemm(x, w, b, CONFIGS[name]), F.linear(x, w, b)) < 1e-4
    assert _rel_err(sg.skinny_gemm(x, w, None, CONFIGS[name]), F.linear(x, w)) < 1e-4


@pytest.mark.parametrize("dot", [False, True])
def test_bfloat16_split_k_stays_within_one_rounding_of_the_float32_product(dot: bool) -> None:
    x, w, b = _inputs(2, torch.bfloat16, seed=30, n=24, k=256)
    out = sg.skinny_gemm(x, w, b, sg.SkinnyConfig(block_n=16, block_k=32, split_k=4, dot=dot))
    # The partials are summed in float32 and rounded once; the interpreter truncates where the GPU
    # rounds to nearest, so one unit in the last of bfloat16's 8 significant bits.
    assert _rel_err(out, F.linear(x.float(), w.float(), b.float())) <= 2.0**-7


W_GPU_SHAPES = [(4096, 1024), (6144, 1024), (1024, 2048), (1024, 3072), (151936, 1024),
                (6144, 4096), (24576, 4096), (4096, 4096), (4096, 12288)]


@pytest.mark.parametrize("m", [1, 2, 4, 8, 16])
def test_defaults_fill_the_gpu_and_stay_launchable(m: int) -> None:
    for n, k in W_GPU_SHAPES:
        cfg = sg.default_config(m, n, k, num_sms=132)
        programs = triton.cdiv(n, cfg.block_n) * cfg.split_k
        assert programs >= 2 * 132, (m, n, k, cfg)
        assert cfg.block_k * cfg.split_k <= max(k, cfg.block_k), (m, n, k, cfg)
        if cfg.uses_dot(m):
            assert m > sg.ELEMENTWISE_MAX_M and min(cfg.block_n, cfg.block_k) >= 16
        else:
            assert cfg.block_n * cfg.block_k * sg.m_bucket(m) <= 8192


def test_tuned_entries_take_precedence_by_row_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    tuned = sg.SkinnyConfig(block_n=2, block_k=64, num_warps=2, split_k=2)
    monkeypatch.setitem(sg.TUNED, (4, 1024, 2048), tuned)
    assert sg.config_for(3, 1024, 2048) is tuned and sg.config_for(4, 1024, 2048) is tuned
    assert sg.config_for(2, 1024, 2048) == sg.default_config(2, 1024, 2048)


def test_bad_settings_and_inputs_are_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="power of two"):
        sg.SkinnyConfig(block_n=3, block_k=64)
    with pytest.raises(ValueError, match="split_k"):
        sg.SkinnyConfig(block_n=4, block_k=64, split_k=0)
    x, w, b = _inputs(2, torch.float32)
    with pytest.raises(ValueError, match="at least 16"):
        sg.skinny_gemm(x, w, b, sg.SkinnyConfig(block_n=4, block_k=64, dot=True))
    with pytest.raises(ValueError, match="use F.linear"):
        sg.skinny_gemm(torch.randn(17, K), w)
    with pytest.raises(ValueError, match=r"\[N, K\]"):
        sg.skinny_gemm(torch.randn(2, K + 1), w)
    with pytest.raises(ValueError, match="one dtype"):
        sg.skinny_gemm(x.double(), w.double())
    with pytest.raises(ValueError, match="contiguous weight"):
        sg.skinny_gemm(x, torch.randn(K, N).t())
    with pytest.raises(ValueError, match="bias"):
        sg.skinny_gemm(x, w, torch.randn(N + 1))


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lets ``linear`` pick the kernel for CPU tensors too (the interpreter runs it) and records the rows
    of every product it sends there."""
    calls: list[int] = []
    kernel = sg.skinny_gemm

    def recording(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        calls.append(x.shape[0])
        return kernel(x, weight, bias)

    monkeypatch.setattr(sg, "_KERNEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(sg, "skinny_gemm", recording)
    return calls


@pytest.mark.parametrize("m", [1, sg.SKINNY_MAX_M])
def test_linear_sends_decode_batches_to_the_kernel(kernel_calls: list[int], m: int) -> None:
    x, w, b = _inputs(m, torch.bfloat16, seed=40 + m, row_stride=K + 3)
    out = sg.linear(x, w, b)
    assert kernel_calls == [m]
    assert _rel_err(out, F.linear(x.float(), w.float(), b.float())) < BF16_BOUND


def test_linear_falls_back_to_f_linear_outside_the_kernels_reach(kernel_calls: list[int]) -> None:
    x, w, b = _inputs(sg.SKINNY_MAX_M + 1, torch.bfloat16, seed=50)
    cases = {
        "more rows than SKINNY_MAX_M": (x, w, b),
        "more features than SKINNY_MAX_N": _inputs(2, torch.bfloat16, seed=51, n=sg.SKINNY_MAX_N + 1, k=8),
        "float32": (x[:2].float(), w.float(), b.float()),
        "3-D x": (x[:2].unsqueeze(0), w, b),
        "no rows": (x[:0], w, b),
        "transposed weight": (x[:2], w.t().contiguous().t(), b),
        "columns not contiguous": (x[:2, ::2], w[:, ::2].contiguous(), b),
    }
    for name, (xi, wi, bi) in cases.items():
        assert torch.equal(sg.linear(xi, wi, bi), F.linear(xi, wi, bi)), name
    assert kernel_calls == []


def test_linear_keeps_to_f_linear_off_nvidia_devices() -> None:
    x, w, b = _inputs(2, torch.bfloat16, seed=60)
    assert not sg.uses_kernel(x, w, b)
    assert torch.equal(sg.linear(x, w, b), F.linear(x, w, b))


def test_registered_as_the_linear_op_of_cuda_only() -> None:
    regs = [r for r in get_plugin_manager().registry("custom_op").all()
            if r.name == "linear" and r.plugin == "triton"]
    assert [r.metadata.get("platform") for r in regs] == ["cuda"]
    assert regs[0].load() is sg.linear


def test_leaves_the_fused_down_projection_and_lora_linear_ops_to_their_references() -> None:
    """The plugin registers neither ``silu_and_mul_linear`` nor ``lora_linear``: a SwiGLU's down projection runs
    the ``silu_and_mul`` kernel, then ``linear``, and a LoRA linear its base op, then ``lora_apply``."""
    names = {r.name for r in get_plugin_manager().registry("custom_op").all() if r.plugin == "triton"}
    assert {"linear", "silu_and_mul", "lora_apply"} <= names
    assert not names & {"silu_and_mul_linear", "lora_linear"}


def test_the_measured_launch_table_decides_listed_shapes(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    """A listed (row bucket, N, K) goes where the table says, with its settings; others follow the static rule.
    The table round-trips through its JSON file, and an unknown kernel is refused."""
    import json

    from infercore_triton import skinny_table

    path = tmp_path / "skinny.json"
    path.write_text(json.dumps({"choices": [
        {"m": 1, "n": 6144, "k": 1024, "kernel": "skinny",
         "config": {"block_n": 4, "block_k": 256, "num_warps": 4, "num_stages": 3, "split_k": 2, "dot": False,
                    "prefetch": True}},
        {"m": 2, "n": 1024, "k": 2048, "kernel": "cublas"}]}))
    monkeypatch.setenv(skinny_table.TABLE_ENV, str(path))
    table = skinny_table.load_table()
    assert skinny_table.parse_table(table.to_json()).choices == table.choices
    monkeypatch.setattr(skinny_table, "TABLE", table)
    monkeypatch.setattr(sg, "_KERNEL_DEVICES", ("cpu",))

    def uses(m: int, n: int, k: int) -> bool:
        return sg.uses_kernel(torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(n, k, dtype=torch.bfloat16))

    assert uses(1, 6144, 1024)  # wider than the static rule, measured faster
    assert not uses(2, 6144, 1024)  # bucket 2 not listed: the static rule (N > 2048)
    assert not uses(2, 1024, 2048) and uses(1, 1024, 2048)  # cuBLAS measured faster at bucket 2 only
    assert sg.config_for(1, 6144, 1024) == sg.SkinnyConfig(4, 256, 4, 3, 2, dot=False)
    x, w, b = _inputs(1, torch.float32, seed=5, n=6144 // 64, k=1024 // 8)
    assert _rel_err(sg.skinny_gemm(x, w, b, sg.config_for(1, 6144, 1024)), F.linear(x, w, b)) < 1e-4
    with pytest.raises(ValueError, match="names kernel"):
        skinny_table.parse_table({"choices": [{"m": 1, "n": 1, "k": 1, "kernel": "cutlass"}]})
