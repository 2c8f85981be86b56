"""PoPE: the float64 loop reference of the score, parity with x-transformers' PolarEmbedding, magnitudes of
the content and phases of the position, twice the width, on every attention backend, bad input named."""

from __future__ import annotations

import math

import pytest
import torch

import posenc
from posenc.attention import MultiHeadAttention
from tests.reference.pope_loop import pope_score


def _random_phase(encoding):
    with torch.no_grad():
        encoding.phase_bias.uniform_(-7.0, 1.0)  # beyond [−2π, 0] too: the clamp is part of the formula
    return encoding


def test_scores_are_the_float64_loop_reference():
    encoding = _random_phase(posenc.build("pope", d_head=6, n_heads=2))
    q, k = torch.randn(1, 2, 4, 6, dtype=torch.float64), torch.randn(1, 2, 5, 6, dtype=torch.float64)
    qp, kp = torch.tensor([3, 7, 100, 2**20]), torch.tensor([0, 1, 5, 99, 2**20 - 3])
    rq, rk = encoding.rotate(q, k, qp, kp)
    assert rq.shape == (1, 2, 4, 12) and rq.dtype == torch.float64
    scores = rq @ rk.mT
    phase = encoding.phase_bias.tolist()
    for h in range(2):
        for a in range(4):
            for b in range(5):
                expected = pope_score(
                    q[0, h, a].tolist(), k[0, h, b].tolist(), qp[a].item(), kp[b].item(), phase[h]
                )
                assert math.isclose(scores[0, h, a, b].item(), expected, rel_tol=0, abs_tol=1e-12)


def test_scores_match_x_transformers_polar_embedding_on_the_same_inputs_and_weights():
    x_transformers = pytest.importorskip(
        "x_transformers.x_transformers", reason="x-transformers is a test oracle (extra)"
    )
    encoding = _random_phase(posenc.build("pope", d_head=16, n_heads=4))
    oracle = x_transformers.PolarEmbedding(16, 4)
    with torch.no_grad():
        oracle.learned_bias.copy_(encoding.phase_bias[:, None, :])  # [h, 1, d]
    q, k = torch.randn(2, 4, 10, 16), torch.randn(2, 4, 10, 16)
    positions = torch.arange(10)
    freqs, bias = oracle(positions)
    expected = (
        x_transformers.apply_polar_pos_emb(q, freqs) @ x_transformers.apply_polar_pos_emb(k, freqs + bias).mT
    )
    rq, rk = encoding.rotate(q, k, positions, positions)
    torch.testing.assert_close(rq @ rk.mT, expected, rtol=1e-5, atol=1e-4)


def test_scores_depend_on_the_distance_and_magnitudes_on_the_content_alone():
    encoding = _random_phase(posenc.build("pope", d_head=8, n_heads=2))
    q, k = torch.randn(2, 2, 6, 8, dtype=torch.float64), torch.randn(2, 2, 6, 8, dtype=torch.float64)
    positions = torch.randint(0, 1000, (2, 6))
    rq, rk = encoding.rotate(q, k, positions, positions)
    sq, sk = encoding.rotate(q, k, positions + 12345, positions + 12345)
    torch.testing.assert_close(rq @ rk.mT, sq @ sk.mT, rtol=0, atol=1e-11)
    magnitude = rk[..., :8].hypot(rk[..., 8:])  # |μ·e^{iφ}| = softplus(k): no position in it
    torch.testing.assert_close(magnitude, torch.nn.functional.softplus(k), rtol=0, atol=1e-12)
    moved, _ = encoding.rotate(q, k, positions + 1, positions)
    assert (moved @ rk.mT - rq @ rk.mT).abs().max() > 1e-3


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_attention_takes_the_doubled_width_on_every_backend_with_grouped_keys(backend):
    torch.manual_seed(0)
    layer = MultiHeadAttention(
        32, 4, n_kv_heads=2, encoding=posenc.build("pope", d_head=8, n_heads=4), backend="eager"
    )
    x = torch.randn(2, 7, 32)
    expected = layer(x)
    layer.backend = backend
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="bias_init"):
        posenc.build("pope", d_head=8, n_heads=2, bias_init="normal")
    with pytest.raises(ValueError, match="n_heads"):
        posenc.build("pope", d_head=8, n_heads=0)
    encoding = posenc.build("pope", d_head=8, n_heads=2)
    q = torch.randn(1, 3, 4, 8)
    with pytest.raises(ValueError, match="q needs 2 heads, got 3"):
        encoding.rotate(q, q)
    with pytest.raises(ValueError, match=r"\|position\| < 2\^27"):
        encoding.rotate(q[:, :2], q[:, :2], torch.tensor([0, 1, 2, 2**27]), torch.arange(4))
    with pytest.raises(ValueError, match="integer"):
        encoding.rotate(q[:, :2], q[:, :2], torch.tensor([0.5, 1, 2, 3]), torch.arange(4))


