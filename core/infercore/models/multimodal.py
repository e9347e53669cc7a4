"""The multimodal model contract: how a vision-language model declares its processor, how many tokens an
image becomes, how it embeds images, and how those embeddings reach the decoder.

Two halves, in two processes:

* **Front end** (API process / offline ``LLM``): the model class names a :class:`MultiModalProcessor`
  subclass in its ``multimodal_processor`` class attribute (or a plugin registers one with the model:
  ``register("MyVLM", "pkg.model:MyVLM", multimodal_processor="pkg.proc:MyProcessor")``, which wins).
  The processor turns a decoded image into tensors (:class:`ProcessedImage`, with the number of
  placeholder tokens it becomes) and expands each image's placeholder in the prompt's token ids to
  that many tokens. The tensors travel to the engine as :class:`~infercore.wire.multimodal.MultiModalFeature`.
* **Worker**: the model (``supports_multimodal = True``) implements :meth:`SupportsMultiModal.embed_multimodal`:
  one image's tensors in, its ``[length, hidden]`` embeddings out. The runner
  (:mod:`infercore.worker.mm_step`) encodes the images a step's tokens reach, keeps them until their last
  placeholder is computed, and writes the step's image rows into the model's :class:`MultiModalStepInputs`
  (``model.mm_inputs``) before the forward pass; the model's ``forward(input_ids, positions)`` merges them
  with :meth:`MultiModalStepInputs.merge` right after its token embedding. The buffers are static, so
  captured graphs replay the same code whether or not a step carries images.
* **M-RoPE** (the Qwen2-VL family): a model that sets ``uses_mrope = True`` implements
  :meth:`SupportsMultiModal.mrope_positions` (a request's ``[3, prompt_len]`` positions and the delta its
  generated tokens add to their position); the runner fills ``mm_inputs.mrope_positions[:, :T]`` for every
  step's tokens (prompt rows from the request's array, generated rows ``position + delta`` on all three
  axes), and the model reads those instead of ``positions``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from infercore.wire.multimodal import MultiModalFeature


@dataclass
class ProcessedImage:
    """One image after the model's processor: the tensors ``embed_multimodal`` reads (``pixel_values``, ...)
    and how many placeholder tokens it takes in the prompt."""

    data: dict[str, np.ndarray]
    num_tokens: int

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.data.values())


class MultiModalProcessor:
    """The front-end half of a vision-language model, built once per engine with
    ``cls(hf_config, model_path, tokenizer)``.

    Subclasses set :attr:`placeholder_token_id` (the token a prompt holds once per image, which
    :meth:`expand_prompt` repeats :attr:`ProcessedImage.num_tokens` times), :attr:`placeholder_text` (what an
    image part of a chat message becomes in the prompt text) and implement :meth:`process_image`. Called from
    worker threads (never on the event loop); must be thread-safe.
    """

    modalities: ClassVar[tuple[str, ...]] = ("image",)

    def __init__(self, hf_config: Any, model_path: str, tokenizer: Any) -> None:
        self.hf_config = hf_config
        self.model_path = model_path
        self.tokenizer = tokenizer
        self.placeholder_token_id: int = -1
        self.placeholder_text: str = "<image>"

    def process_image(self, image: Image.Image) -> ProcessedImage:
        """The tensors and placeholder count of one RGB image."""
        raise NotImplementedError

    def settings_key(self) -> str:
        """What besides the pixels decides the processed tensors (sizes, means): part of the content hash."""
        return type(self).__qualname__

    def placeholder_positions(self, token_ids: list[int], num_images: int) -> list[int]:
        """Where the prompt's image placeholder tokens stand; :class:`ValueError` (with the counts) unless there
        is exactly one per image."""
        found = [i for i, t in enumerate(token_ids) if t == self.placeholder_token_id]
        if len(found) != num_images:
            raise ValueError(f"the prompt holds {len(found)} image placeholder(s) ({self.placeholder_text!r}) but "
                             f"{num_images} image(s) came with it; put one placeholder per image in the prompt")
        return found

    def expand_prompt(self, token_ids: list[int], images: Sequence[ProcessedImage]) -> tuple[list[int], list[int]]:
        """The prompt with image ``i``'s placeholder token repeated ``images[i].num_tokens`` times, and the
        offset of each image's first placeholder. A prompt must hold exactly one placeholder per image
        (:class:`ValueError` otherwise, with the counts)."""
        pid = self.placeholder_token_id
        found = self.placeholder_positions(token_ids, len(images))
        out: list[int] = []
        offsets: list[int] = []
        prev = 0
        for pos, image in zip(found, images, strict=True):
            out.extend(token_ids[prev:pos])
            offsets.append(len(out))
            out.extend([pid] * image.num_tokens)
            prev = pos + 1
        out.extend(token_ids[prev:])
        return out, offsets


def content_hash(image: Image.Image, settings: str) -> str:
    """Hex SHA-256 of an image's decoded pixels (mode, size, bytes) and the processor's settings."""
    h = hashlib.sha256()
    h.update(f"{image.mode}:{image.size[0]}x{image.size[1]}:{settings}|".encode())
    h.update(image.tobytes())
    return h.hexdigest()


class MultiModalStepInputs:
    """The step's image rows, in buffers the runner writes before each forward pass and the model reads.

    ``embeds[i]`` replaces token ``i``'s embedding where ``mask[i]``; ``mrope_positions`` ([3, T], only for
    ``uses_mrope`` models) are the step's M-RoPE positions. Rows past the step's tokens are never masked, so
    a graph replayed at a padded size merges nothing into its padding.
    """

    def __init__(self, max_tokens: int, hidden_size: int, dtype: torch.dtype, device: torch.device,
                 mrope: bool = False) -> None:
        import torch

        self.embeds = torch.zeros(max_tokens, hidden_size, dtype=dtype, device=device)
        self.mask = torch.zeros(max_tokens, dtype=torch.bool, device=device)
        self.mrope_positions = torch.zeros(3, max_tokens, dtype=torch.int64, device=device) if mrope else None

    def merge(self, token_embeds: torch.Tensor) -> torch.Tensor:
        """``token_embeds`` [T, hidden] with the step's image rows put in."""
        import torch

        t = token_embeds.shape[0]
        return torch.where(self.mask[:t, None], self.embeds[:t], token_embeds)


