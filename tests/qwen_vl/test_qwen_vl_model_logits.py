"""Qwen2.5-VL's decoder with M-RoPE and merged image embeddings against transformers' logits (no engine)."""

from __future__ import annotations

import torch
from transformers import Qwen2_5_VLConfig
from transformers import Qwen2_5_VLForConditionalGeneration as HFModel

from infercore.attention import CommonAttentionMetadata
from infercore.attention.binding import bind_attention
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.kv_cache.spec import KVCacheSpec
from infercore.models.mrope_positions import image_spans, mrope_positions
from infercore.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration
from infercore_cpu.attention import TorchPagedAttentionBackend

IMAGE, START, END = 90, 91, 92


def tiny_config() -> Qwen2_5_VLConfig:
    return Qwen2_5_VLConfig(
        text_config={"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}},
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 48, "num_heads": 4, "out_hidden_size": 64,
                       "fullatt_block_indexes": [1], "window_size": 56},
        image_token_id=IMAGE, vision_start_token_id=START, vision_end_token_id=END, tie_word_embeddings=False)


def test_positions_hand_checked() -> None:
    # "a b <start> [2x3 blocks] <end> c": the image starts at 3; text resumes at 3 + max(2, 3) = 6.
    ids = [1, 2, START] + [IMAGE] * 6 + [END, 3]
    spans = image_spans(ids, IMAGE, [(1, 4, 6)], merge=2)
    assert spans == [(3, (1, 4, 6))]
    positions, delta = mrope_positions(len(ids), spans, merge=2)
    assert positions[0].tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7]
    assert positions[1].tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7]
    assert positions[2].tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    assert delta == 8 - 11


def test_prefill_logits_match_transformers() -> None:
    torch.manual_seed(0)
    config = tiny_config()
    hf = HFModel(config).eval()
    ours = Qwen2_5_VLForConditionalGeneration(tiny_config(), torch.float32)
    ours.load_weights((n, t.clone()) for n, t in hf.state_dict().items())
    grids = [(1, 4, 6), (1, 6, 4)]
    ids = [5, 6, START] + [IMAGE] * 6 + [END, 7, START] + [IMAGE] * 6 + [END, 8, 9]
    pixels = torch.randn(48, 3 * 2 * 14 * 14)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor([ids]), pixel_values=pixels, image_grid_thw=torch.tensor(grids),
                      mm_token_type_ids=torch.tensor([[int(t == IMAGE) for t in ids]])).logits[0]
    spec = KVCacheSpec(16, 2, 16, torch.float32)
    caches = [torch.zeros(TorchPagedAttentionBackend.get_kv_cache_shape(4, 16, 2, 16)) for _ in range(2)]
    bind_attention(ours, TorchPagedAttentionBackend, caches)
    builder = TorchPagedAttentionBackend.get_builder_cls()(spec, torch.device("cpu"), 4, 256)
    n = len(ids)
    qsl, lens = torch.tensor([0, n], dtype=torch.int32), torch.tensor([n], dtype=torch.int32)
    common = CommonAttentionMetadata(num_reqs=1, num_actual_tokens=n, max_query_len=n, max_seq_len=n,
                                     query_start_loc=qsl, seq_lens=lens, block_table=torch.tensor([[1, 2, 3]],
                                     dtype=torch.int32), slot_mapping=torch.arange(16, 16 + n),
                                     query_start_loc_cpu=qsl, seq_lens_cpu=lens)
    input_ids = torch.tensor(ids)
    positions, _ = ours.prompt_positions(ids, grids)
    with torch.no_grad(), set_forward_context(ForwardContext(builder.build(common), n)):
        embeds = torch.cat(ours.embed_images(pixels, grids))
        hidden = ours(input_ids, positions, ours.embed_input_ids(input_ids, embeds, input_ids == IMAGE))
        got = ours.compute_logits(hidden)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
