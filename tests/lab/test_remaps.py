"""The extension study's position remaps: each position function against its paper's formula in exact
integers, the merged two-computation scores of Self-Extend and ReRoPE against a loop over every
(query, key), and the remapped model against plain RoPE where the remap changes nothing."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.lab import remaps
from posenc.lab.remaps import Remap
from posenc.model import TransformerLM


def test_self_extend_distance_is_the_papers_formula():
    window, group = 4, 3
    i = torch.arange(20)[:, None]
    j = torch.arange(20)[None, :]
    got = remaps.self_extend_distance(i, j, window, group)
    for a in range(20):
        for b in range(a + 1):  # causal pairs: within the window i − j, else ⌊i/G⌋ + W − ⌊W/G⌋ − ⌊j/G⌋
            expected = a - b if a - b < window else a // group + window - window // group - b // group
            assert int(got[a, b]) == expected, (a, b)
    assert int(got[10, 0]) == 3 + 4 - 1 - 0
    assert got.dtype == torch.int64


def test_self_extends_group_is_the_smallest_that_keeps_distances_below_the_training_length():
    trained, window = 64, 32
    for target in (128, 256, 512):
        group = remaps.self_extend_group(target, trained, window)
        positions = torch.arange(target)
        largest = int(
            remaps.self_extend_distance(positions[:, None], positions[None, :], window, group).max()
        )
        assert largest < trained
        if group > 1:
            smaller = remaps.self_extend_distance(positions[:, None], positions[None, :], window, group - 1)
            assert int(smaller.max()) >= trained
    with pytest.raises(ValueError, match="window"):
        remaps.self_extend_group(128, 64, 64)


def test_rerope_clips_the_distance_at_its_window():
    i, j = torch.arange(12)[:, None], torch.arange(12)[None, :]
    got = remaps.rerope_distance(i, j, 5)
    for a in range(12):
        for b in range(a + 1):
            assert int(got[a, b]) == min(a - b, 5)


def test_pose_ids_are_chunks_of_consecutive_ids_skipping_forward_within_the_target():
    generator = torch.Generator().manual_seed(0)
    length, target, chunks = 16, 128, 3
    ids = remaps.pose_positions(400, length, target, chunks, generator)
    assert ids.shape == (400, length) and ids.dtype == torch.int64
    steps = ids[:, 1:] - ids[:, :-1]
    assert bool((ids[:, 0] == 0).all())  # the first chunk's bias is 0
    assert bool((steps >= 1).all())  # increasing
    assert bool((ids < target).all())
    assert bool(((steps > 1).sum(dim=1) <= chunks - 1).all())  # at most a skip between chunks
    assert int(ids[:, -1].max()) == target - 1  # the last bias reaches T − L
    assert int((ids[:, :, None] - ids[:, None, :]).max()) == target - 1  # distances up to the target


def test_continuous_positions_are_sorted_uniforms_over_the_target_range():
    positions = remaps.continuous_positions(64, 32, 512, torch.Generator().manual_seed(0))
    assert positions.dtype == torch.float64 and positions.shape == (64, 32)
    assert bool((positions[:, 1:] >= positions[:, :-1]).all())
    assert bool((positions >= 0).all()) and bool((positions < 512).all())
    assert float(positions.max()) > 400  # spans the range, not the first L positions
    assert not bool((positions == positions.round()).all())


@pytest.mark.parametrize(
    "remap",
    [Remap("self_extend", window=3, group=2), Remap("rerope", window=3)],
    ids=["self_extend", "rerope"],
)
@pytest.mark.parametrize("batched", [False, True])
def test_merged_scores_are_the_loop_over_every_query_and_key(remap, batched):
    torch.manual_seed(0)
    encoding = posenc.build("rope", d_head=8).double()
    s = 6
    q, k = torch.randn(2, 2, s, 8, dtype=torch.float64), torch.randn(2, 2, s, 8, dtype=torch.float64)
    positions = torch.stack((torch.arange(s), torch.arange(s) + 5)) if batched else torch.arange(s)
    got = remaps.remapped_scores(encoding, remap, q, k, positions)  # [b, h, i, j]
    scale = encoding.logit_scale(8)
    for b in range(2):
        row = positions[b] if batched else positions
        for i in range(s):
            for j in range(s):
                distance = int(remap.distance(row[i], row[j]))
                turned_q, key = encoding.rotate(
                    q[b : b + 1, :, i : i + 1],
                    k[b : b + 1, :, j : j + 1],
                    torch.tensor([distance]),
                    torch.tensor([0]),
                )
                expected = (turned_q * key).sum(-1)[0, :, 0] * scale  # [h]
                torch.testing.assert_close(got[b, :, i, j], expected, rtol=1e-12, atol=1e-12)


def _model(seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(
        20, d_model=32, n_layers=2, n_heads=2, encoding="rope", encoding_kwargs={"d_head": 16}
    )


def test_the_continuous_remap_trains_at_its_float_positions():
    # its fine-tune turned q and k at float positions, which the rotation refused (a ValueError that stopped
    # the extension preset); they are now turned at exactly those positions
    plain, remapped = _model(), _model()
    step = remaps.install(remapped, {"name": "continuous", "target": 64})
    step.positions = remaps.continuous_positions(2, 12, 64, torch.Generator().manual_seed(0))  # [2, 12] float
    tokens = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(1))
    out = remapped(tokens)
    assert not torch.allclose(out, plain(tokens))
    out.sum().backward()
    assert remapped.blocks[0].attention.q_proj.weight.grad is not None


@pytest.mark.parametrize(
    "settings",
    [
        {"name": "self_extend", "window": 64, "group": 2},  # every distance within the window
        {"name": "rerope", "window": 64},
        {"name": "continuous", "target": 64},  # evaluated at the ordinary (integer) positions
        {"name": "pose", "target": 64},
    ],
    ids=lambda settings: settings["name"],
)
def test_a_remap_that_changes_no_distance_gives_plain_ropes_logits(settings):
    plain, remapped = _model(), _model()
    remaps.install(remapped, settings)
    tokens = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(remapped(tokens), plain(tokens), rtol=1e-5, atol=1e-5)


def test_a_remap_beyond_its_window_changes_the_logits_and_trains():
    plain, remapped = _model(), _model()
    remaps.install(remapped, {"name": "self_extend", "window": 4, "group": 2})
    tokens = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(1))
    out = remapped(tokens)
    assert not torch.allclose(out, plain(tokens))
    out.sum().backward()
    assert remapped.blocks[0].attention.q_proj.weight.grad is not None


@pytest.mark.parametrize(
    "settings",
    [{"name": "self_extend", "window": 4, "group": 2}, {"name": "rerope", "window": 4}],
    ids=lambda settings: settings["name"],
)
def test_a_float64_model_keeps_float64_through_the_remapped_scores(settings, monkeypatch):
    # the merged scores were cast with .float(), so a float64 model's softmax ran in float32
    model = _model().double()
    remaps.install(model, settings)
    softmax, seen = remaps.F.softmax, []
    monkeypatch.setattr(remaps.F, "softmax", lambda x, dim: seen.append(x.dtype) or softmax(x, dim=dim))
    logits = model(torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(1)))
    assert logits.dtype == torch.float64 and seen and set(seen) == {torch.float64}
    positions = torch.arange(12)
    q, k = torch.randn(2, 1, 2, 12, 16, dtype=torch.float64).unbind(0)
    encoding = model.blocks[0].attention.encoding
    scores = remaps.remapped_scores(encoding, remaps.Remap.of(settings), q, k, positions)
    expected = torch.empty(1, 2, 12, 12, dtype=torch.float64)
    for i in range(12):
        for j in range(12):
            far = remaps.Remap.of(settings).far_positions(positions)
            at_q, at_k = (positions, positions) if i - j < settings["window"] else far
            turned_q, turned_k = encoding.rotate(q, k, at_q, at_k)
            expected[..., i, j] = (turned_q[..., i, :] * turned_k[..., j, :]).sum(-1) * encoding.logit_scale(16)
    torch.testing.assert_close(scores, expected, rtol=1e-12, atol=1e-12)


def test_remaps_refuse_what_they_cannot_serve():
    torch.manual_seed(0)
    alibi = TransformerLM(
        20, d_model=32, n_layers=1, n_heads=2, encoding="alibi", encoding_kwargs={"n_heads": 2}
    )
    with pytest.raises(ValueError, match="ALiBi is of kind 'bias'"):
        remaps.install(alibi, {"name": "rerope", "window": 4})
    with pytest.raises(ValueError, match="position_remap must name"):
        Remap.of({"name": "dca"})
    with pytest.raises(TypeError, match="group"):
        Remap.of({"name": "self_extend", "window": 4})
    model = _model()
    remaps.install(model, {"name": "rerope", "window": 4})
    with pytest.raises(ValueError, match="no KV cache"):
        model(torch.zeros(1, 3, dtype=torch.int64), caches=model.new_caches())
