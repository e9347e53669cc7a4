"""Start-up's passes run once inside the platform's ``kernel_builds_ahead`` context before they run for real; a
failure inside it costs nothing, and the graphs' uncaptured passes leave the runner as they found it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from engine_cases import PROMPTS

from infercore import SamplingParams
from infercore.platforms import kernel_builds
from infercore.platforms.interface import Platform
from infercore.worker import model_runner, warm_up
from infercore.worker.graph_capture import capture_decode_graphs, capture_mixed_graphs

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


class Recorder:
    """A ``kernel_builds_ahead`` context that records what ran inside it (and can make a pass fail there)."""

    def __init__(self, fail_inside: bool = False) -> None:
        self.inside = False
        self.entered = 0
        self.fail_inside = fail_inside
        self.calls: list[tuple[str, bool]] = []
        #: Whether core had marked each call's pass as run ahead (``kernel_builds.building_ahead``).
        self.marked: list[bool] = []

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        self.inside = True
        self.entered += 1
        try:
            yield
        finally:
            self.inside = False

    def wrap(self, name: str, fn):
        def spy(*args, **kwargs):
            self.calls.append((name, self.inside))
            self.marked.append(kernel_builds.building_ahead())
            if self.inside and self.fail_inside:
                raise RuntimeError("a pass that fails while kernels build ahead")
            return fn(*args, **kwargs)
        return spy


def _install(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> None:
    monkeypatch.setattr(Platform, "kernel_builds_ahead", lambda self: recorder.context())
    monkeypatch.setattr(model_runner, "profile_forward", recorder.wrap("profile", model_runner.profile_forward))
    monkeypatch.setattr(warm_up, "warm_up_sampler", recorder.wrap("sampler", warm_up.warm_up_sampler))


def _tokens(llm) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:4], GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("fail_inside", [False, True])
def test_start_up_runs_its_passes_ahead_then_for_real(make_llm, monkeypatch: pytest.MonkeyPatch,
                                                      fail_inside: bool) -> None:
    expected = _tokens(make_llm())
    monkeypatch.setenv(kernel_builds.BUILD_AHEAD_ENV, "1")  # every start-up, whatever earlier ones left
    recorder = Recorder(fail_inside)
    _install(monkeypatch, recorder)
    # Without the override the profile runs (and is the pass whose kernels the first context builds).
    llm = make_llm(num_gpu_blocks_override=None, kv_cache_memory_bytes=1 << 22)
    assert recorder.entered == 2  # the profiling pass, then the warm-up and graphs' passes
    assert ("profile", True) in recorder.calls and ("sampler", True) in recorder.calls
    # Each pass ran for real after its ahead run, whether or not that one failed.
    assert recorder.calls[-1] == ("sampler", False)
    assert [c for c in recorder.calls if c[0] == "sampler"] == [("sampler", True), ("sampler", False)]
    # Core marks the pass itself, whatever the platform's context: nothing indexes with its kernels' outputs.
    assert recorder.marked == [inside for _, inside in recorder.calls]
    assert not kernel_builds.building_ahead()
    assert _tokens(llm) == expected


def test_graph_passes_run_uncaptured_and_leave_the_runner_as_it_was(make_llm) -> None:
    llm = make_llm()
    expected = _tokens(llm)
    runner = llm.llm_engine.engine_core.executor.runner
    runner.buffers.bind_general()  # as start-up finds them (a step may leave a decode layout bound)
    assert capture_mixed_graphs(runner, None, eager_only=True) is None
    assert capture_decode_graphs(runner, None, eager_only=True) is None
    assert runner.graphs is None and runner.buffers.decode_shape is None  # the general layout is bound again
    assert _tokens(llm) == expected


def test_building_ahead_is_asked_for_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kernel_builds.BUILD_AHEAD_ENV, raising=False)
    assert kernel_builds.requested() is None  # the marker decides
    for value, wanted in (("auto", None), ("1", True), ("0", False), (" AUTO ", None)):
        monkeypatch.setenv(kernel_builds.BUILD_AHEAD_ENV, value)
        assert kernel_builds.requested() is wanted


@pytest.mark.skipif(not kernel_builds.supported(),
                    reason="the installed Triton has no AsyncCompileMode (or Triton is not installed)")
def test_by_default_a_configuration_builds_ahead_once_per_triton_cache(make_llm, monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path) -> None:
    """Unset, the variable leaves it to the markers: the first start-up of a configuration builds ahead (both
    passes) and leaves a marker per pass beside Triton's cache; the next start-up of it does not; a configuration
    that launches other kernels, a new cache, or ``=1`` builds ahead again; ``=0`` never does."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(kernel_builds.BUILD_AHEAD_ENV, raising=False)
    recorder = Recorder()
    _install(monkeypatch, recorder)
    expected = _tokens(make_llm())
    assert recorder.entered == 2
    markers = tmp_path / "cache" / kernel_builds.MARKER_FOLDER
    assert len(list(markers.iterdir())) == 2
    llm = make_llm()
    assert recorder.entered == 2  # built before: no ahead run
    assert _tokens(llm) == expected
    make_llm(max_num_seqs=3)
    assert recorder.entered == 4 and len(list(markers.iterdir())) == 4
    monkeypatch.setenv(kernel_builds.BUILD_AHEAD_ENV, "1")
    make_llm()
    assert recorder.entered == 6
    monkeypatch.setenv(kernel_builds.BUILD_AHEAD_ENV, "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(Platform, "kernel_builds_ahead", lambda self: None if kernel_builds.requested() is False
                        else recorder.context())
    make_llm()
    assert recorder.entered == 6
    monkeypatch.delenv(kernel_builds.BUILD_AHEAD_ENV)
    make_llm()
    assert recorder.entered == 8  # a new cache has no markers


