"""Blocking work of a request (chat-template rendering, tokenizing) runs in a small thread pool, off the
event loop, so that one slow request never stalls /health or anybody else's stream.

Each kind of work has its own pool, apart from the loop's default executor: slow templates can fill
theirs, but never hold up tokenizing (or anything else). Each job has a time bound; one that outlives
it is answered with a 400 while its thread finishes in the background (rendering stops by itself at
the template deadline, tokenizing is bounded by the prompt-length check).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from infercore.entrypoints.openai.errors import APIError

T = TypeVar("T")

#: Threads per kind of work.
NUM_WORKERS = 4

_pools: dict[str, ThreadPoolExecutor] = {}


def _executor(kind: str) -> ThreadPoolExecutor:
    if kind not in _pools:
        _pools[kind] = ThreadPoolExecutor(max_workers=NUM_WORKERS, thread_name_prefix=f"infercore-{kind}")
    return _pools[kind]


async def off_loop(fn: Callable[..., T], *args: object, kind: str, timeout_s: float, what: str,
                   param: str | None) -> T:
    """Run ``fn(*args)`` in the pool of ``kind`` ("template", "tokenize") and return its result;
    APIError(400) after ``timeout_s``.

    ``what`` names the work in the error ("rendering the chat template"); ``param`` is the request field
    the error points at. Exceptions of ``fn`` propagate unchanged.
    """
    future = asyncio.get_running_loop().run_in_executor(_executor(kind), fn, *args)
    try:
        return await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        raise APIError(400, f"{what} took longer than the limit of {timeout_s:g} s; send a smaller request",
                       param) from None
