"""Whole image spans: for a model whose image tokens see their whole image in prefill (Gemma 3;
:mod:`infercore.attention.visible_bounds`), a step never ends inside an image's placeholder span, since the
span's first queries need keys of its last tokens.

:meth:`ImageSpans.fit` moves a chunk boundary that would fall inside a span back to the span's start (or, when
the step starts at or inside the span and the budget cannot reach its end, schedules nothing of the request
this step: it waits for a step with room). :meth:`ImageSpans.check` refuses at admission a prompt with a span
longer than the whole token budget, which could never run. A prefix-cache hit may end inside a span (its
blocks were computed with the whole span in one step); the next step then computes the rest of the span.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infercore.scheduler.request import Request


class ImageSpans:
    """The whole-span rule of one scheduler (``max_num_batched_tokens`` tokens per step)."""

    def __init__(self, max_num_batched_tokens: int) -> None:
        self.max_tokens = max_num_batched_tokens

    def check(self, request: Request) -> None:
        """Raise ValueError if one of the request's images spans more tokens than a step may compute."""
        for feature in request.mm_features or ():
            if feature.length > self.max_tokens:
                raise ValueError(
                    f"an image of the prompt takes {feature.length} tokens, more than one step computes "
                    f"(max_num_batched_tokens={self.max_tokens}); this model attends over each image whole, so "
                    "its tokens cannot be split across steps: raise --max-num-batched-tokens to at least "
                    f"{feature.length}")

    @staticmethod
    def fit(request: Request, start: int, num_new: int) -> int:
        """How many of ``num_new`` tokens from ``start`` keep every image span whole in one step (0: none)."""
        stop = start + num_new
        for feature in request.mm_features or ():
            if feature.offset >= stop:
                break
            if feature.end <= stop:
                continue
            # The step ends inside this span: end it before the span, or not at all if it starts inside it.
            return max(feature.offset - start, 0)
        return num_new
