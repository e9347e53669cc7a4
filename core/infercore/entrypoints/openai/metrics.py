"""Prometheus metrics of the server: engine gauges, prefix-cache and token counters, latency histograms.

With several API server processes (``--api-server-count``) every process records into the
prometheus_client multiprocess folder (``PROMETHEUS_MULTIPROC_DIR``, set by the launcher) and
``/metrics`` on any of them renders the sum over all: request counters and histograms add up, the
engine gauges (which every API server receives alike) show the most recent value, the prefix-cache and
preemption counters (engine totals, not per-server events) are counted by API server 0 alone, and
``infercore:api_server_requests`` counts the requests each API server handled.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from infercore.frontend.async_llm import RequestTiming, StatsListener
from infercore.wire.messages import SchedulerStats

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0, 120.0)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5)


class ServerMetrics(StatsListener):
    """Collects what AsyncLLM reports into a private Prometheus registry (labelled with the model name).

    ``api_server`` is this process's index when it is one of several API server processes (the
    multiprocess mode of the module docstring); None for the one API process."""

    def __init__(self, model_name: str, api_server: int | None = None) -> None:
        if api_server is not None and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            raise RuntimeError("several API server processes need PROMETHEUS_MULTIPROC_DIR set before "
                               "prometheus_client is imported")
        self.registry = CollectorRegistry()
        self.api_server = api_server
        labels = ["model_name"]
        r = self.registry
        mode = "mostrecent"  # every API server receives the same engine stats
        self.running = Gauge("infercore:num_requests_running", "Requests running in the engine", labels, registry=r,
                             multiprocess_mode=mode)
        self.waiting = Gauge("infercore:num_requests_waiting", "Requests waiting to run", labels, registry=r,
                             multiprocess_mode=mode)
        self.kv_usage = Gauge("infercore:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1)",
                              labels, registry=r, multiprocess_mode=mode)
        self.free_blocks = Gauge("infercore:kv_cache_free_blocks", "Free KV cache blocks", labels, registry=r,
                                 multiprocess_mode=mode)
        self.total_blocks = Gauge("infercore:kv_cache_total_blocks", "KV cache blocks in all", labels, registry=r,
                                  multiprocess_mode=mode)
        self.prefix_queries = Counter("infercore:prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
                                      labels, registry=r)
        self.prefix_hits = Counter("infercore:prefix_cache_hits", "Prompt tokens found in the prefix cache",
                                   labels, registry=r)
        self.preemptions = Counter("infercore:num_preemptions", "Requests preempted", labels, registry=r)
        # Speculative decoding, with vLLM's names: a draft is one request's run of draft tokens in a step.
        self.spec_drafts = Counter("infercore:spec_decode_num_drafts", "Verified runs of draft tokens", labels,
                                   registry=r)
        self.spec_draft_tokens = Counter("infercore:spec_decode_num_draft_tokens", "Draft tokens verified", labels,
                                         registry=r)
        self.spec_accepted = Counter("infercore:spec_decode_num_accepted_tokens", "Draft tokens accepted", labels,
                                     registry=r)
        self.spec_accepted_per_pos = Counter("infercore:spec_decode_num_accepted_tokens_per_pos",
                                             "Draft tokens accepted at each draft position", labels + ["position"],
                                             registry=r)
        self.prompt_tokens = Counter("infercore:prompt_tokens", "Prompt tokens of finished requests", labels,
                                     registry=r)
        self.generation_tokens = Counter("infercore:generation_tokens", "Tokens generated", labels, registry=r)
        self.requests = Counter("infercore:request_success", "Finished requests by finish reason",
                                labels + ["finished_reason"], registry=r)
        self.ttft = Histogram("infercore:time_to_first_token_seconds", "Time to first token", labels,
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("infercore:time_per_output_token_seconds", "Mean time per output token after the first",
                              labels, buckets=_TOKEN_BUCKETS, registry=r)
        self.e2e = Histogram("infercore:e2e_request_latency_seconds", "Arrival to finish", labels,
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.server_requests = Counter(
            "infercore:api_server_requests", "Requests handled by each API server process (finished or aborted)",
            labels + ["api_server"], registry=r) if api_server is not None else None
        self.model_name = model_name
        self._last_totals: dict[int, int] = {}
        #: Engine totals are counted once: by the only API process, or by API server 0 of several.
        self._counts_engine_totals = api_server in (None, 0)
        self._render_registry = self.registry
        if api_server is not None:
            self._render_registry = CollectorRegistry()
            MultiProcessCollector(self._render_registry)

    def on_engine_stats(self, stats: SchedulerStats) -> None:
        m = self.model_name
        self.running.labels(m).set(stats.num_running)
        self.waiting.labels(m).set(stats.num_waiting)
        self.kv_usage.labels(m).set(stats.kv_cache_usage)
        self.free_blocks.labels(m).set(stats.num_free_blocks)
        self.total_blocks.labels(m).set(stats.num_total_blocks)
        if not self._counts_engine_totals:
            return
        # The engine reports running totals; Prometheus counters take the increase since the last report.
        totals = [(self.prefix_queries.labels(m), stats.prefix_cache_queries),
                  (self.prefix_hits.labels(m), stats.prefix_cache_hits),
                  (self.preemptions.labels(m), stats.num_preemptions)]
        if stats.spec_num_accepted_tokens_per_pos:
            totals += [(self.spec_drafts.labels(m), stats.spec_num_drafts),
                       (self.spec_draft_tokens.labels(m), stats.spec_num_draft_tokens),
                       (self.spec_accepted.labels(m), stats.spec_num_accepted_tokens)]
            totals += [(self.spec_accepted_per_pos.labels(m, str(pos)), total)
                       for pos, total in enumerate(stats.spec_num_accepted_tokens_per_pos)]
        for child, total in totals:
            increase = total - self._last_totals.get(id(child), 0)
            self._last_totals[id(child)] = total
            if increase > 0:
                child.inc(increase)

    def on_request_done(self, timing: RequestTiming) -> None:
        m = self.model_name
        self.prompt_tokens.labels(m).inc(timing.num_prompt_tokens)
        self.generation_tokens.labels(m).inc(timing.num_output_tokens)
        if self.server_requests is not None:
            self.server_requests.labels(m, str(self.api_server)).inc()
        for reason in ["abort"] if timing.aborted else timing.finish_reasons:
            self.requests.labels(m, reason).inc()
        end = timing.finished or timing.arrival
        self.e2e.labels(m).observe(end - timing.arrival)
        if timing.first_token is not None:
            self.ttft.labels(m).observe(timing.first_token - timing.arrival)
            if timing.num_output_tokens > 1:
                self.tpot.labels(m).observe((end - timing.first_token) / (timing.num_output_tokens - 1))

    def render(self) -> bytes:
        """The exposition text: this process's metrics, or with several API servers all of theirs."""
        return generate_latest(self._render_registry)