def test_turning_the_polar_form_again_composes_positions():
    encoding = _random_phase(posenc.build("pope", d_head=8, n_heads=2))
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    m, k = torch.tensor([0, 3, 9, 40, 1000]), torch.tensor([7, 7, 1, 5, 123])
    once, _ = encoding.rotate(q, q, m, m)
    twice, _ = encoding.rotate(once, once, k, k)
    direct, _ = encoding.rotate(q, q, m + k, m + k)
    torch.testing.assert_close(twice, direct, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"d_head=8 or 16\], got \(1, 2, 5, 12\)"):
        encoding.rotate(q[..., :6].repeat(1, 1, 1, 2), q)


def test_decoding_with_a_cache_of_turned_keys_equals_the_full_forward():
    # the cache holds keys as turned (PoPE's twice as wide): each depends on its own position alone
    from posenc.model import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(50, d_model=32, n_layers=2, n_heads=4, encoding="pope", backend="sdpa", max_len=64)
    assert model.encoding.capabilities.rotated_keys_are_cacheable
    x = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        caches = model.new_caches()
        steps = [model(x[:, :4], caches=caches)] + [
            model(x[:, t : t + 1], caches=caches) for t in range(4, 10)
        ]
        torch.testing.assert_close(torch.cat(steps, dim=1), model(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize("documents", [None, torch.tensor([0, 0, 0, 1, 1, 1, 1])], ids=["causal", "packed"])
def test_sdpa_gets_one_head_width_with_the_eager_outputs_and_gradients(documents, monkeypatch):
    # q and k of 2d against v of d sent SDPA's CPU kernel to its math backend, which holds [b, h, i, j]
    # (PoPE stopped at s = 8192 in 16 GiB); v padded with zeros to q's width gives the same attention
    import posenc.attention as attention

    widths = []
    sdpa = attention.F.scaled_dot_product_attention

    def recorded(q, k, v, **kwargs):
        widths.append((q.shape[-1], k.shape[-1], v.shape[-1]))
        return sdpa(q, k, v, **kwargs)

    torch.manual_seed(0)
    layer = MultiHeadAttention(
        32, 4, n_kv_heads=2, encoding=posenc.build("pope", d_head=8, n_heads=4), backend="eager"
    ).double()
    x = torch.randn(2, 7, 32, dtype=torch.float64, requires_grad=True)
    results = []
    for backend in ("eager", "sdpa"):
        layer.backend = backend
        layer.zero_grad()
        x.grad = None
        out = layer(x, documents=documents)
        out.backward(torch.ones_like(out))
        results.append((out, x.grad, layer.q_proj.weight.grad, layer.v_proj.weight.grad))
        monkeypatch.setattr(attention.F, "scaled_dot_product_attention", recorded)
    assert widths and all(len(set(call)) == 1 for call in widths), widths
    for eager, sdpa_form in zip(*results, strict=True):
        torch.testing.assert_close(sdpa_form, eager, rtol=0, atol=1e-12)
