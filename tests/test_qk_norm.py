"""QK-norm: the RMSNorm of a head against a float64 loop of its formula for each gain, the layer's queries and
keys normalised where declared (before the rotation: Gemma 3, Qwen 3; after it: Llama 4) against a loop of
the whole layer on every backend, KV-cache decoding, the gains' names, and the refusals."""

from __future__ import annotations

import pytest
import torch

from posenc import build
from posenc.attention import BACKENDS, MultiHeadAttention
from posenc.model import TransformerLM
from posenc.qk_norm import WEIGHTS, HeadRMSNorm, QKNorm
from posenc.stacks import layer
from tests.reference.layer_loop import attend as loop_attend
from tests.reference.layer_loop import rms_norm
from tests.reference.rope_loop import rope_vector

GEMMA3 = QKNorm(weight="unit_offset")
LLAMA4 = QKNorm(weight=None, eps=1e-5, after_rotation=True)
QWEN3 = QKNorm()


def _gain(norm: HeadRMSNorm) -> list[float] | None:
    if norm.mode is None:
        return None
    w = norm.weight.detach().tolist()
    return w if norm.mode == "gain" else [1.0 + a for a in w]


@pytest.mark.parametrize("weight", WEIGHTS)
def test_head_norm_is_its_formula_for_each_gain(weight):
    norm = QKNorm(weight=weight, eps=1e-3).build(8).double()
    if weight is not None:
        with torch.no_grad():
            norm.weight.normal_()
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64) * 0.1  # small, so eps weighs
    expected = torch.tensor(
        [rms_norm(row, _gain(norm), 1e-3) for row in x.reshape(-1, 8).tolist()], dtype=torch.float64
    ).view_as(x)
    torch.testing.assert_close(norm(x), expected, atol=1e-15, rtol=1e-14)


def test_half_inputs_are_normalised_in_float32_and_rounded_once():
    norm = QKNorm(weight="unit_offset").build(64)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    out = norm(x)
    assert out.dtype == torch.bfloat16
    expected = torch.tensor(
        [rms_norm(row, _gain(norm), 1e-6) for row in x.double().tolist()], dtype=torch.float64
    )
    assert torch.equal(out, expected.to(torch.bfloat16))  # one rounding of the exact value


