"""Gemma 3's processor, built from the model folder without torchvision, against HF's ``Gemma3Processor``: the same
expanded token ids (blank line, <start_of_image>, the soft tokens, <end_of_image>, blank line per image), the same
pixels, and image spans where HF's ``token_type_ids`` mark them; the scheduler's whole-span rule and the
engine's refusal of attention backends without visibility bounds."""

from __future__ import annotations

import numpy as np
import pytest
from multimodal.mm_images import random_image

from infercore.attention.reference_backend import ReferenceAttentionBackend
from infercore.attention.visible_bounds import visible_bounds_reasons
from infercore.scheduler.image_spans import ImageSpans


def test_processor_matches_hf(gemma3_vl_folder):
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer

    from infercore.models.gemma3_vl_processor import Gemma3Processor

    hf = AutoProcessor.from_pretrained(str(gemma3_vl_folder))
    tokenizer = AutoTokenizer.from_pretrained(str(gemma3_vl_folder))
    ours = Gemma3Processor(AutoConfig.from_pretrained(str(gemma3_vl_folder)), str(gemma3_vl_folder), tokenizer)
    images = [random_image(40, 50, seed=1), random_image(70, 20, seed=2)]
    text = "the engine <start_of_image> and then<start_of_image>compare them"
    ref = hf(text=text, images=images, return_tensors="np")
    items = [ours.process_image(image) for image in images]
    ids, offsets = ours.expand_prompt(tokenizer.encode(text, add_special_tokens=False), items)
    assert ids == ref["input_ids"][0].tolist()
    np.testing.assert_allclose(np.stack([i.data["pixel_values"] for i in items]), ref["pixel_values"], atol=1e-6)
    marked = np.flatnonzero(ref["token_type_ids"][0])
    assert [int(marked[0]), int(marked[16])] == offsets and len(marked) == 32
    assert all(i.num_tokens == 16 for i in items)
    with pytest.raises(ValueError, match="1 image placeholder"):
        ours.expand_prompt(tokenizer.encode("<start_of_image>", add_special_tokens=False), items)


class _Feature:
    def __init__(self, offset: int, length: int) -> None:
        self.offset, self.length, self.end = offset, length, offset + length


class _Request:
    def __init__(self, *spans: tuple[int, int]) -> None:
        self.mm_features = [_Feature(o, n) for o, n in spans]


def test_whole_span_rule():
    request = _Request((5, 16), (30, 16))
    fit = ImageSpans.fit
    assert fit(request, 0, 10) == 5  # would end inside the first image: ends before it
    assert fit(request, 0, 21) == 21  # ends right after it
    assert fit(request, 5, 10) == 0  # starts at the image and cannot reach its end: waits
    assert fit(request, 12, 9) == 9  # a prefix hit inside the image: the rest of it, then on
    assert fit(request, 12, 8) == 0
    assert fit(request, 21, 20) == 9  # the second image moves the boundary back to its start
    with pytest.raises(ValueError, match="at least 16"):
        ImageSpans(12).check(request)  # type: ignore[arg-type]
    ImageSpans(16).check(request)  # type: ignore[arg-type]


def test_backends_without_visible_bounds_are_refused():
    class NoBounds(ReferenceAttentionBackend):
        name = "no_bounds"
        supports_visible_bounds = False

    assert visible_bounds_reasons(ReferenceAttentionBackend, True) == []
    assert visible_bounds_reasons(NoBounds, False) == []
    [reason] = visible_bounds_reasons(NoBounds, True)
    assert "supports_visible_bounds" in reason and "'no_bounds'" in reason


class _NewlineRunTokenizer:
    """A tokenizer with one token per run of newlines (as Gemma's has), one per special token, one per other
    piece of text: what HF's one-pass tokenizing of the replaced text gives, to check the token-level merge."""

    def __init__(self, specials: dict[str, int]) -> None:
        self.ids = dict(specials)
        self.texts = {i: t for t, i in specials.items()}

    def _id(self, piece: str) -> int:
        if piece not in self.ids:
            self.ids[piece] = 1000 + len(self.ids)
            self.texts[self.ids[piece]] = piece
        return self.ids[piece]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        import re

        return [self._id(p) for p in re.findall(r"\n+|<start_of_image>|<end_of_image>|<image_soft_token>|[^\n<]+",
                                                text)]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.texts[i] for i in ids)

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.texts[token_id]


@pytest.mark.parametrize("text", ["user\n<start_of_image>Describe", "<start_of_image>\nwhat",
                                  "a\n\n<start_of_image><start_of_image>\n\n\nb", "<start_of_image>x<start_of_image>"])
def test_blank_lines_merge_with_newlines_beside_the_image(gemma3_vl_folder, text):
    from transformers import AutoConfig

    from infercore.models.gemma3_vl_processor import Gemma3Processor
    from infercore.models.multimodal import ProcessedImage

    config = AutoConfig.from_pretrained(str(gemma3_vl_folder))
    tokenizer = _NewlineRunTokenizer({"<start_of_image>": config.boi_token_index,
                                      "<end_of_image>": config.eoi_token_index,
                                      "<image_soft_token>": config.image_token_index})
    processor = Gemma3Processor(config, str(gemma3_vl_folder), tokenizer)
    count = text.count("<start_of_image>")
    ids, offsets = processor.expand_prompt(tokenizer.encode(text), [ProcessedImage({}, 4)] * count)
    image = "\n\n<start_of_image>" + "<image_soft_token>" * 4 + "<end_of_image>\n\n"
    assert ids == tokenizer.encode(text.replace("<start_of_image>", image))  # HF's string-level expansion
    assert all(ids[o - 1] == config.boi_token_index and ids[o + 4] == config.eoi_token_index for o in offsets)
