"""Front door of the engine: tokenize and validate a prompt, and build the engine's requests."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from transformers import PreTrainedTokenizerBase

from infercore.lora.request import LoRARequest
from infercore.multimodal.inputs import MultiModalInputs
from infercore.multimodal.media import MediaError
from infercore.sampling_params import SamplingParams, SamplingParamsError
from infercore.structured_output.admission import check_constraint
from infercore.wire.messages import EngineCoreRequest
from infercore.wire.multimodal import MultiModalFeature

#: The engine process decodes SamplingParams with this type; decoding here first turns what it would
#: refuse (a string where a list belongs, a nesting it cannot recurse into) into this request's error.
_WIRE_ENCODER = msgspec.msgpack.Encoder()
_WIRE_DECODER = msgspec.msgpack.Decoder(SamplingParams)


#: Most characters a text prompt may have per token of max_model_len. Tokenizers average 3-5 characters
#: a token on prose and code; 32 leaves room for long runs of spaces or symbols that merge into long
#: tokens, while a prompt past it is refused before the tokenizer spends seconds on it.
MAX_CHARS_PER_TOKEN = 32


class InputError(ValueError):
    """A request the engine can't run; the message says what to change, ``param`` names the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ProcessedRequest:
    """A validated request: its prompt and the engine requests it fans out into (one per sample)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    engine_requests: list[EngineCoreRequest]


PromptType = str | list[int] | Mapping[str, Any]


class InputProcessor:
    """Turns user prompts and sampling parameters into ``EngineCoreRequest``s, or raises :class:`InputError`.

    ``tokenizer`` is None when the engine runs with ``skip_tokenizer_init``: prompts must then be token ids.
    ``generation_stop_ids`` are the extra ids of the model's generation config that end generation.
    ``mm`` processes the images of a prompt dict's ``multi_modal_data`` (None: the model takes none).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase | None, max_model_len: int, vocab_size: int,
                 max_logprobs: int, eos_token_id: int | None, generation_stop_ids: list[int],
                 mm: MultiModalInputs | None = None) -> None:
        self.tokenizer = tokenizer
        self.mm = mm
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        #: What msgspec checks a prompt's ids against, in one pass in C.
        self._token_ids_type = list[Annotated[int, msgspec.Meta(ge=0, lt=vocab_size)]]
        self.max_logprobs = max_logprobs
        self.eos_token_id = eos_token_id
        self.generation_stop_ids = [t for t in generation_stop_ids if t != eos_token_id]

    def process(self, request_id: str, prompt: PromptType, params: SamplingParams,
                arrival_time: float | None = None, priority: int = 0,
                cache_salt: str | None = None, lora_request: LoRARequest | None = None) -> ProcessedRequest:
        """Validate and tokenize one request; ``n > 1`` fans out into ``n`` engine requests (``lora_request``
        was checked by the caller's :class:`~infercore.lora.checks.AdapterChecker`)."""
        text, token_ids = self._tokens(prompt)
        mm_features = self._media(prompt, token_ids) if isinstance(prompt, Mapping) else None
        if mm_features is not None:
            token_ids, mm_features = mm_features
        # A pooling request (infercore.pooling) generates nothing, so its prompt may fill max_model_len.
        self._check_prompt(token_ids, room=0 if params.pooling_params is not None else 1)
        params = self._resolve_params(self._as_on_the_wire(params), len(token_ids))
        arrival = time.time() if arrival_time is None else arrival_time

        def engine_request(child_id: str, child: SamplingParams, parent: str | None) -> EngineCoreRequest:
            return EngineCoreRequest(
                request_id=child_id, prompt_token_ids=token_ids, sampling_params=child, arrival_time=arrival,
                eos_token_id=self.eos_token_id, priority=priority, cache_salt=cache_salt, parent_id=parent,
                lora_request=lora_request, mm_features=mm_features or None)

        if params.n == 1:
            requests = [engine_request(request_id, params, None)]
        else:
            requests = [
                engine_request(f"{i}_{request_id}",
                               params.clone(n=1, seed=None if params.seed is None else params.seed + i), request_id)
                for i in range(params.n)
            ]
        return ProcessedRequest(request_id, text, token_ids, params, requests)

    def with_media_processed(self, prompt: PromptType) -> PromptType:
        """A prompt dict with ``multi_modal_data`` as one with its token ids expanded and its ``mm_features``
        made (anything else unchanged): the blocking part of :meth:`process`, for a caller to run in threads."""
        if not isinstance(prompt, Mapping) or prompt.get("multi_modal_data") is None or self.mm is None:
            return prompt
        text, token_ids = self._tokens(prompt)
        processed = self._media(prompt, token_ids)
        assert processed is not None
        return {"prompt": text, "prompt_token_ids": processed[0], "mm_features": processed[1]}

    def _media(self, prompt: Mapping[str, Any],
               token_ids: list[int]) -> tuple[list[int], list[MultiModalFeature]] | None:
        """The prompt's ids with placeholders expanded and its images' features (None: no images). A prompt
        dict's ``mm_features`` were processed already (the server does it off the event loop)."""
        data, ready = prompt.get("multi_modal_data"), prompt.get("mm_features")
        if data is None and ready is None:
            return None
        if self.mm is None:
            raise InputError("this model takes no images; send text only", "multi_modal_data")
        if ready is not None:
            return token_ids, list(ready)
        try:
            return self.mm.process(token_ids, self.mm.images_of(data))
        except MediaError as exc:
            raise InputError(str(exc), exc.param) from None

    def _tokens(self, prompt: PromptType) -> tuple[str | None, list[int]]:
        add_special_tokens = True
        if isinstance(prompt, Mapping):
            if prompt.get("prompt_token_ids") is not None:
                return prompt.get("prompt"), self._as_ids(prompt["prompt_token_ids"])
            if "prompt" not in prompt:
                raise InputError("a prompt dict needs a 'prompt' (text) or 'prompt_token_ids' entry", "prompt")
            add_special_tokens = bool(prompt.get("add_special_tokens", True))
            prompt = prompt["prompt"]
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InputError("the engine runs without a tokenizer (skip_tokenizer_init); send prompt token ids "
                                 "instead of text", "prompt")
            if not prompt:
                raise InputError("the prompt is empty; send at least one character", "prompt")
            self.check_text(prompt)
            return prompt, list(self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens))
        return None, self._as_ids(prompt)

    @property
    def max_prompt_chars(self) -> int:
        """Longest text prompt accepted, in characters (``max_model_len`` x :data:`MAX_CHARS_PER_TOKEN`)."""
        return self.max_model_len * MAX_CHARS_PER_TOKEN

    def check_text(self, text: str, param: str = "prompt") -> None:
        """Refuse text the tokenizer can't take or must not spend time on: over :attr:`max_prompt_chars`
        characters, or holding a lone surrogate (not encodable as UTF-8)."""
        if len(text) > self.max_prompt_chars:
            raise InputError(
                f"the prompt has {len(text)} characters, over the limit of {self.max_prompt_chars} "
                f"({MAX_CHARS_PER_TOKEN} per token of max_model_len {self.max_model_len}); shorten the prompt", param)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(
                f"the prompt holds a lone surrogate code point (U+{ord(text[exc.start]):04X} at character "
                f"{exc.start}), which is not valid Unicode text; send well-formed UTF-8", param) from None

    @staticmethod
    def _as_ids(ids: Any) -> list[int]:
        if not isinstance(ids, (list, tuple)):
            raise InputError("the prompt must be a string or a list of integer token ids", "prompt")
        # One pass in C (bools refused), where a Python loop over a long prompt costs a fraction of a ms.
        try:
            return msgspec.convert(ids, list[int])
        except msgspec.ValidationError:
            raise InputError("the prompt must be a string or a list of integer token ids", "prompt") from None

    def _check_prompt(self, token_ids: list[int], room: int = 1) -> None:
        if not token_ids:
            raise InputError("the prompt is empty; send at least one token", "prompt")
        try:
            msgspec.convert(token_ids, self._token_ids_type)
        except msgspec.ValidationError:
            # Name the first id outside the vocabulary.
            position, token_id = next((i, t) for i, t in enumerate(token_ids) if not 0 <= t < self.vocab_size)
            raise InputError(
                f"prompt token id {token_id} at position {position} is outside the vocabulary of "
                f"{self.vocab_size} tokens; use ids from 0 to {self.vocab_size - 1}", "prompt") from None
        if len(token_ids) > self.max_model_len - room:
            raise InputError(
                f"prompt has {len(token_ids)} tokens but max_model_len is {self.max_model_len}; shorten the "
                f"prompt to at most {self.max_model_len - room} tokens or raise --max-model-len", "prompt")

    @staticmethod
    def _as_on_the_wire(params: SamplingParams) -> SamplingParams:
        """``params`` as the engine process will decode them, with the constraint's bounds checked."""
        try:
            decoded = _WIRE_DECODER.decode(_WIRE_ENCODER.encode(params))
        except SamplingParamsError as exc:
            raise InputError(str(exc), exc.param) from None
        except RecursionError:
            raise InputError("the sampling parameters nest too deep to be sent to the engine; flatten them",
                             "structured_outputs") from None
        except (msgspec.MsgspecError, TypeError, ValueError) as exc:
            raise InputError(f"invalid sampling parameters: {exc}; send the types the API documents",
                             _wire_field(exc)) from None
        if decoded.structured_outputs is not None:
            try:
                check_constraint(decoded.structured_outputs)
            except SamplingParamsError as exc:
                raise InputError(str(exc), exc.param) from None
        return decoded

    def _resolve_params(self, params: SamplingParams, prompt_len: int) -> SamplingParams:
        room = self.max_model_len - prompt_len
        if params.max_tokens is not None and params.max_tokens > room:
            raise InputError(
                f"prompt has {prompt_len} tokens and max_tokens is {params.max_tokens}, {prompt_len + params.max_tokens} "
                f"in all, but max_model_len is {self.max_model_len}; lower max_tokens to at most {room} or shorten "
                "the prompt", "max_tokens")
        if params.min_tokens > room:
            raise InputError(
                f"min_tokens is {params.min_tokens} but only {room} tokens fit after the {prompt_len}-token prompt "
                f"(max_model_len {self.max_model_len}); lower min_tokens", "min_tokens")
        try:
            params.validate_for_model(self.vocab_size, self.max_logprobs)
        except SamplingParamsError as exc:
            raise InputError(str(exc), exc.param) from None
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(params, name) == -1 and self.vocab_size > self.max_logprobs:
                raise InputError(
                    f"{name}=-1 asks for all {self.vocab_size} tokens, over the server's limit of "
                    f"{self.max_logprobs}; ask for fewer or raise --max-logprobs", name)
        if params.stop and (self.tokenizer is None or not params.detokenize):
            raise InputError("stop strings need detokenized text; use stop_token_ids, or enable detokenize "
                             "(and the tokenizer)", "stop")
        stop_ids = set(params.stop_token_ids or [])
        if not params.ignore_eos:
            stop_ids.update(self.generation_stop_ids)
        return params.clone(max_tokens=room if params.max_tokens is None else params.max_tokens,
                            all_stop_token_ids=sorted(stop_ids) or None)


def _wire_field(exc: BaseException) -> str | None:
    """The top-level field a msgspec error names (``... - at `$.structured_outputs.choice` ``), if any."""
    text = str(exc)
    if "`$." not in text:
        return None
    return text.split("`$.", 1)[1].split("`", 1)[0].split(".", 1)[0].split("[", 1)[0] or None
