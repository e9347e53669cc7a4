"""The inputs of the vision-language benchmark scripts: seeded random images, and a prompt's token ids with
its image expanded as the engine's front end expands it (what HF's ``generate`` is given to match)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

    from infercore.models.multimodal import MultiModalProcessor


def random_images(n: int, size: int, seed: int) -> list[Image.Image]:
    """``n`` RGB images of ``size`` x ``size`` uniform noise, the same for the same ``seed``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


def expanded_prompt_ids(processor_cls: type[MultiModalProcessor], folder: str, prompt: str,
                        image: Any) -> list[int]:
    """``prompt``'s token ids with its one image placeholder expanded for ``image`` by the model folder's
    processor (``processor_cls``), as the engine's front end makes them."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    processor = processor_cls(AutoConfig.from_pretrained(folder), folder, tokenizer)
    ids, _ = processor.expand_prompt(tokenizer.encode(prompt), [processor.process_image(image)])
    return ids
