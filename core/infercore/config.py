"""Engine configuration: typed sub-configs gathered in :class:`InfercoreConfig`.

Each sub-config reads ``INFERCORE_<FIELD>`` environment variables (pydantic-settings); the CLI
flags (``--max-model-len``) and the Python API's keyword arguments (``max_model_len=``) use the
same flat field names, which are unique across sub-configs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from infercore.cpus import available_cpus
from infercore.multimodal_config import MultiModalConfig
from infercore.speculative_config import SpeculativeConfig

_SETTINGS = SettingsConfigDict(env_prefix="INFERCORE_", extra="forbid", validate_assignment=True)

DEMO_MODEL = "infercore-demo"


class ModelConfig(BaseSettings):
    """Which model, its dtype and length limits."""

    model_config = _SETTINGS

    model: str = Field(DEMO_MODEL, description="Hugging Face repo id or local folder of the model")
    tokenizer: str | None = Field(None, description="tokenizer repo id or folder (default: the model's)")
    revision: str | None = Field(None, description="model revision (branch, tag or commit) on the hub")
    dtype: Literal["auto", "float32", "bfloat16", "float16", "half", "float", "bf16", "fp32", "fp16"] = Field(
        "auto", description="weight and activation dtype; auto takes the platform's default")
    max_model_len: int | None = Field(None, ge=1, description="max tokens (prompt + output) per request")
    seed: int = Field(0, description="random seed for weight init (dummy load) and unseeded sampling")
    trust_remote_code: bool = Field(False, description="allow code from the model folder to run")
    skip_tokenizer_init: bool = Field(False, description="take and return token ids only")
    served_model_name: str | None = Field(None, description="model name the API reports and accepts")
    max_logprobs: int = Field(20, ge=0, le=1024, description="max logprobs/prompt_logprobs per request")
    enforce_eager: bool = Field(False, description="never capture device graphs")
    max_mixed_graph_tokens: int = Field(
        2048, ge=0, le=2048, description="steps with prompt tokens of up to this many tokens replay captured "
        "graphs (0: run them eagerly; 2048, the largest size captured, is the most)")
    hf_overrides: dict[str, Any] | str | None = Field(
        None, description="JSON object of values set on the model's HF config after it is read, e.g. "
        '{"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"], '
        '"is_original_qwen3_reranker": true} to serve a Qwen3-Reranker checkpoint as a scorer')
    quantization: str | None = Field(
        None, description="quantization method (e.g. fp8); default: the checkpoint's quantization_config. "
                          "Given for an unquantized checkpoint, its weights are quantized as they load")


class CacheConfig(BaseSettings):
    """Paged KV cache size and prefix caching."""

    model_config = _SETTINGS

    block_size: int = Field(16, ge=1, le=1024, description="tokens per KV cache block")
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0,
                                          description="fraction of device memory the engine may use")
    kv_cache_memory_bytes: int | None = Field(None, ge=1, description="bytes for the KV cache (overrides sizing)")
    num_gpu_blocks_override: int | None = Field(None, ge=1, description="number of KV cache blocks (overrides sizing)")
    enable_prefix_caching: bool = Field(True, description="reuse KV blocks of identical prompt prefixes")
    disable_hybrid_kv_cache_manager: bool = Field(
        False, description="one block table for every layer even when their windows differ (Gemma 3): "
        "sliding layers then keep every block, as global ones do")
    kv_cache_dtype: Literal["auto", "float32", "bfloat16", "float16", "fp8", "fp8_e4m3"] = Field(
        "auto", description="KV cache dtype; fp8 (alias fp8_e4m3) stores e4m3 entries with the checkpoint's "
        "per-layer k/v scales (1.0 when it has none)")


class SchedulerConfig(BaseSettings):
    """How each step's token budget is spent."""

    model_config = _SETTINGS

    max_num_seqs: int = Field(256, ge=1, le=65536, description="max requests running at once")
    max_num_batched_tokens: int | None = Field(None, ge=1, description="token budget per step")
    max_num_batched_tokens_while_decoding: int | None = Field(
        None, ge=1, description="token budget of a step while requests decode: their tokens count against "
        "it and prompts get the rest, so a decode never waits on a bigger step (default: the whole budget)")
    max_prefill_tokens_per_decode: int | None = Field(
        16, ge=1, description="while requests decode, a step's prompt tokens are at most this many per "
        "decoding request (never fewer than 512), so a new prompt never stalls the running streams for "
        "long: bounded inter-token latency. Applies below per_decode_bound_below_load only (None: off)")
    per_decode_bound_below_load: float = Field(
        0.5, gt=0.0, le=1.0, description="max_prefill_tokens_per_decode applies while the requests in the "
        "engine (running and waiting) are fewer than this fraction of max_num_seqs; at higher load the "
        "engine is near full, throughput comes first and prompts prefill in steps of the whole budget")
    enable_chunked_prefill: bool = Field(True, description="split long prompts across steps")
    scheduling_policy: Literal["fcfs", "priority"] = Field("fcfs", description="order of waiting requests")
    max_num_queued_requests: int | None = Field(None, ge=1, description="reject new requests past this many waiting")
    async_scheduling: bool | None = Field(
        None, description="prepare step N+1 while step N runs on the device (default: on where graphs are captured)")


