"""The conformance checks the ``infercore.testing`` pytest plugin runs against one platform."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from infercore.attention.backend import AttentionBackend, AttentionRequest
from infercore.platforms.capabilities import KernelSettings
from infercore.platforms.interface import Platform
from infercore.platforms.selection import current_platform, set_current_platform
from infercore.plugins.manager import get_plugin_manager
from infercore.testing.attention_cases import (
    CASES,
    ENCODER_ONLY_CASES,
    FP8_CASES,
    VISIBLE_BOUNDS_CASES,
    WHOLE_GRAPH_CASES,
    AttentionCase,
    attention_request,
    default_layout,
    run_case,
    write_case_error,
)
from infercore.testing.op_cases import OP_INPUTS, OP_VARIANTS, op_error

#: Largest relative error allowed, by the dtype the checks run in.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 3e-2}
GREEDY_TOKENS = 8


def _platform_name(config: pytest.Config) -> str:
    name = config.getoption("--infercore-platform")
    if not name:
        pytest.fail("the conformance checks need --infercore-platform NAME")
    return name


@pytest.fixture(scope="session")
def platform_name(request: pytest.FixtureRequest) -> str:
    return _platform_name(request.config)


@pytest.fixture(scope="session")
def platform_cls(platform_name: str) -> type[Platform]:
    registry = get_plugin_manager().registry("platform")
    if platform_name not in registry:
        pytest.fail(f"no platform named {platform_name!r} is registered (registered: {', '.join(registry.names())})")
    return registry.load(platform_name)


@pytest.fixture(scope="session")
def platform(platform_cls: type[Platform], platform_name: str) -> Iterator[Platform]:
    """The platform instance, made current (and forced through INFERCORE_PLATFORM) for the session."""
    result = platform_cls.probe()
    if not result.available:
        pytest.fail(f"platform {platform_name!r} is unavailable here: {result.reason}")
    previous_env = os.environ.get("INFERCORE_PLATFORM")
    try:
        previous = current_platform()
    except Exception:  # noqa: BLE001 - no platform selectable without the forced one
        previous = None
    instance = platform_cls()
    os.environ["INFERCORE_PLATFORM"] = platform_name
    set_current_platform(instance)
    yield instance
    set_current_platform(previous)
    if previous_env is None:
        os.environ.pop("INFERCORE_PLATFORM", None)
    else:
        os.environ["INFERCORE_PLATFORM"] = previous_env


@pytest.fixture(scope="session")
def check_dtype(platform: Platform) -> torch.dtype:
    caps = platform.capabilities
    return torch.float32 if torch.float32 in caps.supported_dtypes else caps.default_dtype


# -- probe and memory ------------------------------------------------------------------------------
_PURITY = """
import sys
from infercore.plugins.registry import import_target
result = import_target(sys.argv[1]).probe()
assert isinstance(result.reason, str) and result.reason, "probe() gave no reason"
import torch
touched = [m for m in ("cuda", "xpu", "mps") if getattr(getattr(torch, m, None), "is_initialized", lambda: False)()]
assert not touched, f"importing or probing the platform initialised the {touched} runtime"
print("PURE")
"""


def test_probe_is_pure(platform_name: str) -> None:
    """Importing the platform and running its probe initialises no device runtime."""
    target = get_plugin_manager().registry("platform").get(platform_name).target
    proc = subprocess.run([sys.executable, "-c", _PURITY, target], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "PURE" in proc.stdout, f"probe purity: {proc.stderr[-2000:]}"


def test_memory_queries(platform: Platform) -> None:
    count = platform.device_count()
    assert count >= 1, f"memory queries: device_count() is {count} on an available platform"
    total, free = platform.total_memory(0), platform.free_memory(0)
    assert total > 0, f"memory queries: total_memory(0) is {total}"
    assert 0 < free <= total, f"memory queries: free_memory(0) is {free}, total_memory(0) {total}"


# -- capabilities ----------------------------------------------------------------------------------
def _check_dtypes(platform: Platform) -> None:
    caps = platform.capabilities
    assert caps.default_dtype in caps.supported_dtypes, "capabilities: default_dtype is not a supported dtype"
    for dtype in caps.supported_dtypes:
        x = torch.ones(4, dtype=dtype, device=platform.device())
        assert float((x + x).sum()) == 8.0, f"capabilities: arithmetic in supported dtype {dtype} failed"
    assert isinstance(caps.kernel, KernelSettings), "capabilities: kernel is not a KernelSettings"


def _check_pin_memory(platform: Platform) -> None:
    assert torch.empty(16, pin_memory=True).is_pinned(), "capabilities: pin_memory=True but pinning failed"


def _check_profile_memory(platform: Platform) -> None:
    size = 8 << 20

    def allocate() -> None:
        torch.empty(size, dtype=torch.uint8, device=platform.device())

    peak = platform.profile_peak_memory(allocate)
    assert peak >= size, f"capabilities: profile_peak_memory reported {peak} bytes for an {size}-byte allocation"


def _check_graph_capture(platform: Platform) -> None:
    static = torch.zeros(8, device=platform.device())
    graph = platform.new_graph()
    with platform.capture_graph(graph, platform.graph_pool_handle()):
        static.add_(1)
    graph.replay()
    platform.synchronize()
    assert float(static.sum()) >= 8, "capabilities: a captured graph did not run on replay"


#: What each capability promises; the flags are checked only on platforms that set them.
FLAG_CHECKS = {"supported_dtypes": _check_dtypes, "pin_memory": _check_pin_memory, "profile_memory": _check_profile_memory,
               "graph_capture": _check_graph_capture}


def test_capability_holds(platform: Platform, flag: str) -> None:
    FLAG_CHECKS[flag](platform)


# -- attention -------------------------------------------------------------------------------------
def _backend(backend_name: str | None, platform: Platform, case: AttentionCase,
             dtype: torch.dtype) -> tuple[str, type[AttentionBackend]]:
    name = backend_name or platform.select_attention_backend(attention_request(case, dtype, platform.device_type))
    return name, get_plugin_manager().registry("attention_backend").load(name)


def test_attention_matches_reference(backend_name: str | None, platform: Platform, check_dtype: torch.dtype,
                                     case: AttentionCase) -> None:
    name, backend = _backend(backend_name, platform, case, check_dtype)
    reasons = backend.validate(attention_request(case, check_dtype, platform.device_type))
    if reasons:
        pytest.skip(f"backend {name!r} declines case {case.name!r}: {'; '.join(reasons)}")
    if not default_layout(backend):
        pytest.skip(f"backend {name!r} uses its own cache layout; the kit reads only the default one")
    result = run_case(backend, case, platform.device(), check_dtype)
    tol = TOLERANCE[check_dtype]
    assert result.cache_error <= tol, (f"attention case {case.name!r}, backend {name!r}: the K/V written to the "
                                       f"cache differ from the reference by {result.cache_error:.2e}")
    assert result.output_error <= tol, (f"attention case {case.name!r}, backend {name!r}: output differs from the "
                                        f"reference by {result.output_error:.2e} (relative; allowed {tol:.0e})")


def test_write_kv_alone_matches_reference(backend_name: str | None, platform: Platform, check_dtype: torch.dtype,
                                         write_case: AttentionCase) -> None:
    """A backend that sets ``writes_kv_alone`` stores through ``write_kv`` what the reference's cache write
    stores (plugin API 1.16): a draft head's catch-up trusts it to write what ``forward`` would."""
    name, backend = _backend(backend_name, platform, write_case, check_dtype)
    reasons = backend.validate(attention_request(write_case, check_dtype, platform.device_type))
    if reasons:
        pytest.skip(f"backend {name!r} declines case {write_case.name!r}: {'; '.join(reasons)}")
    error = write_case_error(backend, write_case, platform.device(), check_dtype)
    assert error <= TOLERANCE[check_dtype], (f"write_kv case {write_case.name!r}, backend {name!r}: the K/V it "
                                             f"stores differ from the reference by {error:.2e}")