def test_an_ahead_run_that_fails_leaves_no_marker(make_llm, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    pytest.importorskip("triton", reason="the markers live beside Triton's cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(kernel_builds.BUILD_AHEAD_ENV, raising=False)
    recorder = Recorder(fail_inside=True)
    _install(monkeypatch, recorder)
    make_llm()
    make_llm()
    assert recorder.entered == 4  # nothing recorded as built, so it tries again
    assert not (tmp_path / kernel_builds.MARKER_FOLDER).exists()


def test_a_device_left_unusable_by_the_ahead_pass_is_an_error_that_says_what_to_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A device error that outlives the pass (CUDA's device-side asserts do) surfaces at the synchronize after it:
    start-up stops there with the way out, not with the device's own message from deep inside."""
    from types import SimpleNamespace

    from infercore.worker.kernel_builds_ahead import build_kernels_ahead

    def synchronize() -> None:
        raise RuntimeError("CUDA error: device-side assert triggered\nCompile with TORCH_USE_CUDA_DSA ...")

    monkeypatch.setenv(kernel_builds.BUILD_AHEAD_ENV, "1")
    platform = SimpleNamespace(kernel_builds_ahead=contextlib.nullcontext, synchronize=synchronize,
                               empty_cache=lambda: None)
    parallel = SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1)
    runner = SimpleNamespace(platform=platform, config=SimpleNamespace(parallel=parallel))

    def passes() -> None:
        raise RuntimeError("the pass indexed with what a skipped kernel left")

    with pytest.raises(RuntimeError, match="INFERCORE_KERNEL_BUILDS_AHEAD=0") as raised:
        build_kernels_ahead(runner, "warm-up and graphs", passes)
    assert "device-side assert triggered)" in str(raised.value) and "TORCH_USE_CUDA_DSA" not in str(raised.value)


@pytest.mark.skipif(not kernel_builds.supported(),
                    reason="the installed Triton has no AsyncCompileMode (or Triton is not installed)")
def test_build_ahead_turns_launches_into_builds_and_restores_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside ``build_ahead`` a Triton launch is a build (``warmup=True``) under Triton's async compile mode;
    after it, launches launch again."""
    from triton.runtime import _async_compile
    from triton.runtime.jit import JITFunction

    seen: list[tuple[bool, bool]] = []

    def launch(self, *args, grid, warmup=False, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append((warmup, _async_compile.active_mode.get() is not None))

    monkeypatch.setattr(JITFunction, "run", launch)
    kernel = object.__new__(JITFunction)
    assert not kernel_builds.building_ahead()
    with kernel_builds.build_ahead(workers=2):
        assert kernel_builds.building_ahead()
        JITFunction.run(kernel, 1, grid=(1,), warmup=False)
    JITFunction.run(kernel, 1, grid=(1,), warmup=False)
    assert seen == [(True, True), (False, False)]
    assert not kernel_builds.building_ahead()
    with pytest.raises(RuntimeError), kernel_builds.build_ahead(workers=1):
        raise RuntimeError("a pass that fails inside")
    assert not kernel_builds.building_ahead()


@pytest.mark.skipif(not kernel_builds.supported(),
                    reason="the installed Triton has no AsyncCompileMode (or Triton is not installed)")
def test_the_sampler_warm_up_never_indexes_with_ids_a_skipped_kernel_left_unwritten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside ``build_ahead`` the sampling kernels leave their output ids unwritten: anything. The warm-up's
    penalised row must not count them into its table (on a GPU an out-of-range one was a device-side assert in
    ``index_put_`` that took the engine down at start-up; here, ids past the vocabulary stand in for it and the
    CPU's ``index_put_`` raises instead)."""
    import torch

    from infercore.sample.sampler import Sampler

    vocab = 64
    monkeypatch.setattr(Sampler, "_sample",
                        lambda self, logits, metadata: torch.full((logits.shape[0],), vocab + 7, dtype=torch.long))
    sampler = Sampler()
    with kernel_builds.build_ahead(workers=1):
        warm_up.warm_up_sampler(sampler, vocab, torch.float32, torch.device("cpu"))
    with pytest.raises(IndexError):  # run for real, the same ids are an error: the guard is what held above
        warm_up.warm_up_sampler(sampler, vocab, torch.float32, torch.device("cpu"))


def test_mixed_decode_warm_up_runs_each_decode_count_over_narrow_and_wide_tables(make_llm,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The eager mixed steps' warm-up: one short prompt behind 1, 2, 4, ... one-token queries (and the most a
    step holds), over the narrowest block table and the widest, uncaptured and writing nowhere; the runner
    serves the same tokens after it."""
    assert warm_up.mixed_decode_counts(256, 8192, 16) == [1, 2, 4, 8, 16, 32, 64, 128, 255]
    assert warm_up.mixed_decode_counts(6, 8192, 16) == [1, 2, 4, 5]
    assert warm_up.mixed_decode_counts(256, 20, 16) == [1, 2, 4]
    assert warm_up.mixed_decode_counts(1, 8192, 16) == []
    llm = make_llm(max_num_seqs=6)
    expected = _tokens(llm)
    runner = llm.llm_engine.engine_core.executor.runner
    seen: list[tuple[int, int, int, bool, bool]] = []
    build = runner.builder.build

    def spy(common):  # noqa: ANN001, ANN202
        lengths = common.query_start_loc_cpu.diff().tolist()
        decodes = next((i for i, n in enumerate(lengths) if n != 1), len(lengths))
        assert (common.slot_mapping == -1).all()
        seen.append((decodes, lengths[-1], common.block_table.shape[1], common.is_pure_decode,
                     common.padded_for_graph))
        return build(common)

    monkeypatch.setattr(runner.builder, "build", spy)
    runner.buffers.bind_general()  # as start-up finds them (a step may leave a decode layout bound)
    warm_up.warm_up_mixed_decodes(runner)
    prompt = max(runner.block_size, runner.max_verify_len + 1)
    widths = sorted({1, runner.max_blocks_per_req})
    assert seen == [(d, prompt, w, False, False) for w in widths for d in (1, 2, 4, 5)]
    monkeypatch.undo()
    assert _tokens(llm) == expected
