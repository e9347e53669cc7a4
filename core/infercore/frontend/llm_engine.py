"""LLMEngine: the synchronous, in-process engine behind the offline ``LLM`` API."""

from __future__ import annotations

from typing import Any

from infercore.config import InfercoreConfig
from infercore.demo import resolve_demo_model
from infercore.engine.core import EngineCore
from infercore.frontend.input_processor import InputProcessor, ProcessedRequest
from infercore.frontend.output_processor import OutputProcessor, RequestOutputKind
from infercore.lora.checks import AdapterChecker
from infercore.lora.request import LoRARequest
from infercore.multimodal.inputs import make_multimodal_inputs
from infercore.outputs import RequestOutput
from infercore.sampling_params import SamplingParams
from infercore.startup_timeline import startup_phase
from infercore.tokenizer import get_tokenizer
from infercore.wire.messages import SchedulerStats


class LLMEngine:
    """Tokenize → EngineCore (same process) → detokenize, driven by ``step()``."""

    def __init__(self, config: InfercoreConfig) -> None:
        resolve_demo_model(config)
        self.config = config
        with startup_phase("tokenizer"):
            self.tokenizer = None if config.model.skip_tokenizer_init else get_tokenizer(config.model)
        self.engine_core = EngineCore(config)
        info = self.engine_core.model_info
        self.model_info = info
        self.input_processor = InputProcessor(self.tokenizer, info.max_model_len, info.vocab_size,
                                              config.model.max_logprobs, info.eos_token_id,
                                              info.generation_stop_ids,
                                              make_multimodal_inputs(config, self.tokenizer))
        self.output_processor = OutputProcessor(self.tokenizer)
        self.adapters = AdapterChecker(config)
        #: The scheduler's stats after the latest step (before any step: the idle engine's).
        self.last_stats: SchedulerStats = self.engine_core.scheduler.get_stats()

    def add_request(self, request_id: str, prompt: Any, params: SamplingParams, priority: int = 0,
                    cache_salt: str | None = None,
                    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
                    lora_request: LoRARequest | None = None) -> ProcessedRequest:
        self.adapters.check(lora_request)
        processed = self.input_processor.process(request_id, prompt, params, priority=priority,
                                                 cache_salt=cache_salt, lora_request=lora_request)
        self.output_processor.add_request(processed, output_kind)
        added: list[str] = []
        try:
            for req in processed.engine_requests:
                self.engine_core.add_request(req)
                added.append(req.request_id)
        except Exception:
            # The engine refused one of them (an id in use, a grammar it cannot compile): take back the
            # ones it took and forget the request, so nothing waits for outputs that never come.
            self.output_processor.abort_request(request_id)
            self.engine_core.abort_requests(added)
            raise
        return processed

    def abort_request(self, request_ids: list[str]) -> None:
        """Abort requests by the ids given to ``add_request``."""
        engine_ids: list[str] = []
        for request_id in request_ids:
            engine_ids.extend(self.output_processor.abort_request(request_id) or [request_id])
        self.engine_core.abort_requests(engine_ids)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix; False (nothing done) while requests are unfinished."""
        return self.engine_core.reset_prefix_cache()

    def take_step_error(self) -> Exception | None:
        """The exception of the latest failed model step, once (None when no step failed since)."""
        error = getattr(self.engine_core, "last_step_error", None)
        self.engine_core.last_step_error = None
        return error

    def step(self) -> list[RequestOutput]:
        outputs = self.engine_core.step()
        processed = self.output_processor.process_outputs(outputs.outputs)
        if processed.reqs_to_abort:
            self.engine_core.abort_requests(processed.reqs_to_abort)
        if outputs.stats is not None:
            self.last_stats = outputs.stats
        return processed.request_outputs

    def has_unfinished_requests(self) -> bool:
        return self.output_processor.has_unfinished_requests() or self.engine_core.has_unfinished_requests()