def _chosen_backend(config: pytest.Config, backend_name: str | None, case: AttentionCase,
                    dtype: torch.dtype | None = None) -> tuple[str, type[AttentionBackend], AttentionRequest]:
    """The backend a case runs on (``backend_name``, else the platform's choice for it, at ``dtype`` or the
    platform's default) and the request it is chosen by, for deciding which cases a run parametrizes."""
    platform = get_plugin_manager().registry("platform").load(_platform_name(config))()
    request = attention_request(case, dtype or platform.capabilities.default_dtype, platform.device_type)
    name = backend_name or platform.select_attention_backend(request)
    return name, get_plugin_manager().registry("attention_backend").load(name), request


def _write_cases(config: pytest.Config, backend_name: str | None) -> list[Any]:
    """The cases of the ``write_kv`` check: every case that writes the cache, for a backend (the platform's
    choice, by default) that sets ``writes_kv_alone`` and keeps the default layout; else one skip saying why."""
    name, backend, _ = _chosen_backend(config, backend_name, CASES[0])
    label = backend_name or "platform-choice"
    if not backend.get_impl_cls().writes_kv_alone or not default_layout(backend):
        why = ("does not set writes_kv_alone (a cache write alone runs forward)" if default_layout(backend)
               else "uses its own cache layout; the kit reads only the default one")
        return [pytest.param(backend_name, None, id=f"{label}-no-write-kv",
                             marks=pytest.mark.skip(reason=f"backend {name!r} {why}"))]
    cases = CASES + _fp8_cases(config, backend_name) + _whole_graph_cases(config, backend_name) \
        + _visible_bounds_cases(config, backend_name)
    return [pytest.param(backend_name, case, id=f"{label}-{case.name}") for case in cases]


