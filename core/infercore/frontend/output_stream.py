"""OutputStream: one request's delta outputs on their way to its reader, merged while the reader is behind."""

from __future__ import annotations

import asyncio

from infercore.outputs import CompletionOutput, RequestOutput


class OutputStream:
    """Where the output processor puts a streaming request's outputs and its generator reads them.

    Outputs are deltas (only what is new since the previous one). A reader slower than the engine
    does not make them pile up, one per step: a new output is merged into the one still waiting
    (text and tokens appended, logprobs extended, the finish kept), so at most one output waits and
    the reader still gets everything, in order. An error (abort, engine failure) is raised to the
    reader after the output waiting ahead of it; the first error is the one raised.
    """

    def __init__(self) -> None:
        self._output: RequestOutput | None = None
        self._error: BaseException | None = None
        self._ready = asyncio.Event()

    @property
    def num_waiting(self) -> int:
        """Items the reader has not taken yet: at most one output and one error."""
        return (self._output is not None) + (self._error is not None)

    def put_nowait(self, item: RequestOutput | BaseException) -> None:
        """Queue an output (merged into the waiting one, if any) or an error; never blocks."""
        if isinstance(item, BaseException):
            if self._error is None:
                self._error = item
        elif self._output is None:
            self._output = item
        else:
            merge_delta(self._output, item)
        self._ready.set()

    async def get(self) -> RequestOutput:
        """The next output (everything since the previous one); raises the error once outputs are taken."""
        while True:
            if self._output is not None:
                output, self._output = self._output, None
                return output
            if self._error is not None:
                raise self._error
            self._ready.clear()
            await self._ready.wait()


def merge_delta(into: RequestOutput, new: RequestOutput) -> None:
    """Fold the delta ``new`` into the earlier delta ``into``, as if both had been one step's output."""
    if new.prompt_logprobs is not None:
        if into.prompt_logprobs is None:
            into.prompt_logprobs = list(new.prompt_logprobs)
        else:
            into.prompt_logprobs.extend(new.prompt_logprobs)
    by_index = {completion.index: completion for completion in into.outputs}
    for completion in new.outputs:
        earlier = by_index.get(completion.index)
        if earlier is None:
            into.outputs.append(completion)
        else:
            _merge_completion(earlier, completion)
    into.finished = into.finished or new.finished
    into.num_cached_tokens = new.num_cached_tokens
    into.metrics = new.metrics


def _merge_completion(into: CompletionOutput, new: CompletionOutput) -> None:
    # A delta's lists are its own (slices of the sequence's state), so they may grow in place.
    into.text += new.text
    into.token_ids.extend(new.token_ids)
    if new.logprobs is not None:
        if into.logprobs is None:
            into.logprobs = new.logprobs
        else:
            into.logprobs.extend(new.logprobs)
    into.cumulative_logprob = new.cumulative_logprob
    if new.finish_reason is not None:
        into.finish_reason = new.finish_reason
        into.stop_reason = new.stop_reason
