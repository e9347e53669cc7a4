"""A model step that fails on demand, for the engine fault tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StepFailure(RuntimeError):
    """The error a test makes the model step raise."""


#: The executor methods that launch a step (synchronously, or overlapped with the next one).
LAUNCH_METHODS = ("execute_model", "execute_model_async")


def fail_next_launch(executor: object) -> list[int]:
    """Make the next step the executor is asked to launch raise StepFailure (later ones run normally).

    Returns a list that counts the failures, so a test can check the failure happened.
    """
    failures: list[int] = []
    for method in LAUNCH_METHODS:
        real = getattr(executor, method, None)
        if real is not None:
            setattr(executor, method, _failing_once(real, failures))
    return failures


def _failing_once(real: Callable[..., Any], failures: list[int]) -> Callable[..., Any]:
    def failing(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise StepFailure("the device fell over")
        return real(*args, **kwargs)

    return failing
