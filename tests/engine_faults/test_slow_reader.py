"""A slow streaming reader costs one pending output, not one per step, and still gets every token,
every character and every logprob, in order."""

from __future__ import annotations

import asyncio
import time

import pytest
from transformers import AutoTokenizer

from infercore import SamplingParams
from infercore.config import InfercoreConfig
from infercore.frontend.async_llm import AsyncLLM, RequestAbortedError
from infercore.frontend.input_processor import InputProcessor
from infercore.frontend.output_processor import OutputProcessor, RequestOutputKind
from infercore.frontend.output_stream import OutputStream
from infercore.outputs import CompletionOutput, RequestOutput
from infercore.tiny_models import build_tokenizer
from infercore.wire.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FinishReason,
    Logprobs,
)
from infercore.wire.model_info import ModelInfo

TEXT = "Streams: naïve café, 日本語のテキスト, emoji 😀🚀 and plain words to the end."
PARAMS = SamplingParams(n=2, temperature=1.0, max_tokens=64, logprobs=1, stop=["plain words"])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(str(build_tokenizer(tmp_path_factory.mktemp("tok"))))


class ScriptedClient:
    """An engine client whose outputs the test pushes one step at a time."""

    def __init__(self) -> None:
        self.initial_stats = None
        self.added: list[EngineCoreRequest] = []
        self.aborted: list[str] = []
        self._outputs: asyncio.Queue[EngineCoreOutputs] = asyncio.Queue()
        self._waiting = asyncio.Event()

    async def add_request(self, request: EngineCoreRequest) -> None:
        self.added.append(request)

    async def abort_requests(self, request_ids: list[str]) -> None:
        self.aborted.extend(request_ids)

    async def get_outputs(self) -> EngineCoreOutputs:
        if self._outputs.empty():
            self._waiting.set()  # every output pushed so far has been processed
        return await self._outputs.get()

    async def push(self, outputs: list[EngineCoreOutput]) -> None:
        """Hand the front end one step's outputs and wait until it has processed them."""
        self._waiting.clear()
        self._outputs.put_nowait(EngineCoreOutputs(outputs=outputs))
        await self._waiting.wait()

    async def wait_dead(self) -> None:
        await asyncio.Event().wait()

    def close(self) -> None:
        """Nothing to close."""


def _steps(engine_ids: list[str], token_ids: list[int]) -> list[list[EngineCoreOutput]]:
    """One token per step for each sample (the second sample one step behind), with logprobs."""
    steps = []
    for k in range(len(token_ids) + 1):
        step = []
        for j, engine_id in enumerate(engine_ids):
            i = k - j
            if 0 <= i < len(token_ids):
                token = token_ids[i]
                step.append(EngineCoreOutput(
                    engine_id, [token], Logprobs([[token, 7]], [[-0.5 - i / 100, -1.5]], [1]),
                    finish_reason=FinishReason.LENGTH if i == len(token_ids) - 1 else None))
        steps.append(step)
    return steps


async def _stream(tokenizer, read_every_step: bool) -> list[RequestOutput]:
    client = ScriptedClient()
    info = ModelInfo(max_model_len=256, vocab_size=len(tokenizer), eos_token_id=None, generation_stop_ids=[])
    llm = AsyncLLM(InfercoreConfig(), client, info, tokenizer)
    handler = asyncio.create_task(llm._output_loop())
    generator = llm.generate("hello", PARAMS, "r")
    first = asyncio.create_task(anext(generator))
    while len(client.added) < PARAMS.n:
        await asyncio.sleep(0)
    steps = _steps([r.request_id for r in client.added], tokenizer.encode(TEXT))
    await client.push(steps[0])
    received = [await first]
    for step in steps[1:]:
        await client.push(step)
        if read_every_step and not received[-1].finished:
            received.append(await anext(generator))
    if not received[-1].finished:
        received.extend([out async for out in generator])
    handler.cancel()
    return received


def _joined(outputs: list[RequestOutput]) -> dict[int, tuple]:
    """Per sample: all text, tokens and logprobs in arrival order, and the finish."""
    joined: dict[int, tuple] = {}
    for out in outputs:
        for c in out.outputs:
            text, tokens, logprobs, _ = joined.get(c.index, ("", [], [], None))
            joined[c.index] = (text + c.text, tokens + c.token_ids, logprobs + (c.logprobs or []),
                               (c.finish_reason, c.stop_reason))
    return joined


def test_slow_reader_gets_what_a_fast_reader_gets(tokenizer) -> None:
    fast = asyncio.run(_stream(tokenizer, read_every_step=True))
    slow = asyncio.run(_stream(tokenizer, read_every_step=False))
    assert len(fast) > 20, "the fast reader should see about one output per step"
    assert len(slow) == 2, "everything after the first output should wait as one merged output"
    assert _joined(slow) == _joined(fast)
    joined = _joined(fast)
    for index in (0, 1):
        text, tokens, logprobs, finish = joined[index]
        assert text == TEXT[:TEXT.index("plain words")] and finish == ("stop", "plain words")
        assert len(logprobs) == len(tokens) and tokens
    assert slow[-1].finished and fast[-1].finished
    assert slow[-1].outputs[0].cumulative_logprob == fast[-1].outputs[0].cumulative_logprob


def _delta(index: int, text: str, tokens: list[int], finish: str | None = None) -> RequestOutput:
    completion = CompletionOutput(index, text, tokens, -1.0, None, finish_reason=finish)
    return RequestOutput("r", "p", [1], None, [completion], finished=finish is not None,
                         metrics={"last_token_time": time.time()})


def test_stream_merges_while_behind_and_raises_after_the_outputs() -> None:
    async def run() -> None:
        stream = OutputStream()
        for k in range(1000):
            stream.put_nowait(_delta(k % 2, f"{k},", [k]))
            assert stream.num_waiting == 1
        stream.put_nowait(_delta(1, "end", [1000], finish="length"))
        stream.put_nowait(RequestAbortedError("aborted"))
        stream.put_nowait(RuntimeError("a later error is not raised"))
        assert stream.num_waiting == 2
        merged = await stream.get()
        by_index = {c.index: c for c in merged.outputs}
        assert by_index[0].token_ids == list(range(0, 1000, 2))
        assert by_index[1].token_ids == [*range(1, 1000, 2), 1000]
        assert by_index[1].text == "".join(f"{k}," for k in range(1, 1000, 2)) + "end"
        assert by_index[1].finish_reason == "length" and by_index[0].finish_reason is None
        assert merged.finished
        with pytest.raises(RequestAbortedError):
            await stream.get()

    asyncio.run(run())


def test_a_sample_ended_by_a_stop_string_takes_no_later_tokens(tokenizer) -> None:
    """The engine may deliver a step more of a sample a stop string ended (its abort is on the way);
    while a sibling still runs, that step must not reach the ended sample."""
    inputs = InputProcessor(tokenizer, max_model_len=256, vocab_size=len(tokenizer), max_logprobs=5,
                            eos_token_id=None, generation_stop_ids=[])
    processed = inputs.process("r", "hello", PARAMS)
    processor = OutputProcessor(tokenizer)
    processor.add_request(processed, RequestOutputKind.CUMULATIVE)
    engine_ids = [r.request_id for r in processed.engine_requests]
    final = None
    for step in _steps(engine_ids, tokenizer.encode(TEXT)):
        for out in processor.process_outputs(step).request_outputs:
            final = out
    assert final is not None and final.finished
    assert [c.text for c in final.outputs] == [TEXT[:TEXT.index("plain words")]] * 2
    assert [c.stop_reason for c in final.outputs] == ["plain words"] * 2
