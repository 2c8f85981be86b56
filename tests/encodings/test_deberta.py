"""DeBERTa's disentangled attention against a float64 loop written from the paper, everywhere posenc runs it,
and what it refuses."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import posenc
from posenc.analysis import properties
from posenc.analysis.specimens import specimen
from posenc.attention import KVCache, MultiHeadAttention
from posenc.backends import ATTENTION
from posenc.encodings import deberta
from posenc.encodings.deberta import DisentangledAttention, deberta_log_bucket
from posenc.model import TransformerEncoder, TransformerLM
from tests.encodings.test_shaw import misfit_message, misfit_positions
from tests.reference.deberta_loop import delta, disentangled_attention, log_bucket

D_MODEL, HEADS = 16, 2
#: Positions spaced by 3 from 5: distances up to 33, past the exact buckets and the table's clamp.
SPREAD = torch.arange(12) * 3 + 5


def _attention(*, causal=False, n_kv_heads=None, backend="sdpa", seed=0, **kwargs) -> MultiHeadAttention:
    """Biased attention (as DeBERTa's) with a DeBERTa encoding of 8 buckets reaching distance 15, in float64,
    every parameter drawn N(0, 0.5) so that each term moves the output (sdpa: eager computes in float32)."""
    arguments = {"position_buckets": 8, "max_relative_positions": 16} | kwargs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        encoding = posenc.build("deberta", d_model=D_MODEL, n_heads=HEADS, **arguments)
        attention = MultiHeadAttention(
            D_MODEL,
            HEADS,
            n_kv_heads=n_kv_heads,
            encoding=encoding,
            causal=causal,
            bias=True,
            backend=backend,
        )
        with torch.no_grad():
            for parameter in attention.parameters():
                parameter.normal_(0, 0.5)
    return attention.double()


def _heads(attention: MultiHeadAttention, x: torch.Tensor):
    """q ``[b, h, s, d]``, k and v ``[b, h_kv, s, d]`` from the layer's projections."""
    b, s, _ = x.shape
    shape = {"q": attention.n_heads, "k": attention.n_kv_heads, "v": attention.n_kv_heads}
    return [
        getattr(attention, f"{name}_proj")(x).view(b, s, heads, attention.d_head).transpose(1, 2)
        for name, heads in shape.items()
    ]


def _attended(attention: MultiHeadAttention, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The attention output before the output projection, ``[b, h, s, d]``."""
    q, k, v = _heads(attention, x)
    with torch.no_grad():
        return attention.attend(q, k, v, positions, positions)


def _reference_weights(attention: MultiHeadAttention) -> dict:
    """The layer's and its encoding's weights as the loop reference takes them (Python lists)."""
    encoding = attention.encoding

    def linear(module):
        return module.weight.tolist(), module.bias.tolist()

    content = {name: linear(getattr(attention, f"{name}_proj")) for name in ("q", "k", "v")}
    shared = encoding.share_att_key
    return {
        **content,
        "rel": encoding.relative_embeddings.tolist(),
        "norm": None
        if encoding.norm is None
        else (encoding.norm.weight.tolist(), encoding.norm.bias.tolist(), encoding.norm.eps),
        "pos_key": content["k"] if shared else linear(getattr(encoding, "pos_key_proj", attention.k_proj)),
        "pos_query": content["q"]
        if shared
        else linear(getattr(encoding, "pos_query_proj", attention.q_proj)),
    }


def _reference(
    attention: MultiHeadAttention, x: torch.Tensor, positions: torch.Tensor, **kwargs
) -> torch.Tensor:
    encoding = attention.encoding
    weights = _reference_weights(attention)
    return torch.tensor(
        [
            disentangled_attention(
                row.tolist(),
                positions.tolist(),
                weights,
                n_heads=attention.n_heads,
                position_buckets=encoding.position_buckets,
                max_relative_positions=encoding.max_relative_positions,
                terms=encoding.terms,
                causal=attention.causal,
                **kwargs,
            )
            for row in x
        ],
        dtype=torch.float64,
    )  # [b, h, s, d]


def _reference_error(attention: MultiHeadAttention, positions: torch.Tensor = SPREAD) -> float:
    """max |posenc − reference| / max |reference| on a fixed batch of two sequences."""
    x = torch.randn(
        2, positions.shape[0], D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    expected = _reference(attention, x, positions)
    return float((_attended(attention, x, positions) - expected).abs().max() / expected.abs().max())


# --- the formulas against the float64 loop ------------------------------------------------------------


@pytest.mark.parametrize(
    ("position_buckets", "max_relative_positions"),
    [(256, 512), (8, 16), (4, 13), (32, 128), (128, 513), (2, 3), (5, 100), (256, 256)],
)
def test_the_row_read_for_each_distance_is_deberta_v2s_log_bucket(position_buckets, max_relative_positions):
    encoding = posenc.build(
        "deberta",
        d_model=8,
        n_heads=2,
        position_buckets=position_buckets,
        max_relative_positions=max_relative_positions,
    )
    positions = torch.arange(-3000, 3001)
    rows = encoding.relative_index(torch.tensor([0]), positions)[0]  # [n]: query at 0
    expected = [
        delta(0, p, position_buckets, position_buckets, max_relative_positions) for p in positions.tolist()
    ]
    assert rows.tolist() == expected


def test_without_buckets_the_row_is_the_papers_clipped_delta():
    encoding = posenc.build("deberta", d_model=8, n_heads=2, position_buckets=None, max_relative_positions=5)
    rows = encoding.relative_index(torch.arange(12), torch.arange(12))  # [i, j]
    for i in range(12):
        for j in range(12):
            paper = 0 if i - j <= -5 else 9 if i - j >= 5 else i - j + 5  # §3.1: δ(i, j) with k = 5
            assert rows[i, j] == paper


def test_the_log_is_taken_in_float32_as_deberta_does():
    # ln(432/2) / ln(12/2) is exactly 3: float32 gets 3 (bucket 5), a plain float64 ceil one more
    assert deberta_log_bucket(torch.tensor([432]), position_buckets=4, max_relative_positions=13).item() == 5
    assert log_bucket(432, 4, 13) == 5
    # where float32 rounds below a non-integer ratio, posenc keeps DeBERTa's bucket (its checkpoints')
    float32 = deberta_log_bucket(
        torch.tensor([1643]), position_buckets=512, max_relative_positions=4096
    ).item()
    assert (float32, log_bucket(1643, 512, 4096)) == (427, 428)


@pytest.mark.parametrize("share_att_key", [True, False])
@pytest.mark.parametrize("terms", [("c2p", "p2c"), ("c2p",), ("p2c",)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_output_is_the_papers_disentangled_attention(share_att_key, terms, causal):
    attention = _attention(share_att_key=share_att_key, terms=terms, causal=causal)
    assert _reference_error(attention) < 1e-12


@pytest.mark.parametrize(
    "arguments",
    [{"layer_norm": False}, {"position_buckets": None, "max_relative_positions": 6}, {"position_buckets": 4}],
)
def test_the_output_is_the_papers_without_layer_norm_or_buckets(arguments):
    assert _reference_error(_attention(**arguments)) < 1e-12


def test_positions_per_batch_row_read_their_own_rows():
    attention = _attention()
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    positions = torch.stack((SPREAD, torch.arange(12) * 7))  # [b, s]
    expected = torch.cat([_reference(attention, x[r : r + 1], positions[r]) for r in range(2)])
    torch.testing.assert_close(_attended(attention, x, positions), expected, rtol=0, atol=1e-12)


def _mirrored(function):
    """``function`` reading row clamp(2S − δ, 0, 2S − 1): the relative position's sign flipped."""

    def planted(*args):
        *head, index = args[:3]
        span = args[1].shape[1] // 2
        return function(*head, (2 * span - index).clamp(0, 2 * span - 1), *args[3:])

    return planted


PLANTED = {
    "p2c at Algorithm 1's literal δ(j, i)": lambda patch: patch.setattr(
        deberta, "position_to_content", _mirrored(deberta.position_to_content)
    ),
    "c2p at δ(j, i)": lambda patch: patch.setattr(
        deberta, "content_to_position", _mirrored(deberta.content_to_position)
    ),
    "√(2d) with three terms": lambda patch: patch.setattr(
        DisentangledAttention, "scale_factor", property(lambda self: len(self.terms))
    ),
    "no LayerNorm on the table": lambda patch: patch.setattr(
        DisentangledAttention, "normed_embeddings", lambda self: self.relative_embeddings
    ),
    "content term left at 1/√d": lambda patch: patch.setattr(
        deberta, "_grouped_scores", lambda q, k: torch.zeros(*q.shape[:3], k.shape[2], dtype=q.dtype)
    ),
}


@pytest.mark.parametrize("plant", sorted(PLANTED))
def test_a_planted_wrong_formula_is_caught_by_the_reference(plant, monkeypatch):
    attention = _attention()
    assert _reference_error(attention) < 1e-12
    PLANTED[plant](monkeypatch)
    assert _reference_error(attention) > 1e-3, plant


def test_the_reference_tells_the_papers_p2c_row_from_the_codes():
    attention = _attention()
    x = torch.randn(1, 12, D_MODEL, dtype=torch.float64)
    code, paper = _reference(attention, x, SPREAD), _reference(attention, x, SPREAD, p2c_row="paper")
    assert (code - paper).abs().max() > 1e-3


# --- everywhere posenc runs it --------------------------------------------------------------------


@pytest.mark.parametrize("share_att_key", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_agrees_on_every_backend_and_decodes_from_a_cache(share_att_key, causal):
    attention = _attention(share_att_key=share_att_key, causal=causal, n_kv_heads=1).float()
    x = torch.randn(2, 11, D_MODEL)
    positions = torch.arange(11) + 5
    outputs = {}
    for backend in ATTENTION:
        attention.backend = backend
        with torch.no_grad():
            outputs[backend] = attention(x, positions)
        torch.testing.assert_close(outputs[backend], outputs[ATTENTION[0]], rtol=0, atol=1e-5)
        if causal:
            cache = KVCache()
            with torch.no_grad():
                steps = [attention(x[:, :4], positions[:4], cache)]
                steps += [attention(x[:, i : i + 1], positions[i : i + 1], cache) for i in range(4, 11)]
            torch.testing.assert_close(torch.cat(steps, dim=1), outputs[backend], rtol=0, atol=1e-5)


def test_grouped_query_heads_equal_full_heads_with_shared_keys_repeated():
    grouped = _attention(n_kv_heads=1)
    full = _attention(n_kv_heads=HEADS)
    with torch.no_grad():
        full.q_proj.load_state_dict(grouped.q_proj.state_dict())
        full.out_proj.load_state_dict(grouped.out_proj.state_dict())
        full.encoding.load_state_dict(grouped.encoding.state_dict())
        for name in ("k_proj", "v_proj"):
            source, target = getattr(grouped, name), getattr(full, name)
            target.weight.copy_(source.weight.repeat(HEADS, 1))
            target.bias.copy_(source.bias.repeat(HEADS))
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    torch.testing.assert_close(full(x, SPREAD), grouped(x, SPREAD), rtol=0, atol=1e-12)


def test_shifting_every_position_leaves_the_output_unchanged():
    attention = _attention()
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    torch.testing.assert_close(attention(x, SPREAD + 1000), attention(x, SPREAD), rtol=0, atol=1e-12)
    assert not torch.allclose(attention(x, SPREAD * 2), attention(x, SPREAD))


def test_a_language_model_decodes_from_its_caches_as_the_full_forward():
    torch.manual_seed(0)
    model = TransformerLM(
        50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, encoding="deberta", max_len=64
    ).eval()
    tokens = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        steps = [model(tokens[:, :7], caches=caches)]
        steps += [model(tokens[:, i : i + 1], caches=caches) for i in range(7, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("share_att_key", [True, False])
def test_gradients_reach_every_parameter_of_the_encoding(share_att_key):
    attention = _attention(share_att_key=share_att_key)
    attention(torch.randn(2, 12, D_MODEL, dtype=torch.float64), SPREAD).square().sum().backward()
    names = {name for name, _ in attention.encoding.named_parameters()}
    assert names >= {"relative_embeddings", "norm.weight", "norm.bias"}
    assert share_att_key or {"pos_key_proj.weight", "pos_query_proj.bias"} <= names
    for name, parameter in attention.encoding.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("model_class", [TransformerLM, TransformerEncoder])
def test_the_model_builds_it_by_name_and_trains_the_relative_embeddings(model_class):
    model = model_class(50, d_model=32, n_layers=2, n_heads=4, encoding="deberta", max_len=64)
    assert model.encoding.share_att_key and model.encoding.position_buckets == 32
    model(torch.randint(0, 50, (2, 10))).square().mean().backward()
    assert model.encoding.relative_embeddings.grad.abs().sum() > 0


class _Allocations(TorchDispatchMode):
    """The largest number of elements of any tensor an operation returns while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("share_att_key", [True, False])
def test_the_terms_never_hold_a_tensor_of_pairs_by_width(share_att_key):
    b, h, s, d = 2, 4, 96, 32
    encoding = posenc.build(
        "deberta",
        d_model=h * d,
        n_heads=h,
        position_buckets=16,
        max_relative_positions=64,
        share_att_key=share_att_key,
    )
    layer = MultiHeadAttention(h * d, h, n_kv_heads=2, encoding=encoding, bias=True)
    q, k = torch.randn(b, h, s, d), torch.randn(b, 2, s, d)
    with torch.no_grad(), _Allocations() as seen:
        terms = encoding.score_terms(q, k, torch.arange(s), torch.arange(s), project=layer.project_heads)
    assert terms.shape == (b, h, s, s)
    assert seen.largest == b * h * s * s  # the terms themselves; [b, h, i, j, d] would be d times more


def test_a_shared_key_without_a_layer_reads_the_table_split_into_heads():
    encoding = posenc.build("deberta", d_model=8, n_heads=2, position_buckets=4, max_relative_positions=8)
    queries, keys = encoding.position_heads()
    table = encoding.normed_embeddings()  # [8, 8]
    assert torch.equal(queries, keys) and torch.equal(queries[1], table[:, 4:])


def test_properties_are_measured_with_sensible_verdicts():
    result = properties(specimen("deberta"))
    assert all(prop.verdict != "error" for prop in result.values()), result
    assert result["relative"].category == "explicit"
    parameters = result["parameters"]
    assert parameters.holds and parameters.value == 2 * 32 * 64 + 2 * (64 * 64 + 64)  # no LayerNorm
    assert "grows with d" in result["parameters"].reason  # not with L: a table of buckets
    for claim in ("bounded", "unique", "decay", "precision"):
        assert result[claim].holds is None, claim  # no bias of positions alone to measure


def test_parameters_follow_the_formula():
    shared = posenc.build("deberta", d_model=32, n_heads=4, position_buckets=8, max_relative_positions=16)
    own = posenc.build(
        "deberta",
        d_model=32,
        n_heads=4,
        position_buckets=8,
        max_relative_positions=16,
        share_att_key=False,
        terms=["p2c"],
    )
    for encoding, expected in ((shared, 16 * 32 + 64), (own, 16 * 32 + 64 + 32 * 32 + 32)):
        assert encoding.count_parameters(0, 0, 0) == expected == sum(p.numel() for p in encoding.parameters())
    assert shared.count_parameters(0, 64, 0) == 16 * 64 + 128


@pytest.mark.parametrize("max_len", [1, 2, 16, 64, 4096])
def test_model_arguments_build_for_any_length(max_len):
    arguments = DisentangledAttention.model_arguments(d_model=32, n_heads=4, max_len=max_len, causal=True)
    encoding = posenc.build("deberta", **arguments)
    assert 4 <= encoding.position_buckets <= 256 and encoding.max_relative_positions >= max_len


def test_extra_repr_names_the_settings():
    text = repr(posenc.build("deberta", d_model=8, n_heads=2, position_buckets=4, max_relative_positions=8))
    assert "position_buckets=4, max_relative_positions=8, share_att_key=True, terms=('c2p', 'p2c')" in text


# --- what it refuses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"position_buckets": 256, "max_relative_positions": 64},
            ValueError,
            "max_relative_positions=64 cannot hold the log buckets of position_buckets=256: "
            "distances up to 128 are exact",
        ),
        ({"position_buckets": 8, "max_relative_positions": 5}, ValueError, "must be at least 6"),
        ({"position_buckets": 1}, ValueError, "position_buckets must be at least 2 .*got 1"),
        ({"position_buckets": 0}, ValueError, "position_buckets must be positive, got 0"),
        ({"position_buckets": -1}, ValueError, "position_buckets must be positive, got -1"),
        ({"max_relative_positions": 0}, ValueError, "max_relative_positions must be positive, got 0"),
        ({"position_buckets": 8.0}, TypeError, "position_buckets must be an integer, got 8.0"),
        ({"d_model": 0}, ValueError, "d_model must be positive, got 0"),
        ({"n_heads": 3}, ValueError, "d_model=16 must be divisible by n_heads=3"),
        (
            {"terms": ("c2p", "p2p")},
            ValueError,
            "terms must be one or both of 'c2p', 'p2c', each once; got ('c2p', 'p2p')",
        ),
        ({"terms": ()}, ValueError, "terms must be one or both"),
        ({"terms": ("c2p", "c2p")}, ValueError, "each once"),
        ({"terms": "c2p"}, TypeError, "terms must be a sequence of 'c2p' and 'p2c', got 'c2p'"),
        ({"share_att_key": 1}, TypeError, "share_att_key must be True or False, got 1"),
        ({"layer_norm_eps": 0.0}, ValueError, "layer_norm_eps must be positive and finite, got 0.0"),
        ({"init_std": -1.0}, ValueError, "init_std must be positive and finite, got -1.0"),
    ],
)
def test_bad_sizes_are_refused_naming_the_value(arguments, error, message):
    with pytest.raises(error, match=message if "(" not in message else re.escape(message)):
        posenc.build("deberta", **({"d_model": 16, "n_heads": 2} | arguments))


def test_the_log_bucket_function_checks_its_sizes_too():
    with pytest.raises(ValueError, match="max_relative_positions=3 cannot hold"):
        deberta_log_bucket(torch.arange(5), position_buckets=8, max_relative_positions=3)


def test_bad_positions_and_heads_are_refused():
    encoding = posenc.build("deberta", d_model=16, n_heads=2, position_buckets=4, max_relative_positions=8)
    q = k = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="q_positions must be integers, got dtype torch.float32"):
        encoding.score_terms(q, k, torch.arange(5.0), torch.arange(5))
    with pytest.raises(ValueError, match=re.escape("got q (1, 3, 5, 8)")):
        encoding.score_terms(torch.randn(1, 3, 5, 8), k, torch.arange(5), torch.arange(5))
    with pytest.raises(ValueError, match="must lie within ±2\\^62"):
        encoding.score_terms(q, k, torch.arange(5) + 2**62, torch.arange(5))
    with torch.no_grad():  # distances of 4·10^9 fall in the last bucket
        far = encoding.score_terms(q, k, torch.arange(5) * 10**9, torch.arange(5))
    assert math.isfinite(float(far.abs().max()))


@misfit_positions
@pytest.mark.parametrize("share_att_key", [True, False])
def test_positions_that_do_not_fit_q_and_k_are_refused(share_att_key, q_positions, k_positions, name, shape):
    # they crashed inside torch's expand or broadcast, naming no position
    encoding = posenc.build(
        "deberta", d_model=D_MODEL, n_heads=HEADS, position_buckets=4, max_relative_positions=8,
        share_att_key=share_att_key,
    )  # fmt: skip
    q = k = torch.randn(2, HEADS, 5, D_MODEL // HEADS)
    with pytest.raises(ValueError, match=misfit_message(name, shape)):
        encoding.score_terms(q, k, q_positions, k_positions)
