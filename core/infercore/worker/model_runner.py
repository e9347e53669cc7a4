"""The model runner: one scheduled step → one flattened forward pass → sampled tokens."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from infercore.attention.backend import CommonAttentionMetadata
from infercore.config import InfercoreConfig
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.layers.pipeline_parallel import get_pp_state
from infercore.lora.setup import make_lora_manager
from infercore.platforms.interface import Platform
from infercore.startup_timeline import startup_phase
from infercore.wire.kv_layout import KVCacheLayout
from infercore.wire.messages import Logprobs
from infercore.wire.scheduler_output import ModelRunnerOutput, SchedulerOutput
from infercore.worker.attention_choice import select_attention_backend
from infercore.worker.batch_layout import BatchLayout, make_layout
from infercore.worker.graph_capture import capture_decode_graphs, capture_mixed_graphs
from infercore.worker.inflight_patch import patch_inflight_tokens
from infercore.worker.input_batch import InputBatch
from infercore.worker.kernel_builds_ahead import build_kernels_ahead
from infercore.worker.kv_cache_setup import KVCacheSetup
from infercore.worker.lora_graphs import LoRAGraphs
from infercore.worker.mixed_graphs import MixedGraphs
from infercore.worker.mm_step import make_mm_step
from infercore.worker.pending_sample import PendingSample
from infercore.worker.pooling_step import pool_step, pooled_to_host, pooling_rows_for
from infercore.worker.profile_forward import profile_forward
from infercore.worker.spec_decode_step import SpeculativeStep, make_sampler_and_step
from infercore.worker.step_buffers import StepBuffers
from infercore.worker.step_logprobs import sampled_logprobs, step_prompt_logprobs
from infercore.worker.warm_up import warm_up, warm_up_mixed_decodes
from infercore.worker.whole_graphs import WholeGraphs

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


class ModelRunner:
    """Runs the steps of one device: prepares the step's inputs from the :class:`InputBatch`, runs the
    model (eagerly or from a captured graph) and samples. Loading, the KV cache
    (:class:`KVCacheSetup`), graph capture and warm-up live in modules of their own."""

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
        self.hf_config = get_hf_config(config.model)
        self.dtype = resolve_dtype(config.model, self.hf_config, platform)
        with startup_phase("model and weights"):
            self.model = load_model(config, device, self.dtype)
        self.vocab_size = int(self.hf_config.get_text_config().vocab_size)
        self.block_size = config.cache.block_size
        self.pooling = pooling_rows_for(config, self.model)
        self.kv_setup = KVCacheSetup(config, platform, device, self.model, self.dtype, self.max_num_reqs,
                                     self.max_num_tokens, max_model_len)
        self.kv_spec, self.num_layers = self.kv_setup.spec, self.kv_setup.num_layers
        self.backend = select_attention_backend(self.model, platform, self.kv_spec, self.dtype)
        self.sampler, self.spec, positions_per_row = make_sampler_and_step(self)
        self.max_verify_len = positions_per_row  # what attention's metadata tells backends (1 + k, or 1)
        self.max_blocks_per_req = math.ceil(max_model_len / self.block_size)
        num_groups = len(self.kv_setup.groups)
        self.buffers = StepBuffers(max(self.max_num_tokens, self.max_num_reqs), self.max_num_reqs,
                                   self.max_blocks_per_req, self.device, platform.capabilities.pin_memory,
                                   kv_groups=num_groups)
        pin = platform.capabilities.pin_memory and not self.buffers.same
        self.lora = make_lora_manager(config, self.model, self.hf_config, device, self.dtype,
                                      max(self.max_num_tokens, self.max_num_reqs), pin)
        self.input_batch = InputBatch(max_num_reqs=self.max_num_reqs, max_model_len=max_model_len,
                                      block_size=self.block_size, num_kv_groups=num_groups,
                                      vocab_size=self.vocab_size, device=device, pin_memory=pin,
                                      eos_token_id=eos_token_id, adapters=self.lora,
                                      max_positions_per_row=positions_per_row)
        self.graphs: WholeGraphs | LoRAGraphs | None = None
        #: Graphs of steps with prompt tokens: whole (``captures_mixed_steps``) or in pieces around attention.
        self.mixed_graphs: WholeGraphs | MixedGraphs | None = None
        self._pending: PendingSample | None = None
        self.mm = make_mm_step(self.model, max(self.max_num_tokens, self.max_num_reqs),
                               self.hf_config.get_text_config().hidden_size, self.dtype, device)
        #: Whether decode graphs end with the LM head (not under TP, which gathers it, nor when pooling).
        self.logits_in_decode_graphs = config.parallel.tensor_parallel_size == 1 and self.pooling is None
        pp = get_pp_state()
        #: Pipeline stages: only the last samples; every stage takes sampled tokens from the scheduler's output.
        self.last_stage, self.pipelined = pp.is_last, pp.size > 1
        if self.pipelined and self.pooling is not None:
            raise ValueError("pooling models do not run with pipeline_parallel_size > 1; serve them with one stage")
        self._sampled_host = torch.zeros(self.max_num_reqs, dtype=torch.long, pin_memory=pin)
        self.kv_layout: KVCacheLayout | None = None
        self.kv_caches: list[torch.Tensor] = []
        self.builder: Any = None
        self.group_builders: list[Any] = []  # the metadata builders of the KV cache groups after the first

    def determine_num_blocks(self) -> int:
        """KV cache blocks that fit the configured budget (never more than max_num_seqs full contexts)."""
        def profile() -> None:  # the vision tower's peak (a step's encoder budget of images), then the decoder's
            if self.mm is not None:
                self.mm.profile(self.config.multimodal.max_num_encoder_input_tokens or self.max_num_tokens)
            profile_forward(self, self.max_num_tokens)

        build_kernels_ahead(self, "profiling", profile)
        return self.kv_setup.determine_num_blocks(profile)

    def _new_builders(self) -> list[Any]:
        """A metadata builder per KV cache group (each may keep buffers of its own)."""
        return [self.backend.get_builder_cls()(self.kv_spec, self.device, self.max_num_reqs, self.max_num_tokens)
                for _ in self.kv_setup.groups]

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

    def initialize_kv_cache(self, num_blocks: int) -> KVCacheLayout:
        """Allocate and bind the cache of ``num_blocks`` primary-group blocks, warm up, capture graphs;
        returns the layout (the one EngineCore's scheduler reads)."""
        layout = self.kv_setup.layout(num_blocks)
        self.kv_layout = layout
        self.kv_caches = self.kv_setup.allocate(self.backend, layout.pool_sizes)
        self.kv_setup.bind(self.model, self.backend, self.kv_caches, self.dtype)
        self.builder, *self.group_builders = self._new_builders()
        if self.spec is not None:  # a draft model's cache, in the same block tables
            self.spec.allocate(layout.pool_sizes)
        logger.info("KV cache: %s", layout.describe())
        # Pipeline stages run eagerly: their hand-over is not captured in graphs (yet).
        graphs = (self.platform.capabilities.graph_capture and not self.config.model.enforce_eager
                  and not self.pipelined)

        def passes() -> None:  # what follows, uncaptured: the warm-up, then every graph's size once
            warm_up(self)
            if graphs:
                warm_up_mixed_decodes(self)
                capture_mixed_graphs(self, None, eager_only=True)
                capture_decode_graphs(self, None, eager_only=True)

        build_kernels_ahead(self, "warm-up and graphs", passes)
        with startup_phase("warm-up"):
            warm_up(self)
            if graphs:  # the steps graphs leave eager: mixed steps larger than the largest mixed graph
                warm_up_mixed_decodes(self)
        if graphs:
            with startup_phase("graph capture"):
                pool = self.platform.graph_pool_handle()
                self.mixed_graphs = capture_mixed_graphs(self, pool)
                self.graphs = capture_decode_graphs(self, pool)
        return layout

    @property
    def mixed_graphs_whole(self) -> bool:
        """Whether steps with prompt tokens replay whole graphs (requests padded too), not pieces."""
        return self.backend.captures_mixed_steps

    def mixed_graph_reqs(self, size: int) -> int:
        """The requests a whole prefill/mixed graph of ``size`` tokens is captured for (each has a token)."""
        return min(size, self.max_num_reqs)

    def _metadata(self, num_reqs: int, num_tokens: int, max_query_len: int, max_seq_len: int,
                  width: int, padded_tokens: int | None = None, padded_for_graph: bool = False) -> CommonAttentionMetadata:
        buf = self.buffers
        # Image tokens that see their whole image (infercore.attention.visible_bounds): mm.prepare fills them.
        bounds = self.mm.visible_until(padded_tokens or num_tokens) if self.mm is not None else (None, None)
        return CommonAttentionMetadata(
            num_reqs=num_reqs, num_actual_tokens=num_tokens, max_query_len=max_query_len, max_seq_len=max_seq_len,
            query_start_loc=buf.query_start_loc[: num_reqs + 1], seq_lens=buf.seq_lens[:num_reqs],
            block_table=buf.block_table[:num_reqs, :width], slot_mapping=buf.slot_mapping[: padded_tokens or num_tokens],
            query_start_loc_cpu=buf.query_start_loc_host[: num_reqs + 1], seq_lens_cpu=buf.seq_lens_host[:num_reqs],
            padded_for_graph=padded_for_graph, visible_until=bounds[0], visible_until_cpu=bounds[1],
            max_verify_len=self.max_verify_len,
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
        batch = self.input_batch
        rows = np.array(batch_rows, dtype=np.int64)
        num_sched = np.array(so.num_scheduled_tokens, dtype=np.int64)
        if reorder and len(rows) > 1:
            pure_decode = len(rows) == so.total_num_scheduled_tokens
            whole_mixed = (not pure_decode and self.mixed_graphs is not None and self.mixed_graphs_whole
                           and self.mixed_graphs.padded_size(so.total_num_scheduled_tokens) is not None)
            key = (-batch.num_computed[rows] if pure_decode else
                   (num_sched == 1 if whole_mixed else num_sched > 1).astype(np.int64))
            order = np.argsort(key, kind="stable")
            rows, num_sched = rows[order], num_sched[order]
            req_ids = [req_ids[i] for i in order.tolist()]
        layout = make_layout(rows, num_sched, batch.num_computed[rows])
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
        num_groups = len(self.kv_setup.groups)
        columns = (positions // self.block_size) * num_groups
        offsets = positions % self.block_size
        slots, *group_slots = [
            batch.block_table[layout.token_rows, columns + g].astype(np.int64) * self.block_size + offsets
            for g in range(num_groups)]
        interleaved = batch.block_table[rows, : width * num_groups]
        table, *group_tables = [interleaved[:, g::num_groups] for g in range(num_groups)]
        if layout.num_tokens == len(rows):
            # A pure-decode step: every input in one arena, one copy (``flush``).
            self.buffers.bind_decode(decode_size or len(rows), width)
        else:
            self.buffers.bind_general()
        mixed_size = graph.size if graph is not None and graph.mixed else None
        meta = self._fill(layout, batch.token_ids[layout.token_rows, positions], slots, table,
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

    @torch.inference_mode()
    def execute_model(self, so: SchedulerOutput, grammar_bitmask: torch.Tensor | None = None) -> ModelRunnerOutput:
        """Run one step and wait for its tokens. ``grammar_bitmask`` has one row per *sampled*
        request, in batch order."""
        forward, layout, req_ids = self._launch_forward(so, reorder=grammar_bitmask is None)
        if forward is None:
            return ModelRunnerOutput(req_ids=[], sampled_token_ids=[], logprobs=None, prompt_logprobs=None)
        return self._collect(self._sample(req_ids, layout, forward, grammar_bitmask, so.draft_next))

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
            self._pending = self._sample(req_ids, layout, forward, None, so.draft_next)
        return previous

    def finish_pending(self) -> ModelRunnerOutput | None:
        """Wait for the step launched last by ``execute_model_async`` and return its output."""
        pending, self._pending = self._pending, None
        return None if pending is None else self._collect(pending)

    def _launch_forward(self, so: SchedulerOutput,
                        reorder: bool = True) -> tuple[StepForward | None, BatchLayout | None, list[str]]:
        rows = self.input_batch.update(so)
        if self.mm is not None:
            self.mm.update(so)
        req_ids = so.req_ids
        if not req_ids:
            return None, None, req_ids
        self.buffers.swap()
        layout, graph, meta, req_ids = self._prepare(so, req_ids, rows, reorder)
        if self.lora is not None:  # each token's adapter slot (and the padding's: none)
            self.lora.state.set_step(self.input_batch.adapter_slot[layout.token_rows],
                                     graph.size if graph else layout.num_tokens)
        if self._pending is not None:
            patch_inflight_tokens(self._pending, self.input_batch, self.buffers, self.max_num_reqs, layout)
        if self.mm is not None:  # the images the step's tokens reach (infercore.worker.mm_step)
            self.mm.prepare(req_ids, layout)
        self.buffers.flush()
        return self._forward(layout, graph, meta), layout, req_ids

    def _sample(self, req_ids: list[str], layout: BatchLayout, forward: StepForward,
                grammar_bitmask: torch.Tensor | None, draft_next: bool = True) -> PendingSample:
        """Sample every request whose scheduled tokens reach the end of its known tokens (on the last
        pipeline stage; the others only pass the step on); ``draft_next``: whether a proposer drafts for the
        next step (``SchedulerOutput.draft_next``)."""
        batch = self.input_batch
        if not self.last_stage:
            return PendingSample(req_ids, np.zeros(0, dtype=np.int64), [], None)
        prompt_logprobs = (step_prompt_logprobs(batch, req_ids, layout, forward.out, self._logits_of(forward),
                                                self.device) if batch.prompt_logprob_reqs else None)
        sampled_idx = np.nonzero(layout.seq_lens >= batch.num_tokens[layout.rows])[0]
        if self.pooling is not None:  # a pooling model pools every request instead (infercore.pooling)
            return pool_step(self.pooling, req_ids, layout, forward.out, batch, prompt_logprobs)
        states = [batch.requests[req_ids[i]] for i in sampled_idx]
        pending = PendingSample(req_ids, sampled_idx, states, prompt_logprobs, layout=layout, draft_next=draft_next)
        if not states:  # a model-based proposer still catches up on the step's prompt tokens, in the step
            if self.spec is not None:
                self.spec.sampled_in_step(batch, pending, torch.zeros(0, dtype=torch.int64, device=self.device))
            return pending
        n = len(states)
        if self.spec is not None and batch.num_drafts[layout.rows[sampled_idx]].any():
            self.spec.verify(batch, forward.out, layout.query_start_loc[1:][sampled_idx], layout.rows[sampled_idx],
                             states, self._logits_of(forward), grammar_bitmask, pending)
            return self._copy_to_host(pending, pending.verified.counts_and_tokens)
        if n == layout.num_tokens:  # every token is sampled (a pure-decode step): no gather
            rows_out = forward.out[:n]
        else:
            self.buffers.np_sample_index[:n] = layout.query_start_loc[1:][sampled_idx] - 1
            rows_out = forward.out[self.buffers.to_device("sample_index", n)]
        logits = rows_out if forward.is_logits else self.model.compute_logits(rows_out)
        num_outputs = np.fromiter((len(s.output_token_ids) for s in states), dtype=np.int64, count=n)
        metadata = batch.sampling.gather(layout.rows[sampled_idx], num_outputs, grammar_bitmask,
                                              self.sampler.seed_source)
        out = self.sampler(logits, metadata)
        pending.logprobs = out.logprobs
        rows = self.spec.sampled_in_step(batch, pending, out.sampled_token_ids) if self.spec is not None else None
        return self._copy_to_host(pending, out.sampled_token_ids if rows is None else rows)

    def _logits_of(self, forward: StepForward) -> Callable[[torch.Tensor], torch.Tensor]:
        """Rows of ``forward.out`` → their logits."""
        return (lambda rows: rows) if forward.is_logits else self.model.compute_logits

    def _copy_to_host(self, pending: PendingSample, tokens: torch.Tensor) -> PendingSample:
        """Start the copy of a step's ``tokens`` to the host; ``_collect`` waits for it."""
        pending.tokens = tokens
        if not self.buffers.same:
            pending.tokens_host = (self._sampled_host[: len(tokens)] if self.spec is None or tokens.dim() == 1
                                   else self.spec.host_rows(len(tokens)))
            pending.tokens_host.copy_(tokens, non_blocking=True)
            pending.event = torch.Event(device=self.device.type)
            pending.event.record()
        return pending

    def _collect(self, pending: PendingSample) -> ModelRunnerOutput:
        """Wait for a sample, fold its tokens into the request state and describe it for the scheduler."""
        sampled: list[list[int]] = [[] for _ in pending.req_ids]
        logprobs: dict[str, Logprobs] | None = None
        drafts: list[list[int]] | None = None
        if pending.states:
            if pending.event is not None:
                pending.event.synchronize()
            tokens = (pending.tokens if pending.event is None else pending.tokens_host).tolist()
            verified = pending.verified
            per_row = SpeculativeStep.tokens_of(tokens) if verified is not None else [[tok] for tok in tokens]
            for i, toks in zip(pending.sampled_idx.tolist(), per_row, strict=True):
                sampled[i] = toks
            if verified is not None:
                self.input_batch.append_verified(pending.states, per_row)
            elif not self.pipelined:  # pipeline stages get the tokens with the request's next step
                self.input_batch.append_sampled(pending.states, tokens)
            if pending.logprobs is not None:
                first = verified.first_position if verified is not None else range(len(per_row))
                logprobs = sampled_logprobs(pending.logprobs, first, per_row, pending.states)
        if self.spec is not None:  # a model-based proposer also catches up on steps that sampled nothing
            drafts = self.spec.step_drafts(self.input_batch, pending)
        return ModelRunnerOutput(req_ids=pending.req_ids, sampled_token_ids=sampled, logprobs=logprobs,
                                 prompt_logprobs=pending.prompt_logprobs, draft_token_ids=drafts,
                                 pooler_output=pooled_to_host(pending))
