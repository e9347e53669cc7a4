"""Gemma 3's front-end half, as HF's ``Gemma3Processor`` does it without torchvision: the checkpoint's image
processor (``Gemma3ImageProcessor``, PIL backend: resize to the tower's size, rescale, normalize) and each
``<start_of_image>`` of the prompt expanded to ``"\\n\\n" <start_of_image> <image_soft_token> x N <end_of_image>
"\\n\\n"`` (``N = mm_tokens_per_image``).

HF replaces the text before tokenizing; here the prompt arrives as token ids, so the blank lines are tokenized
here, merged with a newline-only token next to the placeholder (Gemma's tokenizer has one token per run of
newlines: ``"user\\n<start_of_image>"`` becomes ``"user\\n\\n\\n<start_of_image>"``, whose ``"\\n\\n\\n"`` is one
token in HF's ids too). Pan-and-scan crops (``do_pan_and_scan``) are not supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from infercore.models.hf_image_processor import HFImageProcessorBase

if TYPE_CHECKING:
    from infercore.models.multimodal import ProcessedImage


class Gemma3Processor(HFImageProcessorBase):
    """Prompts hold one ``<start_of_image>`` (``boi_token_index``) per image; each becomes the image's
    ``mm_tokens_per_image`` soft tokens (``image_token_index``) between ``<start_of_image>`` and
    ``<end_of_image>``, with a blank line on each side."""

    def __init__(self, hf_config: Any, model_path: str, tokenizer: Any) -> None:
        super().__init__(hf_config, model_path, tokenizer)
        if getattr(self.image_processor, "do_pan_and_scan", False):
            raise ValueError("the checkpoint's image processor sets do_pan_and_scan; pan-and-scan crops are not "
                             "supported: set it to false in preprocessor_config.json")
        self.placeholder_token_id = int(hf_config.boi_token_index)
        self.image_token_id = int(hf_config.image_token_index)
        self.eoi_token_id = int(hf_config.eoi_token_index)
        self.num_image_tokens = int(hf_config.mm_tokens_per_image)
        self.newlines: list[int] = []
        if tokenizer is not None:
            self.placeholder_text = tokenizer.convert_ids_to_tokens(self.placeholder_token_id)
            self.newlines = list(tokenizer.encode("\n\n", add_special_tokens=False))

    def expand_prompt(self, token_ids: list[int], images: Sequence[ProcessedImage]) -> tuple[list[int], list[int]]:
        """Each ``<start_of_image>`` → blank line, ``<start_of_image>``, the soft tokens, ``<end_of_image>``,
        blank line; the offsets are those of each image's first soft token (its embeddings' span)."""
        boi = self.placeholder_token_id
        found = self.placeholder_positions(token_ids, len(images))
        out: list[int] = []
        offsets: list[int] = []
        prev = 0
        for pos, image in zip(found, images, strict=True):
            out.extend(token_ids[prev:pos])
            run = self._newline_run(out[-1]) if out else None
            if run is not None:  # newlines before the placeholder join the blank line, as one text would
                out.pop()
            out.extend(self._newlines(run or "", ""))
            out.append(boi)
            offsets.append(len(out))
            out.extend([self.image_token_id] * image.num_tokens)
            out.append(self.eoi_token_id)
            prev = pos + 1
            run = self._newline_run(token_ids[prev]) if prev < len(token_ids) else None
            if run is not None:
                prev += 1
            out.extend(self._newlines("", run or ""))
        out.extend(token_ids[prev:])
        return out, offsets

    def _newline_run(self, token_id: int) -> str | None:
        """The token's text if it is newlines only (None otherwise, or without a tokenizer)."""
        if self.tokenizer is None or token_id == self.placeholder_token_id:
            return None
        text = self.tokenizer.decode([token_id])
        return text if text and text.strip("\n") == "" else None

    def _newlines(self, before: str, after: str) -> list[int]:
        """The ids of a blank line with ``before`` / ``after`` newlines joined to it."""
        if not before and not after:
            return self.newlines
        return list(self.tokenizer.encode(before + "\n\n" + after, add_special_tokens=False))
