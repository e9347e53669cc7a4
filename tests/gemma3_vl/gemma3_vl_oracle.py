"""HF's Gemma3ForConditionalGeneration as the oracle: greedy tokens and per-step logprobs for a prompt's expanded
token ids and its images (HF's image processor; ``token_type_ids`` marking the image soft tokens, as HF's
processor makes them, so HF applies its bidirectional image mask)."""

from __future__ import annotations

from pathlib import Path

import torch

from infercore.outputs import RequestOutput

MAX_NEW_TOKENS = 10
TOLERANCE = 1e-4


class Gemma3Oracle:
    def __init__(self, folder: Path) -> None:
        from transformers import AutoImageProcessor, Gemma3ForConditionalGeneration

        self.model = Gemma3ForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()
        self.image_processor = AutoImageProcessor.from_pretrained(str(folder))
        self.image_token_id = self.model.config.image_token_id

    def greedy(self, prompt_ids: list[int], images: list) -> tuple[list[int], torch.Tensor]:
        ids = torch.tensor([prompt_ids])
        kwargs = {}
        if images:
            pixels = self.image_processor(images=images, return_tensors="np")["pixel_values"]
            kwargs["pixel_values"] = torch.from_numpy(pixels)
            kwargs["token_type_ids"] = (ids == self.image_token_id).long()
        with torch.no_grad():
            gen = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS,
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