class ParallelConfig(BaseSettings):
    """How the model is spread over devices and processes."""

    model_config = _SETTINGS

    tensor_parallel_size: int = Field(1, ge=1, description="devices each layer is split over (one worker each)")
    pipeline_parallel_size: int = Field(
        1, ge=1, description="pipeline stages: each holds a contiguous run of the decoder layers (and "
        "tensor_parallel_size workers); several steps are in the pipe at once")
    data_parallel_size: int = Field(1, ge=1, description="engine copies behind one server, each with its own devices")
    data_parallel_rank: int = Field(0, ge=0, description="which data-parallel engine this is (set by the server)")
    data_parallel_master_ip: str = Field(
        "127.0.0.1", description="address where the data-parallel engines meet (expert parallelism across "
                                 "them); data-parallel engine 0 listens there")
    data_parallel_master_port: int | None = Field(
        None, ge=1, le=65535, description="port where the data-parallel engines meet (default: a free one, "
                                          "chosen when the engines start)")
    enable_expert_parallel: bool = Field(
        False, description="split MoE layers' experts whole over the ranks (each engine's tensor-parallel "
                           "ranks; with data_parallel_size > 1 every engine's ranks, the engines then "
                           "stepping together) instead of sharding every expert; tokens are exchanged "
                           "all-to-all and steps run without device graphs")
    distributed_executor_backend: str | None = Field(
        None, description="how workers run: uni (in the engine process), mp (a process per device) or ray "
                          "(Ray actors; pip install infercore[ray]); default: uni for one device, mp otherwise")
    pipeline_stage_placement: Literal["pack", "spread"] = Field(
        "pack", description="ray executor: 'spread' puts each pipeline stage on a node of its own (the "
        "bundles of its workers together there), 'pack' lets Ray pack the workers' bundles")
    worker_timeout: float = Field(300.0, gt=0, description="seconds a worker may take to answer one step before "
                                                           "the engine declares it hung and stops")
    cpu_threads: int | None = Field(None, ge=1, description="torch threads on the CPU platform (per worker)")

    @model_validator(mode="after")
    def _check(self) -> ParallelConfig:
        if self.data_parallel_rank >= self.data_parallel_size:
            raise ValueError(f"data_parallel_rank {self.data_parallel_rank} is outside data_parallel_size "
                             f"{self.data_parallel_size}")
        if self.distributed_executor_backend in ("uni", "uniproc") and self.world_size > 1:
            raise ValueError("the uni executor runs one device; use --distributed-executor-backend mp or ray "
                             "for tensor_parallel_size or pipeline_parallel_size > 1")
        return self

    @property
    def world_size(self) -> int:
        """Workers of one engine: ``tensor_parallel_size * pipeline_parallel_size``."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def executor_backend(self) -> str:
        """The executor to run: the configured one, else ``uni`` for one device and ``mp`` for more."""
        if self.distributed_executor_backend:
            return self.distributed_executor_backend
        return "uni" if self.world_size == 1 else "mp"


class LoadConfig(BaseSettings):
    """Where the weights come from."""

    model_config = _SETTINGS

    load_format: Literal["auto", "safetensors", "pt", "dummy"] = Field("auto", description="weight format; dummy = random")
    download_dir: str | None = Field(None, description="hub cache folder")


class StructuredOutputsConfig(BaseSettings):
    """Grammar backends for constrained decoding."""

    model_config = _SETTINGS

    structured_outputs_backend: str = Field("auto", description="grammar backend name, or auto")
    grammar_cache_size: int = Field(256, ge=1, description="compiled grammars kept in memory")
    grammar_compile_timeout: float = Field(10.0, gt=0, description="seconds before a grammar compile fails")


class SpeculativeSettings(BaseSettings):
    """Speculative decoding (off unless configured)."""

    model_config = _SETTINGS

    speculative_config: SpeculativeConfig | None = Field(
        None, description='speculative decoding as JSON with vLLM\'s keys, e.g. {"method": "ngram", '
        '"num_speculative_tokens": 3, "prompt_lookup_max": 4}')


class ServeConfig(BaseSettings):
    """The OpenAI-compatible server."""

    model_config = _SETTINGS

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on")
    api_key: str | None = Field(None, description="require this bearer key on every route but /health and /version")
    allowed_origins: list[str] = Field(default_factory=list, description="CORS origins allowed")
    disable_log_requests: bool = Field(False, description="do not log each request")
    shutdown_timeout: float = Field(30.0, ge=0, description="seconds to finish in-flight requests on SIGTERM")
    chat_template: str | None = Field(None, description="chat template file or string overriding the tokenizer's")
    tool_call_parser: str | None = Field(None, description="tool-call parser name")
    enable_auto_tool_choice: bool = Field(False, description="let the model choose to call tools")
    reasoning_parser: str | None = Field(None, description="reasoning parser name")
    max_request_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="largest request body accepted")
    max_sequences_per_request: int = Field(
        1024, ge=1, description="most sequences one request may ask for (prompts x n)")
    request_read_timeout: float = Field(
        30.0, gt=0, description="seconds a client may take to send a request's headers and body")
    request_header_timeout: float = Field(
        5.0, gt=0, description="seconds a client may take to send a request's headers, from the connection's "
                               "opening (or the request's first byte on a kept-alive connection)")
    max_connections: int = Field(4096, ge=1, description="most client connections held open at once")
    max_connections_per_client: int = Field(
        1024, ge=1, description="most connections one client address may hold open at once (behind a proxy, "
                                "every client has the proxy's address: raise it there)")
    http_parser: Literal["auto", "httptools", "h11"] = Field(
        "auto", description="HTTP/1.1 parser: httptools (C, the default where installed) or h11 (pure Python)")
    uvicorn_log_level: str = Field("warning", description="log level of the HTTP server")
    api_server_count: int | None = Field(
        None, ge=1, le=64, description="HTTP server processes sharing the listening socket, each with its own "
                                       "connection to the engine(s) (default: one per 4 usable CPUs, at most 4; "
                                       "1 with --allow-runtime-lora-updating)")


#: Usable CPUs per API server process that ``--api-server-count``'s default allows, and its largest count.
CPUS_PER_API_SERVER, MAX_DEFAULT_API_SERVERS = 4, 4


def default_api_server_count(runtime_lora_updating: bool, cpus: int | None = None) -> int:
    """API server processes when ``--api-server-count`` is not given: one per :data:`CPUS_PER_API_SERVER`
    usable CPUs (``cpus``, default: this process's), at most :data:`MAX_DEFAULT_API_SERVERS`. At high
    concurrency one process's HTTP and streaming work falls behind a fast engine; a small machine keeps one.
    Adapters loaded at run time are known only to the process that loaded them, so then it is one."""
    if runtime_lora_updating:
        return 1
    usable = available_cpus() if cpus is None else cpus
    return max(1, min(MAX_DEFAULT_API_SERVERS, usable // CPUS_PER_API_SERVER))


class LoRAConfig(BaseSettings):
    """Serving LoRA adapters beside the base model (multi-LoRA batching)."""

    model_config = _SETTINGS

    enable_lora: bool = Field(False, description="serve LoRA adapters (requests name one with lora_request)")
    max_loras: int = Field(1, ge=1, le=256, description="distinct adapters on the device at once (and in one step)")
    max_lora_rank: int = Field(16, ge=1, le=512, description="largest adapter rank accepted")
    max_cpu_loras: int | None = Field(
        None, ge=1, description="adapters kept loaded in host memory (least recently used dropped first; "
                                "default: max_loras)")
    lora_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="dtype of the adapter weights on the device (auto: the model's)")
    lora_modules: list[str] = Field(
        default_factory=list, description="adapters the server offers as models, each name=path")
    allow_runtime_lora_updating: bool = Field(
        False, description="let clients load and unload adapters while the server runs "
                           "(POST /v1/load_lora_adapter, /v1/unload_lora_adapter): they name server paths")

    @model_validator(mode="after")
    def _check(self) -> LoRAConfig:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) is smaller than max_loras ({self.max_loras}); "
                             "raise it or leave it unset")
        return self


class PoolingRunnerConfig(BaseSettings):
    """Whether the engine generates or pools, and how it pools (resolved in :mod:`infercore.pooling.config`)."""

    model_config = _SETTINGS

    runner: Literal["auto", "generate", "pooling"] = Field(
        "auto", description="generate tokens, or pool each prompt into a vector (embeddings, scores); auto: "
        "pooling for embedding and classification architectures, generate otherwise")
    convert: Literal["auto", "none", "embed", "classify", "reward"] = Field(
        "auto", description="use a generative checkpoint as an embedder, classifier or reward model")
    task: Literal["auto", "generate", "embed", "embedding", "classify", "score", "reward"] | None = Field(
        None, description="older name for runner/convert (embed, classify, score, reward, generate)")
    pooler_config: dict[str, Any] | str | None = Field(
        None, description="JSON object overriding the pooler's defaults: pooling_type (LAST, CLS, MEAN, ALL, "
        "STEP), normalize, dimensions, activation, step_tag_id, returned_token_ids")


SECTIONS: dict[str, type[BaseSettings]] = {
    "model": ModelConfig,
    "cache": CacheConfig,
    "scheduler": SchedulerConfig,
    "parallel": ParallelConfig,
    "load": LoadConfig,
    "structured_outputs": StructuredOutputsConfig,
    "speculative": SpeculativeSettings,
    "serve": ServeConfig,
    "lora": LoRAConfig,
    "pooling": PoolingRunnerConfig,
    "multimodal": MultiModalConfig,
}


def field_section() -> dict[str, str]:
    """Map every flat field name to the section that owns it."""
    out: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for name in cls.model_fields:
            assert name not in out, f"config field {name} is defined twice"
            out[name] = section
    return out


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""


def _format_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return "invalid configuration: " + "; ".join(parts)


class InfercoreConfig(BaseModel):
    """Everything the engine is configured with."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    load: LoadConfig = Field(default_factory=LoadConfig)
    structured_outputs: StructuredOutputsConfig = Field(default_factory=StructuredOutputsConfig)
    speculative: SpeculativeSettings = Field(default_factory=SpeculativeSettings)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    pooling: PoolingRunnerConfig = Field(default_factory=PoolingRunnerConfig)
    multimodal: MultiModalConfig = Field(default_factory=MultiModalConfig)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> InfercoreConfig:
        """Build from flat engine-argument names (``max_model_len=...``), rejecting unknown ones."""
        owners = field_section()
        unknown = sorted(k for k in kwargs if k not in owners)
        if unknown:
            raise ConfigError(
                f"unknown engine argument(s): {', '.join(unknown)}. Known arguments: {', '.join(sorted(owners))}"
            )
        grouped: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for key, value in kwargs.items():
            grouped[owners[key]][key] = value
        try:
            sections = {s: SECTIONS[s](**vals) for s, vals in grouped.items()}
            return cls(**sections)
        except ValidationError as exc:
            raise ConfigError(_format_validation_error(exc)) from None

    @model_validator(mode="after")
    def _expert_parallel_runs_eagerly(self) -> InfercoreConfig:
        # The all-to-all token exchange sizes its buffers from counts read on the host: no graph capture.
        par = self.parallel
        if par.enable_expert_parallel and par.tensor_parallel_size * par.data_parallel_size > 1:
            self.model.enforce_eager = True
        if par.enable_expert_parallel and par.data_parallel_size > 1:
            # Data-parallel engines step together (each step one forward pass on every engine): one
            # step at a time, never one launched ahead.
            self.scheduler.async_scheduling = False
            if par.pipeline_parallel_size > 1:
                raise ValueError("expert parallelism across data-parallel engines does not run with pipeline "
                                 "stages yet; use --pipeline-parallel-size 1 or drop --enable-expert-parallel")
            if self.speculative.speculative_config is not None:
                # A proposer's own forward passes are not matched by the idle engines' dummy steps.
                raise ValueError("speculative decoding is not supported with expert parallelism across "
                                 "data-parallel engines; drop --speculative-config or --enable-expert-parallel")
        return self

    @model_validator(mode="after")
    def _api_server_count(self) -> InfercoreConfig:
        # Resolved once, here: every process of a server reads the same count from the config it is sent.
        if self.serve.api_server_count is None:
            self.serve.api_server_count = default_api_server_count(self.lora.allow_runtime_lora_updating)
        return self

    @model_validator(mode="after")
    def _pipeline_stages_supported(self) -> InfercoreConfig:
        if self.parallel.pipeline_parallel_size == 1:
            return self
        if self.speculative.speculative_config is not None:
            raise ValueError("speculative decoding does not run with pipeline_parallel_size > 1; turn one off")
        if self.lora.enable_lora:
            raise ValueError("LoRA adapters do not run with pipeline_parallel_size > 1; turn one off")
        return self

    def flat(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for section in SECTIONS:
            out.update(getattr(self, section).model_dump())
        return out
