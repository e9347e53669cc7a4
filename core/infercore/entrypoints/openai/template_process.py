"""Chat templates sent with a request render in a child process that is killed at the deadline.

The sandbox bounds what a template builds and checks its deadline between template operations, but one
operation (a filter on a large value) runs to its end once begun, and a thread can't be stopped. A
template from the request is untrusted code, so it renders in a worker process of its own: past its
deadline the worker is killed, the request gets a 400 and a fresh worker takes the next template. The
server's own template (the tokenizer's or ``--chat-template``) renders in a thread as before.

Jobs and answers cross the pipe as JSON (never pickle); the workers start on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
from typing import Any

from infercore.entrypoints.openai.errors import APIError
from infercore.template_worker import SPECIAL_TOKENS, serve_renders
from infercore.tokenizer import MAX_TEMPLATE_OUTPUT, ChatTemplateError

#: Worker processes per API server (renders that wait for one queue up).
NUM_WORKERS = 2
#: Seconds past the template's own deadline before its worker is killed (the sandbox usually stops first).
KILL_GRACE_S = 0.5


class _Worker:
    """One render process and our end of its pipe."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve_renders, args=(child,), daemon=True, name="infercore-template")
        self.process.start()
        child.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class TemplateProcessPool:
    """Renders request-supplied chat templates in worker processes, each render bounded by a kill."""

    def __init__(self, num_workers: int = NUM_WORKERS) -> None:
        self._idle: asyncio.LifoQueue[_Worker | None] = asyncio.LifoQueue()  # a warm worker first
        for _ in range(num_workers):
            self._idle.put_nowait(None)  # a slot whose worker starts when first needed
        self._workers: set[_Worker] = set()

    async def render(self, tokenizer: Any, messages: list[dict[str, Any]], *, timeout_s: float,
                     **kwargs: Any) -> str:
        """``apply_chat_template(tokenizer, messages, **kwargs)`` in a worker; ChatTemplateError when the
        template fails, APIError(400) when it is still running after ``timeout_s`` (its worker is killed)."""
        job = {"messages": messages, "timeout_s": timeout_s, "max_output_chars": MAX_TEMPLATE_OUTPUT, **kwargs,
               "special_tokens": {name: str(getattr(tokenizer, name, None) or "") for name in SPECIAL_TOKENS}}
        payload = json.dumps(job).encode()
        worker = await self._idle.get()
        try:
            if worker is None:
                worker = await asyncio.get_running_loop().run_in_executor(None, _Worker)
                self._workers.add(worker)
            answer = await self._ask(worker, payload, timeout_s)
        except BaseException:
            if worker is not None:
                self._workers.discard(worker)
                worker.kill()
            self._idle.put_nowait(None)
            raise
        self._idle.put_nowait(worker)
        if "error" in answer:
            raise ChatTemplateError(answer["error"])
        return str(answer["text"])

    @staticmethod
    async def _ask(worker: _Worker, payload: bytes, timeout_s: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        fd = worker.conn.fileno()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            worker.conn.send_bytes(payload)
            await asyncio.wait_for(ready, timeout_s + KILL_GRACE_S)
        except TimeoutError:
            raise APIError(400, f"rendering the chat template took longer than the limit of {timeout_s:g} s; "
                           "simplify the template", "chat_template") from None
        finally:
            loop.remove_reader(fd)
        try:
            return json.loads(worker.conn.recv_bytes())
        except (EOFError, OSError):
            raise APIError(400, "the chat template's render process failed; simplify the template",
                           "chat_template") from None

    def close(self) -> None:
        """Kill every worker."""
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.kill()
        self._workers.clear()
