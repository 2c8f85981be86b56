"""M-RoPE against transformers: Qwen2-VL's and Qwen3-VL's rotary, the position index and decoding with rope_deltas."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="peer oracle: install the 'peers' extra")

from transformers import Qwen2VLConfig, Qwen3VLConfig  # noqa: E402
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel  # noqa: E402
from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl  # noqa: E402
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3_vl  # noqa: E402

import posenc  # noqa: E402
from posenc.functional.coordinates import (  # noqa: E402
    from_mrope_layout,
    mrope_decode_positions,
    mrope_positions,
    to_mrope_layout,
)

TEXT = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}
VISION = {
    "depth": 1,
    "embed_dim": 16,
    "hidden_size": 32,
    "num_heads": 2,
    "patch_size": 2,
    "temporal_patch_size": 1,
}
#: text, an image (1×4×4 patches → 4 tokens), text, a video (2×4×4 → 8 tokens), text; row 1 left-padded
TYPES = torch.tensor(
    [[0, 0, 1, 1, 1, 1, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 0], [0, 0, 0, 0, 1, 1, 1, 1, 0, 2, 2, 2, 2, 2, 2, 2, 2]]
)
MASK = torch.tensor([[1] * 17, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
IMAGES, VIDEOS = torch.tensor([[1, 4, 4], [1, 4, 4]]), torch.tensor([[2, 4, 4], [2, 4, 4]])


def _quiet_config(cls, **kwargs):
    config = cls(**kwargs)
    config.text_config.bos_token_id = config.text_config.eos_token_id = None
    return config


@pytest.fixture(scope="module")
def qwen2_vl_model():
    config = _quiet_config(
        Qwen2VLConfig,
        text_config=TEXT
        | {
            "vocab_size": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        vision_config=VISION | {"spatial_merge_size": 2, "in_chans": 3},
    )
    return qwen2_vl.Qwen2VLModel(config).eval()


def test_the_position_index_is_qwen2_vls_with_padding(qwen2_vl_model):
    ids = torch.zeros_like(TYPES)
    theirs, their_deltas = qwen2_vl_model.get_rope_index(ids, TYPES, IMAGES, VIDEOS, attention_mask=MASK)
    ours, deltas = mrope_positions(TYPES, IMAGES, VIDEOS, spatial_merge_size=2, attention_mask=MASK)
    assert torch.equal(to_mrope_layout(ours), theirs) and torch.equal(from_mrope_layout(theirs), ours)
    assert torch.equal(deltas, their_deltas)


def test_the_position_index_is_qwen2_5_vls_with_time_intervals():
    config = _quiet_config(
        transformers.Qwen2_5_VLConfig,
        text_config=TEXT
        | {
            "vocab_size": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "out_hidden_size": 32,
            "num_heads": 2,
            "intermediate_size": 32,
            "patch_size": 2,
            "temporal_patch_size": 1,
            "spatial_merge_size": 2,
            "tokens_per_second": 4,
            "fullatt_block_indexes": [0],
        },
    )
    model = Qwen2_5_VLModel(config).eval()
    seconds = torch.tensor([0.5, 2.0])
    theirs, their_deltas = model.get_rope_index(
        torch.zeros_like(TYPES), TYPES, IMAGES, VIDEOS, attention_mask=MASK, second_per_grid_ts=seconds
    )
    ours, deltas = mrope_positions(
        TYPES, IMAGES, VIDEOS, spatial_merge_size=2, attention_mask=MASK, video_time_intervals=4 * seconds
    )
    assert torch.equal(to_mrope_layout(ours), theirs) and torch.equal(deltas, their_deltas)


def test_the_position_index_is_qwen3_vls_frame_by_frame():
    config = _quiet_config(
        Qwen3VLConfig,
        text_config=TEXT
        | {
            "vocab_size": 64,
            "head_dim": 16,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "out_hidden_size": 32,
            "num_heads": 2,
            "intermediate_size": 32,
            "patch_size": 2,
            "temporal_patch_size": 1,
            "spatial_merge_size": 2,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": [],
        },
    )
    model = qwen3_vl.Qwen3VLModel(config).eval()
    # Qwen3-VL puts a timestamp between frames: each frame is a video of its own
    types = torch.tensor([[0, 1, 1, 1, 1, 0, 2, 2, 2, 2, 0, 2, 2, 2, 2, 0]])
    theirs, their_deltas = model.get_rope_index(torch.zeros_like(types), types, IMAGES[:1], VIDEOS[:1])
    ours, deltas = mrope_positions(
        types, IMAGES[:1], VIDEOS[:1], spatial_merge_size=2, split_video_frames=True
    )
    assert torch.equal(to_mrope_layout(ours), theirs) and torch.equal(deltas, their_deltas)


@pytest.mark.parametrize(
    ("module", "rotary", "sections", "layout"),
    [
        (qwen2_vl, "Qwen2VLRotaryEmbedding", [2, 3, 3], "contiguous"),
        (qwen3_vl, "Qwen3VLTextRotaryEmbedding", [4, 2, 2], "interleaved"),
    ],
)
def test_m_rope_rotates_as_qwen2_vl_and_qwen3_vl(module, rotary, sections, layout):
    config = transformers.Qwen2VLTextConfig(
        **TEXT,
        head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections},
    )
    theirs = getattr(module, rotary)(config)
    positions, _ = mrope_positions(TYPES, IMAGES, VIDEOS, spatial_merge_size=2, attention_mask=MASK)
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 2, 17, 16, generator=generator) for _ in range(2))
    cos, sin = theirs(q, to_mrope_layout(positions))
    expected = module.apply_rotary_pos_emb(q, k, cos, sin)
    rope = posenc.build("rope", d_head=16, sections=sections, section_layout=layout)
    for got, want in zip(rope.rotate(q, k, positions, positions), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=2e-6)  # their float32 angles at positions < 20


def test_decoding_after_an_image_continues_where_qwen2_vl_generate_does():
    config = _quiet_config(
        Qwen2VLConfig,
        text_config=TEXT
        | {
            "vocab_size": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        vision_config=VISION | {"spatial_merge_size": 2, "in_chans": 3},
        image_token_id=60,
        video_token_id=61,
    )
    torch.manual_seed(0)
    model = qwen2_vl.Qwen2VLForConditionalGeneration(config).eval()
    ids = torch.tensor([[5, 6, 60, 60, 60, 60, 7, 8, 9], [0, 0, 5, 60, 60, 60, 60, 7, 8]])
    mask = torch.tensor([[1] * 9, [0, 0] + [1] * 7])
    types = (ids == 60).long()
    grids = torch.tensor([[1, 4, 4], [1, 4, 4]])
    pixels = torch.randn(32, 12)  # 2 images × 16 patches × (3 channels · 2 · 2)
    seen = []
    hook = model.model.language_model.rotary_emb.register_forward_hook(
        lambda m, args, out: seen.append(args[1])
    )
    try:
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            mm_token_type_ids=types,
            pixel_values=pixels,
            image_grid_thw=grids,
            max_new_tokens=4,
            do_sample=False,
        )
    finally:
        hook.remove()
    prompt, deltas = mrope_positions(types, grids, spatial_merge_size=2, attention_mask=mask)
    assert len(seen) == 4 and [p.shape[-1] for p in seen] == [9, 1, 1, 1]  # the prompt, then 3 decoded tokens
    assert int(deltas.abs().max()) > 0  # the image moves the text after it: decoding is not 1-D counting
    assert torch.equal(from_mrope_layout(seen[0][1:] if seen[0].shape[0] == 4 else seen[0]), prompt)
    real = mask.sum(-1)  # tokens before the first decoded one, per row
    for step, position_ids in enumerate(seen[1:]):
        theirs = from_mrope_layout(position_ids[1:] if position_ids.shape[0] == 4 else position_ids)
        assert torch.equal(theirs, mrope_decode_positions(deltas, real + step))
