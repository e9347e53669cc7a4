"""The runner's image work for a vision-language model: the encoder-output cache and the step's image rows.

Each step, :meth:`MultiModalStep.prepare` finds the images whose placeholders the step's tokens reach,
runs the vision tower (``model.embed_multimodal``) once over those it holds no output for, and writes the
rows the step computes into the model's :class:`~infercore.models.multimodal.MultiModalStepInputs`. An
image's output stays cached while a chunk boundary falls inside its placeholders, so a chunked prompt runs
the tower once per image; it is dropped when the request's tokens pass its last placeholder, or when the
request leaves the runner (finished, aborted or preempted: a resumed request encodes again). The
scheduler's encoder budget (:mod:`infercore.scheduler.encoder_budget`) counts the same images.

A model whose image tokens see their whole image (``bidirectional_image_spans``, Gemma 3) also gets each
step's per-token visibility bounds (:mod:`infercore.attention.visible_bounds`) in persistent buffers that the
step's attention metadata views: every token's own position, raised to its image's last position inside an
image span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from infercore.attention.visible_bounds import needs_visible_bounds
from infercore.models.multimodal import MultiModalStepInputs, is_multimodal, mrope_positions_of
from infercore.wire.multimodal import MultiModalFeature
from infercore.wire.scheduler_output import SchedulerOutput
from infercore.worker.batch_layout import BatchLayout
from infercore.worker.mrope_step import step_mrope_positions


@dataclass
class RequestMedia:
    """A request's images on this runner: their features and the encoder outputs held for them."""

    features: list[MultiModalFeature]
    #: Feature index → its ``[length, hidden]`` embeddings, while a chunk boundary is inside it.
    outputs: dict[int, torch.Tensor] = field(default_factory=dict)
    #: M-RoPE positions of the prompt ([3, prompt_len]) and the delta of generated tokens (M-RoPE models).
    mrope: np.ndarray | None = None
    mrope_delta: int = 0


