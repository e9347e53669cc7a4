"""The loop of a chat-template render process: JSON jobs in, JSON answers out, nothing heavy imported.

A spawned worker imports only this module, Jinja and the sandbox (:mod:`infercore.tokenizer` loads
transformers only when it loads a tokenizer), so it starts in well under a second.
"""

from __future__ import annotations

import json
import types
from multiprocessing.connection import Connection

from infercore.tokenizer import ChatTemplateError, apply_chat_template

#: The tokenizer's special tokens a template sees; the server sends their text with each job.
SPECIAL_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token")


def serve_renders(conn: Connection) -> None:
    """Read a job (``apply_chat_template``'s keyword arguments plus ``messages`` and ``special_tokens``),
    render it, answer ``{"text": ...}`` or ``{"error": ...}``; return when the server's end closes."""
    while True:
        try:
            job = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        tokens = types.SimpleNamespace(**job.pop("special_tokens"), chat_template=None)
        messages = job.pop("messages")
        try:
            answer = {"text": apply_chat_template(tokens, messages, **job)}
        except ChatTemplateError as exc:
            answer = {"error": str(exc)}
        conn.send_bytes(json.dumps(answer).encode())
