"""The output of a launched step, which EngineCore waits for when it chooses."""

from __future__ import annotations

from collections.abc import Callable

from infercore.wire.scheduler_output import ModelRunnerOutput


class StepFuture:
    """Returned by ``Executor.execute_model(..., non_block=True)``.

    The executor resolves it when the workers hand the step's tokens back: as the answer to the
    next launch (tokens of step N come back while step N+1 runs), or when :meth:`result` asks for
    them. ``None`` means the step sampled nothing.
    """

    def __init__(self, wait: Callable[[], None]) -> None:
        self._wait = wait
        self._done = False
        self._output: ModelRunnerOutput | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, output: ModelRunnerOutput | None) -> None:
        self._output, self._done = output, True

    def result(self) -> ModelRunnerOutput | None:
        """The step's output, waiting for the workers if it has not come back yet."""
        if not self._done:
            self._wait()
        return self._output
