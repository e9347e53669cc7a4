"""HF's vision-language models as the oracle: greedy tokens and per-step logprobs for a prompt's expanded
token ids and its images (processed by the model folder's own HF image processor). A subclass names the HF
class and may add inputs (Gemma 3's ``token_type_ids``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from infercore.outputs import RequestOutput

TOLERANCE = 1e-4


class HFVisionOracle:
    """Greedy HF generation of ``max_new_tokens`` tokens for one prompt and its images, and the check of an
    infercore output against it (same tokens, logprobs within :data:`TOLERANCE`)."""

    #: The transformers class name of the model.
    hf_class = ""
    max_new_tokens = 12

    def __init__(self, folder: Path) -> None:
        import transformers
        from transformers import AutoImageProcessor

        cls = getattr(transformers, self.hf_class)
        self.model = cls.from_pretrained(str(folder), dtype=torch.float32).eval()
        self.image_processor = AutoImageProcessor.from_pretrained(str(folder))

    def extra_inputs(self, ids: torch.Tensor) -> dict[str, Any]:
        """More ``generate`` inputs for a prompt with images."""
        return {}

    def greedy(self, prompt_ids: list[int], images: list) -> tuple[list[int], torch.Tensor]:
        ids = torch.tensor([prompt_ids])
        kwargs: dict[str, Any] = {}
        if images:
            pixels = self.image_processor(images=images, return_tensors="np")["pixel_values"]
            kwargs["pixel_values"] = torch.from_numpy(pixels)
            kwargs.update(self.extra_inputs(ids))
        with torch.no_grad():
            gen = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=self.max_new_tokens, min_new_tokens=self.max_new_tokens,
                                      output_logits=True, return_dict_in_generate=True, **kwargs)
        return gen.sequences[0, ids.shape[1]:].tolist(), torch.stack(gen.logits)[:, 0].float().log_softmax(-1)

    def check(self, out: RequestOutput, images: list, where: str) -> None:
        tokens, ref = self.greedy(list(out.prompt_token_ids), images)
        completion = out.outputs[0]
        assert completion.token_ids == tokens, f"{where}: tokens differ from HF's"
        assert completion.logprobs is not None
        for step, position in enumerate(completion.logprobs):
            for token_id, lp in position.items():
                assert abs(lp.logprob - float(ref[step, token_id])) < TOLERANCE, f"{where}: step {step} token {token_id}"