def _fp8_cases(config: pytest.Config, backend_name: str | None) -> tuple[AttentionCase, ...]:
    """The fp8-cache cases, when the backend (the platform's choice for them, by default) accepts one."""
    caps = get_plugin_manager().registry("platform").load(_platform_name(config)).capabilities
    dtype = torch.float32 if torch.float32 in caps.supported_dtypes else caps.default_dtype
    _, backend, request = _chosen_backend(config, backend_name, FP8_CASES[0], dtype)
    return FP8_CASES if not backend.validate(request) and default_layout(backend) else ()


def _whole_graph_cases(config: pytest.Config, backend_name: str | None) -> tuple[AttentionCase, ...]:
    """The whole-step graph cases, when the backend (the platform's choice, by default) declares it
    captures steps with prompt tokens whole."""
    _, backend, _ = _chosen_backend(config, backend_name, WHOLE_GRAPH_CASES[0])
    return WHOLE_GRAPH_CASES if backend.captures_mixed_steps else ()


def _encoder_only_cases(config: pytest.Config, backend_name: str | None) -> tuple[AttentionCase, ...]:
    """The encoder-only cases, when the backend (the platform's choice for them, by default) declares
    ``supports_encoder_only``; one that does not is refused such models by the engine."""
    _, backend, _ = _chosen_backend(config, backend_name, ENCODER_ONLY_CASES[0])
    return ENCODER_ONLY_CASES if backend.supports_encoder_only and default_layout(backend) else ()


def _visible_bounds_cases(config: pytest.Config, backend_name: str | None) -> tuple[AttentionCase, ...]:
    """The visibility-bound cases, when the backend declares ``supports_visible_bounds`` (the whole-step
    graph one only when it also captures such steps whole); one that does not is refused such models."""
    _, backend, _ = _chosen_backend(config, backend_name, VISIBLE_BOUNDS_CASES[0])
    if not (backend.supports_visible_bounds and default_layout(backend)):
        return ()
    return tuple(c for c in VISIBLE_BOUNDS_CASES if backend.captures_mixed_steps or not c.whole_graph)