def _loop_layer(attention: MultiHeadAttention, x: torch.Tensor, positions: list[int], base: float):
    """The layer from its definition: projections, QK-norm before or after RoPE (loops), attention (loop)."""
    b, s, _ = x.shape
    h, h_kv, d = attention.n_heads, attention.n_kv_heads, attention.d_head
    q = attention.q_proj(x).view(b, s, h, d)
    k = attention.k_proj(x).view(b, s, h_kv, d)
    v = attention.v_proj(x).view(b, s, h_kv, d)
    spec = attention.qk_norm
    q_gain, k_gain = _gain(attention.q_norm), _gain(attention.k_norm)

    def prepared(rows, gain):
        out = []
        for p, row in zip(positions, rows.tolist(), strict=True):
            if not spec.after_rotation:
                row = rms_norm(row, gain, spec.eps)
            row = rope_vector(row, p, base, layout="half")
            out.append(rms_norm(row, gain, spec.eps) if spec.after_rotation else row)
        return out

    heads = torch.tensor(
        [
            [
                loop_attend(
                    prepared(q[n, :, m], q_gain),
                    prepared(k[n, :, m // (h // h_kv)], k_gain),
                    v[n, :, m // (h // h_kv)].tolist(),
                    scale=d**-0.5,
                    window=attention.window,
                )
                for m in range(h)
            ]
            for n in range(b)
        ],
        dtype=torch.float64,
    )  # [b, h, s, d]
    return attention.out_proj(heads.transpose(1, 2).reshape(b, s, h * d))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", [GEMMA3, LLAMA4], ids=["before-rotation", "after-rotation"])
def test_the_layer_normalises_queries_and_keys_where_declared_on_every_backend(spec, backend):
    torch.manual_seed(0)
    rope = build("rope", d_head=8, base=100.0, layout="half")
    attention = MultiHeadAttention(
        16, 2, n_kv_heads=1, encoding=rope, backend=backend, qk_norm=spec, window=5
    ).double()
    if spec.weight is not None:
        with torch.no_grad():
            attention.q_norm.weight.normal_()
            attention.k_norm.weight.normal_()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    positions = [3, 4, 5, 6, 7, 8, 9]
    expected = _loop_layer(attention, x, positions, 100.0)
    torch.testing.assert_close(
        attention(x, positions=torch.tensor(positions)), expected, atol=1e-12, rtol=1e-12
    )


def test_a_gain_makes_the_place_matter_and_a_gainless_norm_commutes_with_rope():
    rope = build("rope", d_head=8, base=100.0, layout="half")
    x = torch.randn(1, 6, 16, dtype=torch.float64)

    def output(spec):
        torch.manual_seed(0)
        attention = MultiHeadAttention(16, 2, encoding=rope, qk_norm=spec).double()
        if spec.weight is not None:
            with torch.no_grad():
                attention.q_norm.weight.normal_()
                attention.k_norm.weight.normal_()
        return attention(x)

    gained = [output(QKNorm(weight="unit_offset", after_rotation=place)) for place in (False, True)]
    assert (gained[0] - gained[1]).abs().max() > 1e-3
    gainless = [output(QKNorm(weight=None, after_rotation=place)) for place in (False, True)]
    torch.testing.assert_close(gainless[0], gainless[1], atol=1e-13, rtol=1e-13)


@pytest.mark.parametrize(
    ("spec", "encoding"),
    [(GEMMA3, {}), (LLAMA4, {}), (GEMMA3, {"xpos": True})],  # xPos: keys cached unrotated
    ids=["before-rotation", "after-rotation", "xpos-before-rotation"],
)
def test_a_layer_with_qk_norm_decodes_with_a_kv_cache_to_its_full_forward(spec, encoding):
    torch.manual_seed(0)
    model = TransformerLM(
        40, d_model=16, n_heads=2, n_layers=1, layers=layer("rope", qk_norm=spec, **encoding)
    ).double()
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    caches = model.new_caches()
    steps = torch.cat(
        [model(tokens[:, :4], caches=caches)]
        + [model(tokens[:, t : t + 1], caches=caches) for t in range(4, 9)],
        1,
    )
    torch.testing.assert_close(steps, model(tokens), atol=1e-12, rtol=1e-12)


def test_gains_are_parameters_named_and_shaped_as_transformers():
    attention = MultiHeadAttention(16, 2, qk_norm=GEMMA3)
    names = {n: tuple(p.shape) for n, p in attention.named_parameters() if "norm" in n}
    assert names == {"q_norm.weight": (8,), "k_norm.weight": (8,)}
    assert not attention.q_norm.weight.any()  # 1 + w starts at the identity
    assert torch.equal(MultiHeadAttention(16, 2, qk_norm=QWEN3).k_norm.weight, torch.ones(8))
    assert not any("norm" in n for n, _ in MultiHeadAttention(16, 2, qk_norm=LLAMA4).named_parameters())
    assert not hasattr(MultiHeadAttention(16, 2), "q_norm")


def test_qk_norm_errors_name_the_value():
    with pytest.raises(
        ValueError, match=r"qk_norm weight must be one of \['gain', 'unit_offset', None\], got 'gemma'"
    ):
        QKNorm(weight="gemma")
    with pytest.raises(ValueError, match="qk_norm eps must be positive and finite, got 0.0"):
        QKNorm(eps=0.0)
    with pytest.raises(TypeError, match="qk_norm eps must be a real number, got '1e-6'"):
        QKNorm(eps="1e-6")
    with pytest.raises(TypeError, match="after_rotation must be True or False, got 1"):
        QKNorm(after_rotation=1)
    with pytest.raises(TypeError, match="qk_norm must be a posenc.qk_norm.QKNorm or None, got 'rms'"):
        MultiHeadAttention(16, 2, qk_norm="rms")
    with pytest.raises(TypeError, match="qk_norm must be a posenc.qk_norm.QKNorm or None, got True"):
        layer("rope", qk_norm=True)
    # normalised after xPos's rotation, which scales q and k about each call's centre, decoding gave
    # other logits than the full forward (by 3e-3): such a norm is refused
    with pytest.raises(ValueError, match="RotaryEncoding does not rotate each token on its own"):
        MultiHeadAttention(16, 2, encoding=build("rope", d_head=8, xpos=True), qk_norm=LLAMA4)
