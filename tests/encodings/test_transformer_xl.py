"""Transformer-XL's relative encoding (``transformer_xl``): the four terms of §3.3, per distance."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.analysis import properties, specimen
from posenc.attention import MultiHeadAttention
from posenc.backends import ATTENTION
from posenc.encodings.transformer_xl import TransformerXLRelative, skew
from posenc.functional.sinusoidal import sinusoidal_table
from posenc.model import TransformerEncoder, TransformerLM
from tests.encodings.test_shaw import LargestTensor, hooks_attention, misfit_message, misfit_positions
from tests.reference.transformer_xl_loop import sinusoid, transformer_xl_attention_loop

B, H, D = 2, 4, 8
D_MODEL = H * D
FLOAT64 = 1e-12

POSITIONS = {
    "consecutive": (torch.arange(7), torch.arange(7)),
    "decoding": (torch.arange(4, 7), torch.arange(7)),
    "far": (torch.arange(7) + 10**6, torch.arange(7) + 10**6),
    "shuffled, per row": (
        torch.stack([torch.randperm(7), torch.arange(3, 10)]),
        torch.arange(7).repeat(2, 1),
    ),
}


def randomised(encoding: TransformerXLRelative) -> TransformerXLRelative:
    """W_{k,R}, u and v drawn N(0, 1/d_model), N(0, 1): terms of the size of q·k."""
    torch.manual_seed(1)
    with torch.no_grad():
        encoding.r_proj.normal_(0, encoding.d_model**-0.5)
        encoding.u.normal_()
        encoding.v.normal_()
    return encoding


def max_error(encoding, positions, *, causal, kv_heads=H):
    q_positions, k_positions = positions
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, q_positions.shape[-1], D, generator=generator, dtype=torch.float64)
    k, v = (
        torch.randn(B, kv_heads, k_positions.shape[-1], D, generator=generator, dtype=torch.float64)
        for _ in range(2)
    )
    encoding = encoding.double()
    with torch.no_grad():
        got = hooks_attention(encoding, q, k, v, q_positions, k_positions, causal=causal)
    expected = transformer_xl_attention_loop(
        q, k, v, q_positions, k_positions, encoding.r_proj.detach(), encoding.u.detach(), encoding.v.detach(),
        base=encoding.base, causal=causal,
    )  # fmt: skip
    return float((got - expected).abs().max())


@pytest.mark.parametrize("where", list(POSITIONS))
@pytest.mark.parametrize("causal", [True, False])
def test_the_hooks_give_the_papers_attention_in_float64(where, causal):
    encoding = randomised(TransformerXLRelative(D_MODEL, H))
    assert max_error(encoding, POSITIONS[where], causal=causal) < FLOAT64


def test_grouped_query_heads_read_their_key_head():
    encoding = randomised(TransformerXLRelative(D_MODEL, H))
    assert max_error(encoding, POSITIONS["decoding"], causal=True, kv_heads=2) < FLOAT64


def test_r_is_posencs_exact_sinusoid_at_negative_distances_too():
    encoding = TransformerXLRelative(D_MODEL, H)
    distances = torch.arange(-9, 10)
    expected = torch.tensor([sinusoid(t, D_MODEL) for t in distances.tolist()], dtype=torch.float64)
    torch.testing.assert_close(encoding.relative_codes(distances), expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(
        encoding.relative_codes(distances), sinusoidal_table(distances, D_MODEL, dtype=torch.float64)
    )


class MirroredDistance(TransformerXLRelative):
    """Planted error: R_{j−i} in place of R_{i−j}."""

    def relative_codes(self, distances):
        return super().relative_codes(-distances)


class NoKeyBias(TransformerXLRelative):
    """Planted error: the global content bias u·k_j left out."""

    def key_bias_term(self, k, n_heads):
        return torch.zeros_like(super().key_bias_term(k, n_heads))


class SwappedBiases(TransformerXLRelative):
    """Planted error: u added to the query for the position term (v for the content term)."""

    def score_terms(self, q, k, q_positions, k_positions, *, project=None):
        with torch.no_grad():
            self.u, self.v = self.v, self.u
        try:
            return super().score_terms(q, k, q_positions, k_positions)
        finally:
            self.u, self.v = self.v, self.u


class UnscaledTerms(TransformerXLRelative):
    """Planted error: (b) + (c) + (d) not scaled by 1/√d_head."""

    def score_terms(self, q, k, q_positions, k_positions, *, project=None):
        return super().score_terms(q, k, q_positions, k_positions) * math.sqrt(self.d_head)


@pytest.mark.parametrize("wrong", [MirroredDistance, NoKeyBias, SwappedBiases, UnscaledTerms])
def test_the_reference_comparison_catches_a_planted_wrong_formula(wrong):
    encoding = randomised(wrong(D_MODEL, H))
    assert max_error(encoding, POSITIONS["consecutive"], causal=False) > 1e-3


def test_the_rel_shift_view_equals_the_gather_by_distance():
    torch.manual_seed(0)
    encoding = randomised(TransformerXLRelative(D_MODEL, H))
    q, k = torch.randn(2, H, 5, D), torch.randn(2, H, 9, D)
    q_positions, k_positions = torch.arange(4, 9), torch.arange(9)
    assert encoding.distance_columns(q_positions, k_positions)[2] is None  # consecutive: the view
    viewed = encoding.score_terms(q, k, q_positions, k_positions)
    gathered = encoding.score_terms(
        q, k, q_positions.repeat(2, 1), k_positions.repeat(2, 1)
    )  # [b, s]: gather
    torch.testing.assert_close(viewed, gathered, rtol=0, atol=1e-6)
    per_distance = torch.arange(3 * 5).view(1, 1, 3, 5)  # 3 queries, 3 keys: columns hold 2 … −2
    assert skew(per_distance, 3)[0, 0].tolist() == [[2, 3, 4], [6, 7, 8], [10, 11, 12]]


def test_compiled_terms_equal_eager_ones_and_stop_on_positions_they_cannot_take():
    torch._dynamo.reset()
    torch.manual_seed(0)
    encoding = randomised(TransformerXLRelative(D_MODEL, H))
    q, k = torch.randn(1, H, 3, D), torch.randn(1, H, 7, D)
    compiled = torch.compile(encoding.score_terms, fullgraph=True)
    torch.testing.assert_close(
        compiled(q, k, torch.arange(4, 7), torch.arange(7)),
        encoding.score_terms(q, k, torch.arange(4, 7), torch.arange(7)),
        rtol=0,
        atol=1e-5,
    )
    with pytest.raises(RuntimeError, match="compiled, Transformer-XL's term takes consecutive positions"):
        compiled(q, k, torch.tensor([0, 5, 6]), torch.arange(7))


# --- attention, the model, gradients ---------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
def test_attention_agrees_on_every_backend_with_grouped_heads(causal):
    torch.manual_seed(0)
    x = torch.randn(2, 11, D_MODEL)
    attention = MultiHeadAttention(
        D_MODEL, H, n_kv_heads=2, encoding=randomised(TransformerXLRelative(D_MODEL, H)), causal=causal
    )
    outputs = {}
    for backend in ATTENTION:
        attention.backend = backend
        outputs[backend] = attention(x)
    for backend, out in outputs.items():
        torch.testing.assert_close(out, outputs["eager"], rtol=0, atol=1e-5, msg=backend)


def test_kv_cache_decoding_equals_the_full_forward():
    torch.manual_seed(0)
    model = TransformerLM(40, d_model=D_MODEL, n_layers=2, n_heads=H, encoding="transformer_xl")
    randomised(model.encoding)
    tokens = torch.randint(0, 40, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        steps = [model(tokens[:, :5], caches=caches)] + [
            model(tokens[:, t : t + 1], caches=caches) for t in range(5, 12)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)  # logits near 40


@pytest.mark.parametrize("model_class", [TransformerLM, TransformerEncoder])
def test_gradients_reach_w_kr_u_and_v_of_every_layer(model_class):
    torch.manual_seed(0)
    model = model_class(
        40, d_model=D_MODEL, n_layers=2, n_heads=H, encoding="transformer_xl", share_encoding=False
    )
    model(torch.randint(0, 40, (2, 9))).square().mean().backward()
    encodings = [block.attention.encoding for block in model.blocks]
    assert len({id(e) for e in encodings}) == 2  # W_{k,R}, u, v per layer
    for encoding in encodings:
        for name, parameter in encoding.named_parameters():
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_no_tensor_of_pairs_times_channels_is_built():
    s = 64
    encoding = TransformerXLRelative(64, 2)
    q = k = torch.randn(1, 2, s, 32, requires_grad=True)
    for positions in (torch.arange(s), torch.randperm(s)):
        with LargestTensor() as seen:
            encoding.score_terms(q, k, positions, positions).sum().backward()
        assert seen.largest <= 2 * 2 * s * s  # [b, h, i, D ≤ 2s]: per distance, nothing × d


# --- analysis, errors -----------------------------------------------------------------------------


def test_properties_say_relative_explicit_and_nothing_errors():
    measured = properties(specimen("transformer_xl"))
    assert measured["relative"].category == "explicit" and measured["relative"].value < 1e-12
    assert measured["parameters"].holds and measured["parameters"].value == 64 * 64 + 2 * 64
    assert not [p for p in measured.values() if p.error is not None]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((30, 4), {}, ValueError, "d_model=30 must be divisible by n_heads=4"),
        ((31, 1), {}, ValueError, "d_model must be even, got 31"),
        ((32, 0), {}, ValueError, "n_heads must be positive, got 0"),
        ((32, 4.0), {}, TypeError, "n_heads must be an integer"),
        ((32, 4), {"base": 0.0}, ValueError, "base must be positive"),
        ((32, 4), {"init_std": 0.0}, ValueError, "init_std must be positive"),
    ],
)
def test_bad_arguments_are_named(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        TransformerXLRelative(*args, **kwargs)


def test_heads_and_widths_that_do_not_match_are_named():
    encoding = TransformerXLRelative(D_MODEL, H)
    q = torch.randn(1, H, 5, D)
    with pytest.raises(ValueError, match=r"q must have n_heads=4 heads and k a divisor of them, got 2 and 2"):
        encoding.score_terms(q[:, :2], q[:, :2], torch.arange(5), torch.arange(5))
    with pytest.raises(ValueError, match=r"d_head=8"):
        encoding.score_terms(q[..., :4], q[..., :4], torch.arange(5), torch.arange(5))


@misfit_positions
def test_positions_that_do_not_fit_q_and_k_are_refused(q_positions, k_positions, name, shape):
    # 4 query positions for 5 queries gave [b, h, 5, 5] terms read off another row of the rel-shift
    encoding = TransformerXLRelative(D_MODEL, H)
    q = k = torch.randn(B, H, 5, D)
    with pytest.raises(ValueError, match=misfit_message(name, shape)):
        encoding.score_terms(q, k, q_positions, k_positions)


def test_the_rel_shift_refuses_a_table_of_another_width():
    per_distance = torch.zeros(1, 1, 3, 6)  # 3 queries, 3 keys need 5 columns
    with pytest.raises(
        ValueError, match=r"\[b, h, 3, 5\] for 3 queries and k_len=3 keys, got \(1, 1, 3, 6\)"
    ):
        skew(per_distance, 3)