# -- custom ops ------------------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Capability checks for the flags the platform sets; attention checks per backend asked for
    (default: the platform's choice); one custom-op check per op (and mode) it registers a kernel for."""
    if "flag" in metafunc.fixturenames:
        caps = get_plugin_manager().registry("platform").load(_platform_name(metafunc.config)).capabilities
        metafunc.parametrize("flag", [f for f in FLAG_CHECKS if f == "supported_dtypes" or getattr(caps, f)])
    if "backend_name" in metafunc.fixturenames:
        backends = metafunc.config.getoption("--infercore-attention-backend") or [None]
        if "case" in metafunc.fixturenames:
            params = [pytest.param(b, case, id=f"{b or 'platform-choice'}-{case.name}")
                      for b in backends
                      for case in CASES + _fp8_cases(metafunc.config, b) + _whole_graph_cases(metafunc.config, b)
                      + _encoder_only_cases(metafunc.config, b) + _visible_bounds_cases(metafunc.config, b)]
            metafunc.parametrize(("backend_name", "case"), params)
        elif "write_case" in metafunc.fixturenames:
            metafunc.parametrize(("backend_name", "write_case"),
                                 [p for b in backends for p in _write_cases(metafunc.config, b)])
        else:
            metafunc.parametrize("backend_name", backends, ids=[b or "platform-choice" for b in backends])
    if "op" not in metafunc.fixturenames:
        return
    name = _platform_name(metafunc.config)
    registered = sorted({r.name for r in get_plugin_manager().registry("custom_op").all()
                         if r.metadata.get("platform") == name and r.name in OP_INPUTS})
    params = [pytest.param(op, variant, overrides, id=f"{op}-{variant}")
              for op in registered for variant, overrides in {"default": {}, **OP_VARIANTS.get(op, {})}.items()]
    if not params:
        reason = (f"platform {name!r} registers no custom ops, so every op runs core's torch reference and "
                  "there is no kernel to compare with it")
        params = [pytest.param(None, None, None, id="no-custom-ops", marks=pytest.mark.skip(reason=reason))]
    metafunc.parametrize(("op", "variant", "overrides"), params)


def test_custom_op_matches_reference(platform: Platform, platform_name: str, check_dtype: torch.dtype, op: str,
                                     variant: str, overrides: dict[int, Any]) -> None:
    regs = [r for r in get_plugin_manager().registry("custom_op").all()
            if r.name == op and r.metadata.get("platform") == platform_name]
    error = op_error(op, regs[0].load(), platform.device(), check_dtype, overrides)
    tol = TOLERANCE[check_dtype]
    assert error <= tol, (f"custom op {op!r} ({variant}) of plugin {regs[0].plugin!r} differs from its reference "
                          f"by {error:.2e} (relative; allowed {tol:.0e})")


def test_every_registered_op_has_a_reference(platform_name: str) -> None:
    from infercore.plugin_api import CUSTOM_OPS

    regs = [r for r in get_plugin_manager().registry("custom_op").all() if r.metadata.get("platform") == platform_name]
    unknown = sorted({r.name for r in regs} - set(CUSTOM_OPS))
    assert not unknown, (f"platform {platform_name!r} registers custom ops core does not define: {unknown}; "
                         "a platform may only replace ops whose torch reference core ships")


# -- a tiny model end to end -----------------------------------------------------------------------
@pytest.fixture(scope="session")
def model_folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = request.config.getoption("--infercore-model")
    if given:
        return Path(given)
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("conformance-model"), "Qwen3ForCausalLM")


def _prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(3)
    shared = torch.randint(0, vocab, (20,), generator=gen).tolist()
    return [shared + torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (20, 25)] + [
        torch.randint(0, vocab, (7,), generator=gen).tolist()]


