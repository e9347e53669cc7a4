"""The offline API: ``LLM(model=...).generate(prompts, sampling_params)``, as in vLLM."""

from __future__ import annotations

import functools
import itertools
import os
import weakref
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from infercore.config import InfercoreConfig
from infercore.entrypoints.default_logging import show_engine_logs_by_default
from infercore.entrypoints.llm_pooling import PoolingAPI
from infercore.frontend.llm_engine import LLMEngine
from infercore.frontend.output_processor import RequestOutputKind
from infercore.lora.request import LoRARequest
from infercore.multimodal.chat_content import chat_forms, pick_rendering
from infercore.outputs import RequestOutput
from infercore.sampling_params import SamplingParams
from infercore.tokenizer import apply_chat_template

PromptType = str | list[int] | dict[str, Any]


class LLM(PoolingAPI):  # embed, classify, score, encode, reward: infercore.entrypoints.llm_pooling
    """Generate text offline with continuous batching.

    ``LLM(model="Qwen/Qwen3-0.6B", dtype="bfloat16", max_model_len=4096, ...)`` accepts vLLM's
    engine-argument names; an unknown name is an error that lists the known ones.

    :meth:`shutdown` (or leaving a ``with LLM(...) as llm:`` block) stops the engine's workers and
    frees what they hold (worker processes, Ray actors and their placement groups); an
    ``LLM`` that is garbage-collected or alive at interpreter exit is shut down then.
    """

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        if model is not None:
            kwargs["model"] = model
        if "tokenizer_mode" in kwargs and kwargs["tokenizer_mode"] in ("auto", "hf"):
            kwargs.pop("tokenizer_mode")
        show_engine_logs_by_default()
        self.config = InfercoreConfig.from_kwargs(**kwargs)
        self.llm_engine = LLMEngine(self.config)
        self._counter = itertools.count()
        # Holds the engine core, not the LLM: runs once, on shutdown(), collection or interpreter exit.
        self._shutdown = weakref.finalize(self, self.llm_engine.engine_core.shutdown)

    def shutdown(self) -> None:
        """Stop the engine and release its workers; calling it again does nothing."""
        self._shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix, so that the next ``generate`` computes every prompt in full (a
        benchmark repeating its requests measures prefill, not cache hits). Returns True when done."""
        return self.llm_engine.reset_prefix_cache()

    def get_tokenizer(self) -> Any:
        return self.llm_engine.tokenizer

    def generate(self, prompts: PromptType | Sequence[PromptType],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True, priority: list[int] | None = None,
                 lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None) -> list[RequestOutput]:
        """Generate for every prompt; outputs come back in input order. ``lora_request`` is one adapter for
        every prompt or one per prompt (None: the base model); the engine needs ``enable_lora``."""
        prompt_list = self._as_prompt_list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params] * len(prompt_list)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(prompt_list):
                raise ValueError(f"got {len(params_list)} SamplingParams for {len(prompt_list)} prompts; "
                                 "pass one, or one per prompt")
        if priority is not None and len(priority) != len(prompt_list):
            raise ValueError(f"got {len(priority)} priorities for {len(prompt_list)} prompts")
        loras = self._per_prompt_loras(lora_request, len(prompt_list))
        prompt_list = self._process_media(prompt_list)
        ids: list[str] = []
        try:
            for i, (prompt, params) in enumerate(zip(prompt_list, params_list, strict=True)):
                request_id = str(next(self._counter))
                # Offline callers want finished outputs only: no per-step RequestOutput building.
                self.llm_engine.add_request(request_id, prompt, params, priority=priority[i] if priority else 0,
                                            output_kind=RequestOutputKind.FINAL_ONLY, lora_request=loras[i])
                ids.append(request_id)
        except Exception:
            # The call fails as a whole: the prompts added before the bad one must not stay in the engine.
            self.llm_engine.abort_request(ids)
            raise
        return self._run(ids, use_tqdm)

    def chat(self, messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, use_tqdm: bool = True,
             chat_template: str | None = None, add_generation_prompt: bool = True,
             chat_template_kwargs: dict[str, Any] | None = None,
             tools: list[dict[str, Any]] | None = None,
             lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None) -> list[RequestOutput]:
        """Apply the tokenizer's chat template to each conversation, then generate (``lora_request`` as in
        :meth:`generate`)."""
        tokenizer = self.llm_engine.tokenizer
        if tokenizer is None:
            raise ValueError("chat() needs a tokenizer; do not set skip_tokenizer_init")
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        mm = self.llm_engine.input_processor.mm
        prompts: list[PromptType] = []
        for conv in conversations:
            # Image parts (image_url, image_pil) become the model's placeholder text (infercore.multimodal).
            flat, images, structured = chat_forms(conv, mm.placeholder_text if mm is not None else None)

            def render(messages: list[dict[str, Any]]) -> str:
                return apply_chat_template(tokenizer, messages, chat_template=chat_template,
                                           add_generation_prompt=add_generation_prompt, tools=tools,
                                           chat_template_kwargs=chat_template_kwargs)

            if images:  # the checkpoint's template may take image parts as such (infercore.multimodal)
                try:
                    rich: str | None = render(structured)
                except ValueError:
                    rich = None
                text = pick_rendering(rich, functools.partial(render, flat), mm.placeholder_text, len(images))
            else:
                text = render(flat)
            prompt: dict[str, Any] = {"prompt": text, "prompt_token_ids": tokenizer.encode(text, add_special_tokens=False)}
            if images:
                prompt["multi_modal_data"] = {"image": images}
            prompts.append(prompt)
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm, lora_request=lora_request)

    def _process_media(self, prompts: list[PromptType]) -> list[PromptType]:
        """Decode and process the prompts' images in threads (PIL and numpy release the GIL), before any is
        added: many images then cost a fraction of one thread's time."""
        processor = self.llm_engine.input_processor
        if processor.mm is None or sum(isinstance(p, dict) and "multi_modal_data" in p for p in prompts) < 2:
            return prompts
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            return list(pool.map(processor.with_media_processed, prompts))

    @staticmethod
    def _per_prompt_loras(lora_request: LoRARequest | Sequence[LoRARequest | None] | None,
                          num_prompts: int) -> list[LoRARequest | None]:
        if lora_request is None or isinstance(lora_request, LoRARequest):
            return [lora_request] * num_prompts
        loras = list(lora_request)
        if len(loras) != num_prompts:
            raise ValueError(f"got {len(loras)} LoRA requests for {num_prompts} prompts; pass one, or one per prompt")
        return loras

    @staticmethod
    def _as_prompt_list(prompts: PromptType | Sequence[PromptType]) -> list[PromptType]:
        if isinstance(prompts, (str, dict)):
            return [prompts]
        prompts = list(prompts)
        if prompts and all(isinstance(p, int) for p in prompts):
            return [prompts]  # one prompt given as token ids
        return prompts

    def _run(self, ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        engine = self.llm_engine
        results: dict[str, RequestOutput] = {}
        with tqdm(total=len(ids), desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True) as bar:
            while engine.has_unfinished_requests():
                for out in engine.step():
                    if out.finished:
                        self._raise_if_failed(out, [i for i in ids if i not in results])
                        results[out.request_id] = out
                        bar.update(1)
        return [results[i] for i in ids]

    def _raise_if_failed(self, out: RequestOutput, unfinished: list[str]) -> None:
        """A request that ended because a model step raised fails the whole call, with that exception
        as its cause; the call's other requests are aborted so the engine is left clean. (A request
        refused on its own, e.g. for an invalid grammar, still finishes with reason "error".)"""
        if not any(o.finish_reason == "error" for o in out.outputs):
            return
        cause = self.llm_engine.take_step_error()
        if cause is None:
            return
        self.llm_engine.abort_request([i for i in unfinished if i != out.request_id])
        raise GenerationError(f"request {out.request_id} failed because a model step raised "
                              f"{type(cause).__name__}: {cause}") from cause


class GenerationError(RuntimeError):
    """``LLM.generate`` could not finish a request (a model step raised); ``__cause__`` is the error."""