@runtime_checkable
class SupportsMultiModal(Protocol):
    """A model that takes images (see the module's docstring for the whole contract).

    * ``supports_multimodal = True`` and ``multimodal_processor``: the :class:`MultiModalProcessor` subclass.
    * ``mm_inputs``: set by the runner to a :class:`MultiModalStepInputs` before the first forward pass;
      ``forward`` merges it after the token embedding (``self.mm_inputs.merge(embeds)``).
    * ``embed_multimodal(items)``: a list of images' tensors (each a dict of device tensors, as in
      ``MultiModalFeature.data``) → a list of ``[num_tokens_i, hidden]`` embeddings in the model's dtype,
      ``num_tokens_i`` the processor's count for that image.
    * ``uses_mrope`` (default False) and ``mrope_positions(prompt_token_ids, features)``: see the module.
    * ``dummy_multimodal_item()`` (optional): the tensors of the largest image, on the model's device; memory
      profiling encodes a step's encoder budget of them.
    """

    supports_multimodal: ClassVar[bool]
    multimodal_processor: ClassVar[type[MultiModalProcessor]]
    mm_inputs: MultiModalStepInputs | None

    def embed_multimodal(self, items: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """Embeddings [num_tokens_i, hidden] of each image."""
        ...


def is_multimodal(model: Any) -> bool:
    """Whether ``model`` (a class or an instance) takes images."""
    return bool(getattr(model, "supports_multimodal", False))


def mrope_positions_of(model: Any, prompt_token_ids: list[int],
                       features: Sequence[MultiModalFeature]) -> tuple[np.ndarray, int] | None:
    """The request's ``[3, prompt_len]`` M-RoPE positions and generated-token delta (None: not M-RoPE)."""
    if not getattr(model, "uses_mrope", False):
        return None
    return model.mrope_positions(prompt_token_ids, list(features))