def _hf_greedy(model: Any, prompt: list[int]) -> list[int]:
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            tokens.append(int(model(torch.tensor([tokens])).logits[0, -1].argmax()))
    return tokens[len(prompt):]


def test_tiny_model_matches_transformers(platform: Platform, check_dtype: torch.dtype, model_folder: Path) -> None:
    """Greedy tokens of a tiny model, with chunked prefill and prefix-cache hits, equal HF's."""
    if check_dtype != torch.float32:
        pytest.skip("the end-to-end check compares float32 greedy tokens; this platform has no float32")
    from infercore import LLM, SamplingParams
    from infercore.config import ModelConfig
    from infercore.models.hf_config import get_hf_config

    vocab = int(get_hf_config(ModelConfig(model=str(model_folder))).get_text_config().vocab_size)
    prompts = _prompts(vocab)
    llm = LLM(model=str(model_folder), dtype="float32", max_model_len=128, max_num_seqs=4,
              max_num_batched_tokens=32, block_size=16, enable_prefix_caching=True, seed=0)
    params = SamplingParams(temperature=0, max_tokens=GREEDY_TOKENS, ignore_eos=True)
    batch = [{"prompt_token_ids": p} for p in prompts]
    first = [o.outputs[0].token_ids for o in llm.generate(batch, params, use_tqdm=False)]
    again = llm.generate(batch, params, use_tqdm=False)
    assert any(o.num_cached_tokens > 0 for o in again), "end to end: the second run hit no prefix cache"
    from transformers import AutoModelForCausalLM

    hf_model = AutoModelForCausalLM.from_pretrained(str(model_folder), dtype=torch.float32)
    for i, prompt in enumerate(prompts):
        expected = _hf_greedy(hf_model, prompt)
        assert first[i] == expected, f"end to end: prompt {i} gave {first[i]}, transformers {expected}"
        assert again[i].outputs[0].token_ids == expected, f"end to end: prompt {i} after a prefix-cache hit"


# -- the model split over two ranks ----------------------------------------------------------------
def _greedy(model_folder: Path, prompts: list[list[int]], **engine_args: Any) -> list[list[int]]:
    from infercore import LLM, SamplingParams

    params = SamplingParams(temperature=0, max_tokens=GREEDY_TOKENS, ignore_eos=True)
    with LLM(model=str(model_folder), dtype="float32", max_model_len=128, max_num_seqs=4,
             num_gpu_blocks_override=32, cpu_threads=1, seed=0, **engine_args) as llm:
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


def test_model_under_tensor_parallelism(platform: Platform, check_dtype: torch.dtype, model_folder: Path) -> None:
    """The model split over two ranks (two worker processes, the ``mp`` executor; gloo on a CPU device)
    gives the greedy tokens it gives whole: its layers size their share from ``ModelSpec.tp_size`` and its
    ``load_weights`` gets the tensors the contract promises."""
    if check_dtype != torch.float32:
        pytest.skip("the tensor-parallel check compares float32 greedy tokens; this platform has no float32")
    if platform.device_type != "cpu" and platform.device_count() < 2:
        pytest.skip(f"the tensor-parallel check needs two devices; platform {platform.name!r} sees "
                    f"{platform.device_count()}")
    from infercore.config import ModelConfig
    from infercore.models.hf_config import get_hf_config

    prompts = _prompts(int(get_hf_config(ModelConfig(model=str(model_folder))).get_text_config().vocab_size))
    whole = _greedy(model_folder, prompts)
    try:
        split = _greedy(model_folder, prompts, tensor_parallel_size=2, distributed_executor_backend="mp")
    except Exception as exc:  # noqa: BLE001 - the failure is the finding, named below
        pytest.fail(f"tensor parallelism: the model did not run on two ranks: {type(exc).__name__}: {exc}")
    for i, (expected, got) in enumerate(zip(whole, split, strict=True)):
        assert got == expected, f"tensor parallelism: prompt {i} gave {got} on two ranks, {expected} on one"
