"""The model runner: one scheduled step → one flattened forward pass → sampled tokens."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, NamedTuple

import numpy as np
import torch

from infercore.attention.backend import AttentionBackend, AttentionRequest, CommonAttentionMetadata
from infercore.attention.binding import bind_attention, layer_specs
from infercore.attention.encoder_only import ENCODER_ONLY, encoder_only_reasons
from infercore.config import InfercoreConfig
from infercore.engine.messages import Logprobs
from infercore.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.kv_cache.fp8 import kv_cache_dtype
from infercore.kv_cache.groups import group_pool_sizes, kv_cache_groups, primary_blocks_for_budget
from infercore.kv_cache.spec import KVCacheSpec
from infercore.platforms.interface import UNPROFILED_KV_FRACTION, Platform
from infercore.plugins.manager import get_plugin_manager
from infercore.pooling.pooled import results_to_host
from infercore.pooling.runner import pooling_rows_for
from infercore.sample import Sampler, SamplingMetadata, compute_prompt_logprobs
from infercore.sample.row_state import SamplingRowState
from infercore.sampling_params import SamplingParams
from infercore.worker.batch_layout import BatchLayout, make_layout
from infercore.worker.mixed_graphs import MixedGraphs, mixed_capture_sizes
from infercore.worker.pending_sample import PendingSample
from infercore.worker.request_state import RequestState
from infercore.worker.step_buffers import StepBuffers
from infercore.worker.whole_graphs import WholeGraphs, capture_sizes

logger = logging.getLogger(__name__)


class StepGraph(NamedTuple):
    """Which captured graphs a step replays: the decode graph or the prefill/mixed pieces of ``size``."""

    mixed: bool
    size: int


class StepForward(NamedTuple):
    """A step's forward pass: one row per scheduled token, of hidden states or (``is_logits``, from a
    decode graph that ends with the LM head) of logits."""

    out: torch.Tensor
    is_logits: bool


def _kv_dtype(config: InfercoreConfig, model_dtype: torch.dtype) -> torch.dtype:
    return kv_cache_dtype(config.cache.kv_cache_dtype, model_dtype)


class ModelRunner:
    """Holds the model, its KV cache and the persistent step buffers of one device."""

    def __init__(self, config: InfercoreConfig, platform: Platform, device: torch.device,
                 max_model_len: int, max_num_batched_tokens: int, eos_token_id: int | None) -> None:
        from infercore.models.dtype import resolve_dtype
        from infercore.models.loader import get_hf_config, load_model

        self.config = config
        self.platform = platform
        self.device = device
        self.max_model_len = max_model_len
        self.max_num_tokens = max_num_batched_tokens
        self.max_num_reqs = config.scheduler.max_num_seqs
        self.eos_token_id = eos_token_id
        self.hf_config = get_hf_config(config.model)
        self.dtype = resolve_dtype(config.model, self.hf_config, platform)
        self.model = load_model(config, device, self.dtype)
        self.vocab_size = int(self.hf_config.get_text_config().vocab_size)
        self.block_size = config.cache.block_size
        self.kv_spec, self.num_layers = self._kv_cache_spec()
        #: Bidirectional layers (infercore.attention.encoder_only) keep no KV cache: no memory is given to it.
        self.encoder_only = all(s.attn_type == ENCODER_ONLY for s in layer_specs(self.model))
        #: Layers by the window they read (:mod:`infercore.kv_cache.groups`): one group unless windows differ.
        self.kv_groups = kv_cache_groups([s.sliding_window for s in layer_specs(self.model)],
                                         hybrid=not config.cache.disable_hybrid_kv_cache_manager)
        self.layer_groups = [0] * self.num_layers
        for g, group in enumerate(self.kv_groups):
            for layer in group.layers:
                self.layer_groups[layer] = g
        self.backend = self._select_backend()
        self.sampler = Sampler(config.model.seed)
        self.requests: dict[str, RequestState] = {}
        self._free_rows = list(range(self.max_num_reqs - 1, -1, -1))
        self.max_blocks_per_req = math.ceil(max_model_len / self.block_size)
        self._alloc_host_state()
        #: Pooling (infercore.pooling): results instead of samples, so graphs end with hidden states.
        self.pooling = pooling_rows_for(config, self.model)
        if self.pooling is not None:
            self.logits_in_decode_graphs = False
        self.kv_caches: list[torch.Tensor] = []
        self.builder: Any = None
        #: The metadata builders of the KV cache groups after the first.
        self.group_builders: list[Any] = []

    # -- setup ---------------------------------------------------------------------------------
    def _kv_cache_spec(self) -> tuple[KVCacheSpec, int]:
        """The cache every layer shares, as the model's Attention layers declare it."""
        specs = layer_specs(self.model)
        shapes = {(s.num_kv_heads, s.head_size) for s in specs}
        if len(shapes) > 1:
            raise ValueError(f"{type(self.model).__name__}'s attention layers differ in (KV heads, head size): "
                             f"{sorted(shapes)}; one KV cache layout for all layers is supported")
        kv_heads, head_size = shapes.pop()
        spec = KVCacheSpec(self.block_size, kv_heads, head_size, _kv_dtype(self.config, self.dtype))
        return spec, len(specs)

    def _select_backend(self) -> type[AttentionBackend]:
        specs = layer_specs(self.model)
        windows = [s.sliding_window for s in specs if s.sliding_window is not None]
        request = AttentionRequest(
            num_heads=specs[0].num_heads, num_kv_heads=self.kv_spec.num_kv_heads,
            head_size=self.kv_spec.head_size, dtype=self.dtype, kv_cache_dtype=self.kv_spec.dtype,
            block_size=self.block_size, device_type=self.platform.device_type,
            sliding_window=max(windows) if windows else None,
            alibi=any(s.alibi_slopes is not None for s in specs),
            encoder_only=self.encoder_only,
        )
        name = self.platform.select_attention_backend(request)
        backend: type[AttentionBackend] = get_plugin_manager().registry("attention_backend").load(name)
        reasons = backend.validate(request) + encoder_only_reasons(backend, self.encoder_only)
        if reasons:
            raise ValueError(f"attention backend {name!r} cannot run this model: {'; '.join(reasons)}")
        logger.info("attention backend: %s", name)
        return backend

    def _alloc_host_state(self) -> None:
        self.token_ids = np.zeros((self.max_num_reqs, self.max_model_len), dtype=np.int64)
        # Block ids interleaved by KV cache group: column j * G + g is group g's j-th block.
        self.block_table = np.zeros((self.max_num_reqs, self.max_blocks_per_req * len(self.kv_groups)), dtype=np.int32)
        self.num_computed = np.zeros(self.max_num_reqs, dtype=np.int64)
        self.num_tokens = np.zeros(self.max_num_reqs, dtype=np.int64)
        self.buffers = StepBuffers(max(self.max_num_tokens, self.max_num_reqs), self.max_num_reqs,
                                   self.max_blocks_per_req, self.device, self.platform.capabilities.pin_memory,
                                   kv_groups=len(self.kv_groups))
        self.graphs: WholeGraphs | None = None
        #: Graphs of steps with prompt tokens: whole (the backend launches attention from padded counts,
        #: ``captures_mixed_steps``) or in pieces around attention.
        self.mixed_graphs: WholeGraphs | MixedGraphs | None = None
        self._pending: PendingSample | None = None
        #: Running requests that asked for prompt logprobs (a step without any skips looking for them).
        self._prompt_logprob_reqs: set[str] = set()
        #: Whether decode graphs end with the LM head (every row of a decode step is sampled, so its
        #: logits are computed inside the graph instead of by one more launch per step). Not with
        #: tensor parallelism, whose LM head gathers across the group.
        self.logits_in_decode_graphs = self.config.parallel.tensor_parallel_size == 1
        self._sampled_host = torch.zeros(self.max_num_reqs, dtype=torch.long,
                                         pin_memory=self.platform.capabilities.pin_memory and not self.buffers.same)
        #: Each row's sampling parameters (and penalty tables on the device), written when a request joins.
        self.sampling_state = SamplingRowState(self.max_num_reqs, self.vocab_size, self.device,
                                               self.platform.capabilities.pin_memory and not self.buffers.same)

    def kv_group_windows(self) -> list[int | None]:
        """The window of each KV cache group, the primary group first."""
        return [group.window for group in self.kv_groups]

    def group_pool_sizes(self, num_blocks: int) -> list[int]:
        """Blocks in each KV cache group's pool when the primary group has ``num_blocks`` (as the scheduler
        sizes them)."""
        return group_pool_sizes(num_blocks, self.kv_group_windows(), self.block_size, self.max_num_reqs,
                                self.max_num_tokens)

    def cache_bytes(self, num_blocks: int) -> int:
        """Bytes of the whole KV cache when the primary group has ``num_blocks`` blocks."""
        page = 0 if self.encoder_only else self.kv_spec.page_size_bytes
        sizes = self.group_pool_sizes(num_blocks)
        return sum(page * len(group.layers) * n for group, n in zip(self.kv_groups, sizes, strict=True))

    def determine_num_blocks(self) -> int:
        """KV cache blocks that fit the configured budget (never more than max_num_seqs full contexts)."""
        cache = self.config.cache
        cap = self.max_num_reqs * self.max_blocks_per_req + 1
        if cache.num_gpu_blocks_override is not None:
            return cache.num_gpu_blocks_override
        if cache.kv_cache_memory_bytes is not None:
            budget = cache.kv_cache_memory_bytes
        elif self.platform.capabilities.profile_memory:
            budget = self._profile_free_bytes()
        else:
            budget = self._unprofiled_budget()
        num_blocks = primary_blocks_for_budget(budget, cap, self.cache_bytes)
        if num_blocks < 2:
            raise ValueError(
                f"the KV cache budget of {budget} bytes holds fewer than 2 blocks of "
                f"{self.kv_spec.page_size_bytes * self.num_layers} bytes; "
                "raise --gpu-memory-utilization or --kv-cache-memory-bytes, or use a smaller model")
        return int(num_blocks)

    def _unprofiled_budget(self) -> int:
        """The documented rule for platforms that cannot profile: a fixed fraction of free memory."""
        free = self.platform.free_memory(self.device.index or 0)
        budget = int(free * UNPROFILED_KV_FRACTION)
        logger.info("memory: platform %s does not profile; KV budget %.2f GiB (%.0f%% of %.1f GiB free); set "
                    "--kv-cache-memory-bytes to choose it", self.platform.name, budget / 2**30,
                    100 * UNPROFILED_KV_FRACTION, free / 2**30)
        return budget

    def _profile_free_bytes(self) -> int:
        """Memory left for the KV cache after the weights and a peak-sized forward pass."""
        self.platform.empty_cache()
        total = self.platform.total_memory(self.device.index or 0)
        peak = self.platform.profile_peak_memory(lambda: self._dummy_forward(self.max_num_tokens))
        budget = int(total * self.config.cache.gpu_memory_utilization) - peak
        logger.info("memory: total %.1f GiB, peak during profiling %.2f GiB, KV budget %.2f GiB",
                    total / 2**30, peak / 2**30, budget / 2**30)
        return max(budget, 0)

    def _dummy_forward(self, num_tokens: int) -> None:
        """A forward pass of ``num_tokens`` prompt tokens into a scratch cache (for memory profiling).

        The first request has a one-token query, so the batch is a mixed one and the backend's
        kernels for decodes beside prefills are built here rather than during the first requests.
        """
        lead = 1 if num_tokens > 1 and self.max_num_reqs > 1 else 0
        # No step holds more than max_num_reqs requests of at most max_model_len tokens.
        prompt_tokens = min(num_tokens - lead, (self.max_num_reqs - lead) * self.max_model_len)
        seq = min(prompt_tokens, self.max_model_len)
        num_prompts = math.ceil(prompt_tokens / seq)
        lengths = np.full(lead + num_prompts, seq)
        lengths[:lead] = 1
        lengths[-1] = prompt_tokens - seq * (num_prompts - 1)
        n_req = len(lengths)
        per_req = math.ceil(seq / self.block_size)
        caches = self._allocate_caches([n_req * per_req + 1] * len(self.kv_groups))
        bind_attention(self.model, self.backend, caches, self.dtype, layer_groups=self.layer_groups)
        builders = self._new_builders()
        layout = make_layout(np.arange(n_req), lengths, np.zeros(n_req, dtype=np.int64))
        table = 1 + np.arange(n_req * per_req, dtype=np.int32).reshape(n_req, per_req)
        blocks = table[layout.token_rows, layout.positions // self.block_size].astype(np.int64)
        slots = blocks * self.block_size + layout.positions % self.block_size
        meta = self._fill(layout, np.zeros(layout.num_tokens, dtype=np.int64), slots, table)
        with set_forward_context(self._context(meta, layout.num_tokens, builders)):
            hidden = self.model(self.buffers.input_ids[: layout.num_tokens], self.buffers.positions[: layout.num_tokens])
            self.model.compute_logits(hidden[-self.max_num_reqs:])
        del caches

    def _allocate_caches(self, group_blocks: list[int]) -> list[torch.Tensor]:
        """One cache per layer, of its KV cache group's ``group_blocks[g]`` blocks (empty for encoder-only layers)."""
        if self.encoder_only:
            return [torch.empty(0, dtype=self.kv_spec.dtype, device=self.device) for _ in self.layer_groups]
        shapes = [self.backend.get_kv_cache_shape(n, self.block_size, self.kv_spec.num_kv_heads,
                                                  self.kv_spec.head_size) for n in group_blocks]
        return [torch.zeros(shapes[g], dtype=self.kv_spec.dtype, device=self.device) for g in self.layer_groups]

    def _new_builders(self) -> list[Any]:
        """A metadata builder per KV cache group (each may keep buffers of its own)."""
        return [self.backend.get_builder_cls()(self.kv_spec, self.device, self.max_num_reqs, self.max_num_tokens)
                for _ in self.kv_groups]

    def _context(self, meta: CommonAttentionMetadata, num_tokens: int, builders: list[Any] | None = None) -> ForwardContext:
        """The forward context of a step: the first group's metadata from ``meta``, the other groups' from
        their slot mappings and block tables in the step buffers."""
        builders = builders or [self.builder, *self.group_builders]
        if len(builders) == 1:
            return ForwardContext(builders[0].build(meta), num_tokens)
        buf = self.buffers
        num_reqs, width = meta.block_table.shape
        slots = len(meta.slot_mapping)
        groups = tuple(builder.build(dataclasses.replace(meta, block_table=buf.group_block_table[g, :num_reqs, :width],
                                                         slot_mapping=buf.group_slot_mapping[g, :slots]))
                       for g, builder in enumerate(builders[1:]))
        return ForwardContext(builders[0].build(meta), num_tokens, group_attn_metadata=groups)

    def initialize_kv_cache(self, num_blocks: int) -> None:
        sizes = self.group_pool_sizes(num_blocks)
        self.kv_caches = self._allocate_caches(sizes)
        bind_attention(self.model, self.backend, self.kv_caches, self.dtype, layer_groups=self.layer_groups)
        self.builder, *self.group_builders = self._new_builders()
        if len(sizes) == 1:
            logger.info("KV cache: %d blocks of %d tokens (%.1f MiB)", num_blocks, self.block_size,
                        self.cache_bytes(num_blocks) / 2**20)
        else:
            logger.info("KV cache: %s blocks of %d tokens for the layer groups of windows %s (%.1f MiB)",
                        " / ".join(map(str, sizes)), self.block_size,
                        " / ".join("global" if w is None else str(w) for w in self.kv_group_windows()),
                        self.cache_bytes(num_blocks) / 2**20)
        self._warm_up_sampler()
        self._warm_up_logits()
        if self.platform.capabilities.graph_capture and not self.config.model.enforce_eager:
            pool = self.platform.graph_pool_handle()
            self._capture_mixed_graphs(pool)
            self._capture_decode_graphs(pool)

    @torch.inference_mode()
    def _warm_up_logits(self) -> None:
        """Compute logits of 1, 2, 4, 8 and 16 rows once, so kernels that specialise on a small row count
        (the skinny GEMM of a small LM head) are built before the first request samples that many."""
        hidden_size = self.hf_config.get_text_config().hidden_size
        rows = 1
        while rows <= min(self.max_num_reqs, 16):
            self.model.compute_logits(torch.zeros((rows, hidden_size), dtype=self.dtype, device=self.device))
            rows *= 2

    @torch.inference_mode()
    def _warm_up_sampler(self) -> None:
        """Sample a greedy and a random row of dummy logits, in the model's dtype and (with a penalty)
        in float32, so the sampler's kernels are built before the first request. Its seeds come from a
        generator of its own: the engine's stream of seeds for unseeded requests is left as it was."""
        for random_row in (SamplingParams(temperature=1.0, top_k=2),
                           SamplingParams(temperature=1.0, top_k=2, repetition_penalty=1.1)):
            params = [SamplingParams(temperature=0.0), random_row]
            logits = torch.zeros((len(params), self.vocab_size), dtype=self.dtype, device=self.device)
            metadata = SamplingMetadata.build(params, [[0]] * len(params), [[] for _ in params],
                                              self.vocab_size, self.device, eos_token_ids=[None] * len(params),
                                              seed_source=np.random.default_rng(0))
            self.sampler(logits, metadata)

    @property
    def mixed_graphs_whole(self) -> bool:
        """Whether steps with prompt tokens replay whole graphs (requests padded too), not pieces."""
        return self.backend.captures_mixed_steps

    def mixed_graph_reqs(self, size: int) -> int:
        """The requests a whole prefill/mixed graph of ``size`` tokens is captured for (each has a token)."""
        return min(size, self.max_num_reqs)

    @torch.inference_mode()
    def _capture_mixed_graphs(self, pool: Any) -> None:
        """Graphs of steps with prompt tokens, for token counts up to ``max_mixed_graph_tokens``: whole
        when the attention backend allows it, else in pieces around attention."""
        prompt_len = self.max_model_len
        sizes = [s for s in mixed_capture_sizes(self.config.model.max_mixed_graph_tokens, self.max_num_tokens)
                 if math.ceil(s / prompt_len) <= self.max_num_reqs]
        if not sizes:
            return
        whole = self.mixed_graphs_whole
        self.mixed_graphs = WholeGraphs(self.platform, sizes, "prefill/mixed") if whole else MixedGraphs(
            self.platform, sizes)

        def context(size: int) -> ForwardContext:
            # Prompts that write nowhere (slot -1) and read the null block: the warm-up pass runs attention.
            lengths = np.full(math.ceil(size / prompt_len), prompt_len, dtype=np.int64)
            lengths[-1] = size - prompt_len * (len(lengths) - 1)
            layout = make_layout(np.arange(len(lengths)), lengths, np.zeros(len(lengths), dtype=np.int64))
            table = np.zeros((len(lengths), math.ceil(int(lengths.max()) / self.block_size)), dtype=np.int32)
            common = self._fill(layout, np.zeros(size, dtype=np.int64), np.full(size, -1, dtype=np.int64), table,
                                pad_reqs_to=self.mixed_graph_reqs(size) if whole else None)
            return self._context(common, size)

        buf = self.buffers
        self.mixed_graphs.capture(lambda size: self.model(buf.input_ids[:size], buf.positions[:size]), context, pool)

    @torch.inference_mode()
    def _capture_decode_graphs(self, pool: Any) -> None:
        self.graphs = WholeGraphs(self.platform, capture_sizes(self.max_num_reqs))
        buf = self.buffers

        def context(size: int) -> ForwardContext:
            # The graph of each size reads that size's decode layout, as its steps will fill it.
            buf.bind_decode(size, self.max_blocks_per_req)
            buf.pad(0, 0, size)
            buf.np_seq_lens[:size] = 1
            buf.upload(size, size, self.max_blocks_per_req)
            buf.flush()
            common = self._metadata(size, size, 1, 1, self.max_blocks_per_req)
            return self._context(common, size)

        def run(size: int) -> torch.Tensor:
            hidden = self.model(buf.input_ids[:size], buf.positions[:size])
            return self.model.compute_logits(hidden) if self.logits_in_decode_graphs else hidden

        self.graphs.capture(run, context, pool)
        buf.bind_general()

    # -- per-step state ------------------------------------------------------------------------
    def _update_states(self, so: SchedulerOutput) -> list[int]:
        """Drop finished requests, add new ones and apply the cached ones' new blocks and computed
        counts; returns the rows of the step's requests in ``so.req_ids`` order."""
        requests = self.requests
        for req_id in so.finished_req_ids:
            state = requests.pop(req_id, None)
            if state is not None:
                self._free_rows.append(state.row)
                self._prompt_logprob_reqs.discard(req_id)
        cached = so.scheduled_cached_reqs
        rows = [requests[r].row for r in cached.req_ids]
        if rows:
            self.num_computed[rows] = cached.num_computed_tokens
        for i, block_ids in cached.new_blocks():
            state = requests[cached.req_ids[i]]
            n = len(block_ids)
            self.block_table[state.row, state.num_blocks: state.num_blocks + n] = block_ids
            state.num_blocks += n
        for new in so.scheduled_new_reqs:
            row = self._free_rows.pop()
            tokens = list(new.prompt_token_ids) + list(new.output_token_ids)
            self.token_ids[row, : len(tokens)] = tokens
            self.num_tokens[row] = len(tokens)
            self.num_computed[row] = new.num_computed_tokens
            self.block_table[row, : len(new.block_ids)] = new.block_ids
            params = new.sampling_params
            requests[new.req_id] = RequestState(
                new.req_id, row, list(new.prompt_token_ids), list(new.output_token_ids), params,
                len(new.block_ids))
            self.sampling_state.add(row, params, new.prompt_token_ids, new.output_token_ids, self.eos_token_id)
            if params.prompt_logprobs is not None:
                self._prompt_logprob_reqs.add(new.req_id)
            rows.append(row)
        return rows

    def _metadata(self, num_reqs: int, num_tokens: int, max_query_len: int, max_seq_len: int,
                  width: int, padded_tokens: int | None = None, padded_for_graph: bool = False) -> CommonAttentionMetadata:
        buf = self.buffers
        return CommonAttentionMetadata(
            num_reqs=num_reqs, num_actual_tokens=num_tokens, max_query_len=max_query_len, max_seq_len=max_seq_len,
            query_start_loc=buf.query_start_loc[: num_reqs + 1], seq_lens=buf.seq_lens[:num_reqs],
            block_table=buf.block_table[:num_reqs, :width],
            slot_mapping=buf.slot_mapping[: padded_tokens or num_tokens],
            query_start_loc_cpu=buf.query_start_loc_host[: num_reqs + 1], seq_lens_cpu=buf.seq_lens_host[:num_reqs],
            padded_for_graph=padded_for_graph,
        )

    def _fill(self, layout: BatchLayout, input_ids: np.ndarray, slots: np.ndarray, table: np.ndarray,
              pad_to: int | None = None, pad_tokens_to: int | None = None,
              pad_reqs_to: int | None = None, group_slots: list[np.ndarray] | None = None,
              group_tables: list[np.ndarray] | None = None) -> CommonAttentionMetadata:
        """Write one step into the staging arrays, upload it, and describe it (the first KV cache group's
        view) for attention. ``group_slots`` / ``group_tables`` are the other groups' slot mappings and
        block tables (the first group's when None: a step that writes nowhere, or scratch caches).

        ``pad_to`` pads a decode batch with one-token dummy requests (a decode graph's size);
        ``pad_tokens_to`` pads the tokens (a prefill/mixed graph's size): the extra tokens write
        nowhere and belong to no request, so attention sees only the step's own. ``pad_reqs_to`` also
        pads the requests with query-less dummies (a whole prefill/mixed graph's request count)."""
        buf = self.buffers
        t, b = layout.num_tokens, len(layout.rows)
        buf.np_input_ids[:t] = input_ids
        buf.np_positions[:t] = layout.positions
        buf.np_slot_mapping[:t] = slots
        buf.np_query_start_loc[: b + 1] = layout.query_start_loc
        buf.np_seq_lens[:b] = layout.seq_lens
        width = table.shape[1]
        buf.np_block_table[:b, :width] = table
        for g in range(buf.extra_groups):
            buf.np_group_slot_mapping[g, :t] = slots if group_slots is None else group_slots[g]
            buf.np_group_block_table[g, :b, :width] = table if group_tables is None else group_tables[g]
        n_reqs, n_tokens, padded = b, t, None
        if pad_to is not None:
            buf.pad(t, b, pad_to)
            n_reqs = n_tokens = pad_to
        elif pad_tokens_to is not None and pad_tokens_to > t:
            buf.pad_tokens(t, pad_tokens_to)
            padded = pad_tokens_to
        if pad_reqs_to is not None:
            buf.pad_requests(t, b, pad_reqs_to)
            n_reqs = pad_reqs_to
        buf.upload(padded or n_tokens, n_reqs, width)
        return self._metadata(n_reqs, n_tokens, int(layout.num_scheduled.max()), int(layout.seq_lens.max()), width,
                              padded_tokens=padded, padded_for_graph=pad_reqs_to is not None)

    def _prepare(self, so: SchedulerOutput, req_ids: list[str], batch_rows: list[int],
                 reorder: bool) -> tuple[BatchLayout, StepGraph | None, CommonAttentionMetadata, list[str]]:
        """Fill the step buffers for ``req_ids`` (in rows ``batch_rows``, both in the scheduler's order);
        returns the layout, the graphs to replay (None: run eagerly), the step's attention metadata
        and the request ids in batch order.

        A pure-decode batch is ordered longest context first: attention kernels start their
        programs in batch order, so the long sequences start early and the short ones fill the
        tail of the launch instead of leaving the device waiting on a few long ones at the end.
        A mixed batch run eagerly or in pieces puts its one-token queries first, so backends can run
        them as decodes; one replayed from a whole graph puts them last, as the backend's uniform
        launches want (its prefill programs walk the batch's tokens in order).
        ``reorder=False`` keeps the scheduler's order (a grammar bitmask's rows follow it).
        """
        rows = np.array(batch_rows, dtype=np.int64)
        num_sched = np.array(so.num_scheduled_tokens, dtype=np.int64)
        if reorder and len(rows) > 1:
            pure_decode = len(rows) == so.total_num_scheduled_tokens
            whole_mixed = (not pure_decode and self.mixed_graphs is not None and self.mixed_graphs_whole
                           and self.mixed_graphs.padded_size(so.total_num_scheduled_tokens) is not None)
            key = (-self.num_computed[rows] if pure_decode else
                   (num_sched == 1 if whole_mixed else num_sched > 1).astype(np.int64))
            order = np.argsort(key, kind="stable")
            rows, num_sched = rows[order], num_sched[order]
            req_ids = [req_ids[i] for i in order.tolist()]
        layout = make_layout(rows, num_sched, self.num_computed[rows])
        positions = layout.positions
        graph = None
        if layout.num_tokens == len(rows):
            size = self.graphs.padded_size(len(rows)) if self.graphs is not None else None
            graph = StepGraph(False, size) if size is not None else None
        elif self.mixed_graphs is not None:
            size = self.mixed_graphs.padded_size(layout.num_tokens)
            graph = StepGraph(True, size) if size is not None else None
        decode_size = graph.size if graph is not None and not graph.mixed else None
        width = (self.max_blocks_per_req if decode_size is not None
                 else math.ceil(int(layout.seq_lens.max()) / self.block_size))
        # Group g's blocks are every G-th column of the table from column g (all of them with one group).
        num_groups = len(self.kv_groups)
        columns = (positions // self.block_size) * num_groups
        offsets = positions % self.block_size
        slots, *group_slots = [
            self.block_table[layout.token_rows, columns + g].astype(np.int64) * self.block_size + offsets
            for g in range(num_groups)]
        interleaved = self.block_table[rows, : width * num_groups]
        table, *group_tables = [interleaved[:, g::num_groups] for g in range(num_groups)]
        if layout.num_tokens == len(rows):
            # A pure-decode step: every input in one arena, one copy (``flush``).
            self.buffers.bind_decode(decode_size or len(rows), width)
        else:
            self.buffers.bind_general()
        mixed_size = graph.size if graph is not None and graph.mixed else None
        meta = self._fill(layout, self.token_ids[layout.token_rows, positions], slots, table,
                          pad_to=decode_size, pad_tokens_to=mixed_size,
                          pad_reqs_to=self.mixed_graph_reqs(mixed_size)
                          if mixed_size is not None and self.mixed_graphs_whole else None,
                          group_slots=group_slots, group_tables=group_tables)
        return layout, graph, meta, req_ids

    def _forward(self, layout: BatchLayout, graph: StepGraph | None, meta: CommonAttentionMetadata) -> StepForward:
        t = layout.num_tokens
        if graph is not None and not graph.mixed:
            assert self.graphs is not None
            return StepForward(self.graphs.replay(graph.size)[:t], self.logits_in_decode_graphs)
        if graph is not None:
            assert self.mixed_graphs is not None
            with set_forward_context(self._context(meta, graph.size)):
                return StepForward(self.mixed_graphs.replay(graph.size)[:t], False)
        with set_forward_context(self._context(meta, t)):
            return StepForward(self.model(self.buffers.input_ids[:t], self.buffers.positions[:t]), False)

    # -- the step ------------------------------------------------------------------------------
    @torch.inference_mode()
    def execute_model(self, so: SchedulerOutput, grammar_bitmask: torch.Tensor | None = None) -> ModelRunnerOutput:
        """Run one step and wait for its tokens. ``grammar_bitmask`` has one row per *sampled*
        request, in batch order."""
        forward, layout, req_ids = self._launch_forward(so, reorder=grammar_bitmask is None)
        if forward is None:
            return ModelRunnerOutput(req_ids=[], sampled_token_ids=[], logprobs=None, prompt_logprobs=None)
        return self._collect(self._sample(req_ids, layout, forward, grammar_bitmask))

    @torch.inference_mode()
    def execute_model_async(self, so: SchedulerOutput) -> ModelRunnerOutput | None:
        """Launch this step and return the *previous* step's output (None if there was none).

        The previous step's tokens are read while this step's forward pass runs on the device;
        this step's input ids that are still in flight come straight from the previous sample
        on the device.
        """
        forward, layout, req_ids = self._launch_forward(so)
        previous = self.finish_pending()
        if forward is not None:
            self._pending = self._sample(req_ids, layout, forward, None)
        return previous

    def finish_pending(self) -> ModelRunnerOutput | None:
        """Wait for the step launched last by ``execute_model_async`` and return its output."""
        pending, self._pending = self._pending, None
        return None if pending is None else self._collect(pending)

    def _launch_forward(self, so: SchedulerOutput,
                        reorder: bool = True) -> tuple[StepForward | None, BatchLayout | None, list[str]]:
        rows = self._update_states(so)
        req_ids = so.req_ids
        if not req_ids:
            return None, None, req_ids
        self.buffers.swap()
        layout, graph, meta, req_ids = self._prepare(so, req_ids, rows, reorder)
        if self._pending is not None:
            self._patch_inflight_tokens(layout)
        self.buffers.flush()
        return self._forward(layout, graph, meta), layout, req_ids

    def _patch_inflight_tokens(self, layout: BatchLayout) -> None:
        """Copy tokens the previous (unresolved) step sampled into this step's input ids, on the device."""
        pending = self._pending
        assert pending is not None
        source = np.full(self.max_num_reqs, -1, dtype=np.int64)
        for j, state in enumerate(pending.states):
            if self.requests.get(state.req_id) is state:
                source[state.row] = j
        src = source[layout.rows]
        known = self.num_tokens[layout.rows]
        mask = (src >= 0) & (known >= layout.num_computed) & (known < layout.seq_lens)
        if not mask.any():
            return
        count = int(mask.sum())
        buf = self.buffers
        buf.np_patch_dst[:count] = layout.query_start_loc[:-1][mask] + (known - layout.num_computed)[mask]
        buf.np_patch_src[:count] = src[mask]
        buf.flush()  # a decode layout's inputs and these indices, in one copy
        dst_dev, src_dev = buf.to_device("patch_dst", count), buf.to_device("patch_src", count)
        buf.input_ids.index_copy_(0, dst_dev, pending.tokens.index_select(0, src_dev))

    def _sample(self, req_ids: list[str], layout: BatchLayout, forward: StepForward,
                grammar_bitmask: torch.Tensor | None) -> PendingSample:
        """Sample every request whose scheduled tokens reach the end of its known tokens."""
        prompt_logprobs = self._prompt_logprobs(req_ids, layout, forward) if self._prompt_logprob_reqs else None
        sampled_idx = np.nonzero(layout.seq_lens >= self.num_tokens[layout.rows])[0]
        if self.pooling is not None:  # every request of a pooling model pools (infercore.pooling)
            pooled = self.pooling.pool_step(req_ids, layout, forward.out, self.requests, self.num_tokens[layout.rows])
            sampled_idx = sampled_idx[:0]
        states = [self.requests[req_ids[i]] for i in sampled_idx]
        pending = PendingSample(req_ids, sampled_idx, states, prompt_logprobs)
        if self.pooling is not None:
            pending.pooled = pooled
        if not states:
            return pending
        n = len(states)
        if n == layout.num_tokens:  # every token is sampled (a pure-decode step): no gather
            rows_out = forward.out[:n]
        else:
            self.buffers.np_sample_index[:n] = layout.query_start_loc[1:][sampled_idx] - 1
            rows_out = forward.out[self.buffers.to_device("sample_index", n)]
        logits = rows_out if forward.is_logits else self.model.compute_logits(rows_out)
        num_outputs = np.fromiter((len(s.output_token_ids) for s in states), dtype=np.int64, count=n)
        metadata = self.sampling_state.gather(layout.rows[sampled_idx], num_outputs, grammar_bitmask,
                                              self.sampler.seed_source)
        out = self.sampler(logits, metadata)
        pending.tokens = out.sampled_token_ids
        pending.logprobs = out.logprobs
        if not self.buffers.same:
            pending.tokens_host = self._sampled_host[:n]
            pending.tokens_host.copy_(pending.tokens, non_blocking=True)
            pending.event = torch.Event(device=self.device.type)
            pending.event.record()
        return pending

    def _collect(self, pending: PendingSample) -> ModelRunnerOutput:
        """Wait for a sample, fold its tokens into the request state and describe it for the scheduler."""
        sampled: list[list[int]] = [[] for _ in pending.req_ids]
        logprobs: dict[str, Logprobs] | None = None
        if pending.states:
            if pending.event is not None:
                pending.event.synchronize()
                tokens = pending.tokens_host.tolist()
            else:
                tokens = pending.tokens.tolist()
            live_rows, live_tokens = [], []
            requests = self.requests
            for i, state, tok in zip(pending.sampled_idx.tolist(), pending.states, tokens, strict=True):
                sampled[i] = [tok]
                if requests.get(state.req_id) is not state:
                    continue  # finished or preempted while in flight; its row may be reused
                state.output_token_ids.append(tok)
                live_rows.append(state.row)
                live_tokens.append(tok)
            self._append_token_ids(np.array(live_rows, dtype=np.int64), np.array(live_tokens, dtype=np.int64))
            if pending.logprobs is not None:
                cpu = pending.logprobs.cpu()
                logprobs = {s.req_id: cpu.to_logprobs(j, s.sampling_params.logprobs)
                            for j, s in enumerate(pending.states) if s.sampling_params.logprobs is not None}
        return ModelRunnerOutput(req_ids=pending.req_ids, sampled_token_ids=sampled, logprobs=logprobs,
                                 prompt_logprobs=pending.prompt_logprobs,
                                 pooler_output=results_to_host(pending.pooled) if pending.pooled else None)

    def _append_token_ids(self, rows: np.ndarray, tokens: np.ndarray) -> None:
        """Append one token to each of ``rows`` (distinct) in the persistent token array."""
        positions = self.num_tokens[rows]
        fits = positions < self.max_model_len
        self.token_ids[rows[fits], positions[fits]] = tokens[fits]
        self.num_tokens[rows] += 1

    def _prompt_logprobs(self, req_ids: list[str], layout: BatchLayout,
                         forward: StepForward) -> dict[str, Logprobs] | None:
        """Logprobs of prompt tokens computed in this step's chunk (position p predicts token p + 1)."""
        result: dict[str, Logprobs] | None = None
        for i, req_id in enumerate(req_ids):
            state = self.requests[req_id]
            k = state.sampling_params.prompt_logprobs
            if k is None:
                continue
            start = int(layout.num_computed[i])
            end = min(start + int(layout.num_scheduled[i]), len(state.prompt_token_ids) - 1)
            if end <= start:
                continue
            q0 = int(layout.query_start_loc[i])
            rows_out = forward.out[q0: q0 + end - start]
            logits = rows_out if forward.is_logits else self.model.compute_logits(rows_out)
            targets = torch.tensor(state.prompt_token_ids[start + 1: end + 1], device=self.device)
            result = result or {}
            result[req_id] = compute_prompt_logprobs(logits, targets, k)
        return result
