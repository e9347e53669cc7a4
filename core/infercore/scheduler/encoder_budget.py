"""The encoder budget: how much vision-tower work (image tokens to encode) one step may take.

A prompt's images are encoded by the worker in the step whose scheduled tokens first reach their
placeholders, and the output stays in the worker's encoder cache (:mod:`infercore.worker.mm_step`)
until the request's computed tokens pass the image's last placeholder. So a chunk boundary may fall
inside an image's placeholders: the next chunk resumes from the cached output, and the tower runs
once per image. What must not happen is a step that reaches an image it cannot encode: the budget
then cuts the request's tokens short *before* that image's first placeholder, and the image waits
for a later step.

The worker encodes an image in a step when the step's tokens meet its placeholders and either the
request is new to the worker (first scheduled, or resumed after preemption: the worker holds
nothing of it) or the image's first placeholder is among the step's tokens. The budget counts
exactly those images, so the scheduler and the worker agree without exchanging anything.

For a model whose images must be computed whole in one step (Gemma 3), :meth:`EncoderBudget.fit` also keeps
every chunk boundary out of image spans (:mod:`infercore.scheduler.image_spans`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infercore.scheduler.image_spans import ImageSpans
    from infercore.scheduler.request import Request


class EncoderBudget:
    """Image tokens the vision tower may encode per step (``max_num_encoder_input_tokens``).

    :meth:`start_step` refills it; :meth:`fit` cuts a request's scheduled tokens short of the first
    image the budget cannot take, and charges the images it lets through. One image larger than the
    whole budget still runs, alone, in a step that encodes nothing else (it would never run otherwise).
    """

    def __init__(self, max_tokens: int | None, spans: ImageSpans | None = None) -> None:
        self.max_tokens = max_tokens
        #: The whole-span rule, for models that attend over each image whole (None: spans may be split).
        self.spans = spans
        self.left: float = math.inf
        self.encoded_any = False

    def start_step(self) -> None:
        self.left = math.inf if self.max_tokens is None else self.max_tokens
        self.encoded_any = False

    def fit(self, request: Request, start: int, num_new: int, new_to_worker: bool) -> int:
        """How many of ``num_new`` tokens from ``start`` the request may compute this step (all of them, or
        up to the first placeholder of the first image the budget cannot take; 0: none this step)."""
        features = request.mm_features
        if not features or start >= request.num_prompt_tokens:
            return num_new
        if self.spans is not None:
            num_new = self.spans.fit(request, start, num_new)
        stop = start + num_new
        for feature in features:
            if feature.offset >= stop:
                break
            if feature.end <= start or (feature.offset < start and not new_to_worker):
                continue  # already computed, or encoded in an earlier step and cached in the worker
            if feature.length <= self.left or not self.encoded_any:
                self.left -= feature.length
                self.encoded_any = True
                continue
            return max(feature.offset - start, 0)
        return num_new
