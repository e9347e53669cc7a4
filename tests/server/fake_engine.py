"""An EngineCore stand-in for wire tests: echoes each prompt's tokens back, one per step."""

from __future__ import annotations

from infercore.config import InfercoreConfig
from infercore.wire.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FinishReason,
    SchedulerStats,
)
from infercore.wire.model_info import ModelInfo


class EchoEngine:
    """Same shape as EngineCore; each step emits the next prompt token of every request."""

    def __init__(self, config: InfercoreConfig) -> None:
        self.model_info = ModelInfo(max_model_len=64, vocab_size=100, eos_token_id=0, generation_stop_ids=[0],
                                    num_kv_blocks=8)
        self.requests: dict[str, tuple[list[int], int]] = {}

    def add_request(self, request: EngineCoreRequest) -> None:
        self.requests[request.request_id] = (request.prompt_token_ids, 0)

    def abort_requests(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self.requests.pop(request_id, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self) -> EngineCoreOutputs:
        outputs = []
        for request_id, (tokens, done) in list(self.requests.items()):
            finished = done + 1 == len(tokens)
            outputs.append(EngineCoreOutput(request_id, [tokens[done]],
                                            finish_reason=FinishReason.LENGTH if finished else None))
            if finished:
                del self.requests[request_id]
            else:
                self.requests[request_id] = (tokens, done + 1)
        return EngineCoreOutputs(outputs=outputs, stats=SchedulerStats(num_running=len(self.requests)))

    def shutdown(self) -> None:
        """Nothing to release."""


class BrokenEngine(EchoEngine):
    """Fails to start, as an engine with a bad configuration does."""

    def __init__(self, config: InfercoreConfig) -> None:
        raise ValueError("max_model_len=99999 is larger than the model allows; lower --max-model-len")
