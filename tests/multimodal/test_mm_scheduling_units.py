"""Units: the encoder budget cuts a request's tokens before an image it cannot encode, never inside one it
must start; block hashes cover the images whose placeholders they hold; wire tensors round-trip; the M-RoPE
hook fills per-row positions."""

from __future__ import annotations

import msgspec
import numpy as np
import torch

from infercore.sampling_params import SamplingParams
from infercore.scheduler.block_hash import extend_block_hashes
from infercore.scheduler.encoder_budget import EncoderBudget
from infercore.scheduler.request import Request
from infercore.wire.messages import EngineCoreRequest
from infercore.wire.multimodal import MultiModalFeature, WireTensor


def _request(features: list[tuple[int, int, str]], length: int = 100) -> Request:
    mm = [MultiModalFeature("image", key, offset, n) for offset, n, key in features]
    return Request("r", list(range(length)), SamplingParams(max_tokens=4), mm_features=mm)


def test_encoder_budget_stops_before_an_image_that_does_not_fit():
    budget = EncoderBudget(20)
    budget.start_step()
    request = _request([(10, 16, "a"), (40, 16, "b")])
    assert budget.fit(request, 0, 60, new_to_worker=True) == 40  # image b waits for the next step
    budget.start_step()
    assert budget.fit(request, 40, 60, new_to_worker=False) == 60
    # A chunk that resumes inside an image the worker holds costs nothing.
    budget.start_step()
    budget.left = 0
    budget.encoded_any = True
    assert budget.fit(request, 20, 10, new_to_worker=False) == 10
    # A request new to the worker (resumed after preemption) must encode the image it resumes inside.
    assert budget.fit(request, 20, 10, new_to_worker=True) == 0
    # One image over the whole budget still runs, alone.
    big = EncoderBudget(8)
    big.start_step()
    assert big.fit(request, 0, 30, new_to_worker=True) == 30
    assert big.fit(_request([(0, 16, "c")]), 0, 30, new_to_worker=True) == 0


def test_block_hashes_cover_images():
    def hashes(key: str) -> list[bytes]:
        out: list[bytes] = []
        extend_block_hashes(out, list(range(32)), 8, 4, None, 0, [MultiModalFeature("image", key, 9, 6)])
        return out

    a, same, other = hashes("x"), hashes("x"), hashes("y")
    assert a == same
    assert a[:2] == other[:2] and all(h1 != h2 for h1, h2 in zip(a[2:], other[2:]))  # blocks 2.. hold the image


def test_wire_tensor_and_feature_round_trip():
    pixels = np.random.default_rng(0).random((3, 8, 8), dtype=np.float32)
    feature = MultiModalFeature("image", "k", 3, 16, {"pixel_values": WireTensor.from_numpy(pixels)})
    request = EngineCoreRequest("r", [1, 2, 3], SamplingParams(), 0.0, mm_features=[feature])
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=EngineCoreRequest)
    assert np.array_equal(decoded.mm_features[0].data["pixel_values"].to_numpy(), pixels)
    bf16 = torch.randn(4, 5).to(torch.bfloat16)
    assert torch.equal(WireTensor.from_tensor(bf16).to_tensor(), bf16)


def test_mrope_positions_are_filled_per_row():
    from infercore.wire.scheduler_output import CachedRequests, NewRequestData, SchedulerOutput
    from infercore.worker.batch_layout import make_layout
    from infercore.worker.mm_step import MultiModalStep

    class FakeMRope(torch.nn.Module):
        supports_multimodal = True
        uses_mrope = True
        mm_inputs = None

        def mrope_positions(self, prompt, features):
            return np.stack([np.arange(len(prompt)), np.arange(len(prompt)) * 2, np.zeros(len(prompt), int)]), 7

    model = FakeMRope()
    step = MultiModalStep(model, 32, 8, torch.float32, torch.device("cpu"))
    new = NewRequestData("a", [5, 6, 7, 8], SamplingParams(), [0], 0)
    step.update(SchedulerOutput([new], CachedRequests(), [4], 4, set()))
    plain = NewRequestData("b", [1, 2], SamplingParams(), [1], 0)
    step.update(SchedulerOutput([plain], CachedRequests(), [2], 2, set()))
    layout = make_layout(np.array([0, 1]), np.array([5, 2]), np.array([0, 0]))  # row a: 4 prompt + 1 generated
    step.prepare(["a", "b"], layout)
    got = model.mm_inputs.mrope_positions[:, :7].tolist()
    # The hook covers text-only requests too (b): generated rows are position + delta on all three axes.
    assert got == [[0, 1, 2, 3, 11, 0, 1], [0, 2, 4, 6, 11, 0, 2], [0, 0, 0, 0, 11, 0, 0]]


def test_a_model_registration_may_name_its_processor():
    from infercore.models.llava_processor import LlavaProcessor
    from infercore.multimodal.inputs import multimodal_processor_class
    from infercore.plugins import get_plugin_manager
    from infercore.plugins.registry import Registration

    assert multimodal_processor_class("LlavaForConditionalGeneration") is LlavaProcessor
    assert multimodal_processor_class("Qwen3ForCausalLM") is None
    registry = get_plugin_manager().registry("model")
    registry.add(Registration("model", "AcmeVLM", "infercore.models.llava:LlavaForConditionalGeneration", "acme",
                              {"multimodal_processor": "infercore.models.multimodal:MultiModalProcessor"}))
    try:
        from infercore.models.multimodal import MultiModalProcessor

        assert multimodal_processor_class("AcmeVLM") is MultiModalProcessor
    finally:
        registry._items.pop("AcmeVLM", None)


def test_the_built_in_registrations_say_what_their_classes_say():
    # The front end reads a built-in model's processor (or None) from its registration, never importing the
    # model: each registration must agree with its class.
    from infercore.models.multimodal import is_multimodal
    from infercore.multimodal.inputs import multimodal_processor_class
    from infercore.plugins import get_plugin_manager

    registry = get_plugin_manager().registry("model")
    builtin = [reg for reg in registry.all() if reg.target.startswith("infercore.models.")]
    assert len(builtin) >= 19
    for reg in builtin:
        assert "multimodal_processor" in reg.metadata, reg.name
        cls = registry.load(reg.name)
        expected = cls.multimodal_processor if is_multimodal(cls) else None
        assert multimodal_processor_class(reg.name) is expected, reg.name


def test_a_registration_may_say_its_model_takes_no_images_without_being_imported():
    from infercore.multimodal.inputs import multimodal_processor_class
    from infercore.plugins import get_plugin_manager
    from infercore.plugins.registry import Registration

    registry = get_plugin_manager().registry("model")
    registry.add(Registration("model", "AcmeText", "no_such_package.model:Model", "acme",
                              {"multimodal_processor": None}))
    try:
        assert multimodal_processor_class("AcmeText") is None  # the target is never imported
    finally:
        registry._items.pop("AcmeText", None)