class MultiModalStep:
    """Encodes a step's images and fills the model's step inputs (one per runner of a multimodal model)."""

    def __init__(self, model: Any, max_tokens: int, hidden_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.model = model
        self.device = device
        self.mrope = bool(getattr(model, "uses_mrope", False))
        self.inputs = MultiModalStepInputs(max_tokens, hidden_size, dtype, device, mrope=self.mrope)
        model.mm_inputs = self.inputs
        self.requests: dict[str, RequestMedia] = {}
        #: Rows of ``inputs.mask`` the previous step set (cleared before the next one).
        self._masked = 0
        #: Images run through the vision tower since start (tests and stats read it).
        self.num_encoded = 0
        #: Visibility bounds of a model with bidirectional image spans (else None): the host buffer the step
        #: fills and the device buffer attention reads. Off the CPU, two pinned host buffers take turns (as the
        #: step buffers' host sets do), so a step's copy never reads a buffer the next step is filling.
        self.bounds: tuple[torch.Tensor, torch.Tensor] | None = None
        self._hosts: list[torch.Tensor] = []
        if needs_visible_bounds(model):
            on_cpu = device.type == "cpu"
            self._hosts = [torch.zeros(max_tokens, dtype=torch.int32, pin_memory=device.type == "cuda")
                           for _ in range(1 if on_cpu else 2)]
            self.bounds = (self._hosts[0], self._hosts[0] if on_cpu else torch.zeros(max_tokens, dtype=torch.int32,
                                                                                       device=device))

    def visible_until(self, num_tokens: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The device and host views of the first ``num_tokens`` bounds of the step being prepared (None, None:
        the model needs none); the next :meth:`prepare` fills them."""
        if self.bounds is None:
            return None, None
        if len(self._hosts) > 1:  # the other host buffer's turn
            host = self._hosts[1] if self.bounds[0] is self._hosts[0] else self._hosts[0]
            self.bounds = (host, self.bounds[1])
        return self.bounds[1][:num_tokens], self.bounds[0][:num_tokens]

    def update(self, so: SchedulerOutput) -> None:
        """Forget requests that left the runner; take in the new ones' images."""
        for req_id in so.finished_req_ids:
            self.requests.pop(req_id, None)
        for new in so.scheduled_new_reqs:
            features = list(new.mm_features or ())
            if not features and not self.mrope:
                continue
            media = RequestMedia(features)
            positions = mrope_positions_of(self.model, new.prompt_token_ids, features)
            if positions is not None:
                media.mrope, media.mrope_delta = positions
            self.requests[new.req_id] = media

    def prepare(self, req_ids: list[str], layout: BatchLayout) -> None:
        """Encode what the step needs and write its image rows (and M-RoPE positions) for the model.
        ``req_ids`` are in batch order, as ``layout``'s rows."""
        inputs = self.inputs
        if self._masked:
            inputs.mask[: self._masked].fill_(False)
            self._masked = 0
        if self.mrope:
            self._fill_mrope(req_ids, layout)
        bounds = None
        if self.bounds is not None and layout.num_tokens > len(req_ids):  # one-token queries never read them
            bounds = self.bounds[0].numpy()
            bounds[: layout.num_tokens] = layout.positions
        if not self.requests:
            self._upload_bounds(bounds, layout.num_tokens)
            return
        needed: list[tuple[RequestMedia, int]] = []
        spans: list[tuple[RequestMedia, int, int, int, int]] = []  # media, feature, lo, hi, first row
        done: list[str] = []
        for i, rid in enumerate(req_ids):
            media = self.requests.get(rid)
            if media is None or not media.features:
                continue
            start = int(layout.num_computed[i])
            stop = start + int(layout.num_scheduled[i])
            if media.mrope is None and stop >= media.features[-1].end:
                done.append(rid)  # past its last image: nothing more to keep (a resumed request comes back new)
            base = int(layout.query_start_loc[i]) - start
            for k, feature in enumerate(media.features):
                if feature.offset >= stop:
                    break
                if feature.end <= start:
                    continue
                if k not in media.outputs:
                    needed.append((media, k))
                spans.append((media, k, max(feature.offset, start), min(feature.end, stop), base))
        if needed:
            self._encode(needed)
        for media, k, lo, hi, base in spans:
            feature = media.features[k]
            out = media.outputs[k]
            inputs.embeds[base + lo: base + hi] = out[lo - feature.offset: hi - feature.offset]
            inputs.mask[base + lo: base + hi] = True
            self._masked = max(self._masked, base + hi)
            if hi == feature.end:
                del media.outputs[k]
            if bounds is not None:
                if hi != feature.end:
                    raise RuntimeError(f"a step computes tokens {lo}..{hi - 1} of an image spanning {feature.offset}.."
                                       f"{feature.end - 1}: this model's images must be computed whole in one step")
                bounds[base + lo: base + hi] = feature.end - 1
        for rid in done:
            del self.requests[rid]
        self._upload_bounds(bounds, layout.num_tokens)

    def _upload_bounds(self, bounds: np.ndarray | None, num_tokens: int) -> None:
        """Copy the step's bounds to the device buffer (nothing to copy on a CPU device)."""
        if bounds is not None and self.bounds is not None and self.bounds[1] is not self.bounds[0]:
            self.bounds[1][:num_tokens].copy_(self.bounds[0][:num_tokens], non_blocking=True)

    def _encode(self, needed: list[tuple[RequestMedia, int]]) -> None:
        """Run the vision tower over the images in ``needed`` (one call; an image that several of them hold,
        by content hash, runs once) and cache the outputs."""
        unique: dict[str, MultiModalFeature] = {}
        for media, k in needed:
            unique.setdefault(media.features[k].identifier, media.features[k])
        items = [{name: t.to_tensor(self.device) for name, t in f.data.items()} for f in unique.values()]
        outputs = self.model.embed_multimodal(items)
        if len(outputs) != len(items):
            raise ValueError(f"embed_multimodal returned {len(outputs)} embeddings for {len(items)} images")
        by_id = dict(zip(unique, outputs, strict=True))
        for media, k in needed:
            feature = media.features[k]
            out = by_id[feature.identifier]
            if out.shape[0] != feature.length:
                raise ValueError(f"embed_multimodal returned {out.shape[0]} rows for an image with {feature.length} "
                                 "placeholder tokens; the processor's token count and the model disagree")
            media.outputs[k] = out
        self.num_encoded += len(items)

    def profile(self, max_encoder_tokens: int) -> None:
        """Run the tower over a step's worth of the largest image (``model.dummy_multimodal_item()``, when the
        model has it), so memory profiling sees its peak; it also builds the tower's kernels."""
        make = getattr(self.model, "dummy_multimodal_item", None)
        item = make() if make is not None else None
        if item is None:
            return
        tokens = self.model.embed_multimodal([item])[0].shape[0]
        self.model.embed_multimodal([item] * max(1, max_encoder_tokens // max(tokens, 1)))

    def _fill_mrope(self, req_ids: list[str], layout: BatchLayout) -> None:
        """The step's [3, T] M-RoPE positions (:mod:`infercore.worker.mrope_step`): the request's prompt array,
        ``position + delta`` after it, and the plain position on all three axes for requests without one."""
        media = [self.requests.get(rid) for rid in req_ids]
        prompts = [None if m is None else m.mrope for m in media]
        deltas = [0 if m is None or m.mrope is None else m.mrope_delta for m in media]
        out = step_mrope_positions(layout.positions, layout.query_start_loc, prompts, deltas)
        assert self.inputs.mrope_positions is not None
        self.inputs.mrope_positions[:, : out.shape[1]].copy_(torch.from_numpy(out))


def make_mm_step(model: Any, max_tokens: int, hidden_size: int, dtype: torch.dtype,
                 device: torch.device) -> MultiModalStep | None:
    """The runner's :class:`MultiModalStep` for a multimodal model (None for any other)."""
    if not is_multimodal(model):
        return None
    return MultiModalStep(model, max_tokens, hidden_size, dtype, device)
