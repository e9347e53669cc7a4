"""Folding a step's sampled tokens into a request: appended one by one up to the first that ends it (a
stop token after ``min_tokens``, ``max_tokens`` or ``max_model_len``), and the prompt logprobs gathered
over its prefill chunks."""

from __future__ import annotations

from infercore.scheduler.request import Request, RequestStatus
from infercore.wire.messages import Logprobs

_STOPPED = RequestStatus.FINISHED_STOPPED
_LENGTH = RequestStatus.FINISHED_LENGTH


def append_sampled(request: Request, sampled: list[int], max_model_len: int) -> list[int]:
    """Append ``sampled`` to ``request`` one by one, stopping at the first that ends it; the tokens kept."""
    if request.max_tokens == 0:  # prompt only (scoring): the prompt is computed, the sample dropped
        request.status = _LENGTH
        return []
    out = request.output_token_ids
    all_ids = request.all_token_ids
    for i, token in enumerate(sampled):
        out.append(token)
        all_ids.append(token)
        num_output = len(out)
        # A stop token may end the request only after min_tokens other tokens.
        if num_output > request.min_tokens:
            if token == request.stop_eos_token_id:
                request.status = _STOPPED
                return sampled[:i + 1]
            if token in request.stop_token_ids:
                request.status = _STOPPED
                request.stop_reason = token
                return sampled[:i + 1]
        if num_output >= request.max_tokens or len(all_ids) >= max_model_len:
            request.status = _LENGTH
            return sampled[:i + 1]
    return sampled


def take_prompt_logprobs(request: Request) -> Logprobs | None:
    """The prompt logprobs gathered so far, as one (marks them sent)."""
    parts = request.prompt_logprobs_parts
    request.prompt_logprobs_sent = True
    if not parts:
        return None
    request.prompt_logprobs_parts = []
    if len(parts) == 1:
        return parts[0]
    return Logprobs(
        token_ids=[row for p in parts for row in p.token_ids],
        logprobs=[row for p in parts for row in p.logprobs],
        ranks=[r for p in parts for r in p.ranks],
    )


def slice_logprobs(lp: Logprobs, n: int) -> Logprobs:
    """The first ``n`` rows of ``lp``."""
    return Logprobs(token_ids=lp.token_ids[:n], logprobs=lp.logprobs[:n], ranks=lp.ranks[:n])
