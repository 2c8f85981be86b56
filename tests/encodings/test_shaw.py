"""Shaw et al.'s relative position representations and BERT's relative_key variants (``shaw``)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import posenc
from posenc.analysis import properties, specimen
from posenc.attention import MultiHeadAttention
from posenc.backends import ATTENTION
from posenc.encodings.shaw import ShawRelativePosition, sum_by_row
from posenc.model import TransformerEncoder, TransformerLM
from tests.reference.shaw_loop import bert_relative_attention_loop, shaw_attention_loop

B, H, D = 2, 4, 8
#: Largest |hooks in float64 − loop in float64| accepted.
FLOAT64 = 1e-12

CONFIGS = [
    pytest.param({"max_distance": 3}, id="shaw"),
    pytest.param({"max_distance": 2, "values": True}, id="shaw-values"),
    pytest.param({"variant": "relative_key", "max_len": 12}, id="relative_key"),
    pytest.param({"variant": "relative_key_query", "max_len": 12}, id="relative_key_query"),
]

#: Positions that do not fit queries and keys ``[2, h, 5, d]``: (q_positions, k_positions, the ones named
#: in the error, their shape).
MISFIT_POSITIONS = {
    "one position for 5 queries": (torch.tensor([4]), torch.arange(5), "q_positions", (1,)),
    "4 positions for 5 queries": (torch.arange(4), torch.arange(5), "q_positions", (4,)),
    "6 positions for 5 keys": (torch.arange(5), torch.arange(6), "k_positions", (6,)),
    "3 rows for a batch of 2": (
        torch.arange(5).repeat(3, 1),
        torch.arange(5).repeat(3, 1),
        "q_positions",
        (3, 5),
    ),
}
misfit_positions = pytest.mark.parametrize(
    ("q_positions", "k_positions", "name", "shape"), MISFIT_POSITIONS.values(), ids=MISFIT_POSITIONS
)


def misfit_message(name: str, shape: tuple[int, ...]) -> str:
    """The error naming positions ``name`` of ``shape`` that do not fit 5 queries or keys in a batch of 2."""
    expected = (
        rf"{name} must have shape \[5\], \[1, 5\] or \[2, 5\] to match an input of shape \(2, \d+, 5, \d+\)"
    )
    return rf"{expected}, got {re.escape(str(shape))}"


def hooks_attention(encoding, q, k, v, q_positions, k_positions, *, causal):
    """softmax(q·kᵀ/√d + score_terms + mask)·v + value_terms, in the inputs' dtype (float64 here):
    attention exactly as the hooks define it, with no float32 step."""
    groups = q.shape[1] // k.shape[1]
    scores = q @ k.repeat_interleave(groups, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores + encoding.score_terms(q, k, q_positions, k_positions)
    if causal:
        i, j = q.shape[2], k.shape[2]
        scores = scores.masked_fill(~torch.ones(i, j, dtype=torch.bool).tril(j - i), float("-inf"))
    weights = scores.softmax(-1)
    out = weights @ v.repeat_interleave(groups, 1)
    extra = encoding.value_terms(weights, q_positions, k_positions)
    return out if extra is None else out + extra


def loop_reference(encoding, q, k, v, q_positions, k_positions, *, causal):
    """The float64 loop of the encoding's paper formula, with its tables."""
    tables = {"key_table": encoding.key_table.detach().double()}
    if encoding.variant == "shaw":
        values = None if encoding.value_table is None else encoding.value_table.detach().double()
        return shaw_attention_loop(
            q, k, v, q_positions, k_positions, tables["key_table"], values,
            max_distance=encoding.max_distance, causal=causal,
        )  # fmt: skip
    return bert_relative_attention_loop(
        q, k, v, q_positions, k_positions, tables["key_table"], max_len=encoding.max_len,
        key_query=encoding.variant == "relative_key_query", causal=causal,
    )  # fmt: skip


def random_inputs(q_len=7, k_len=7, kv_heads=H, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, q_len, D, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(B, kv_heads, k_len, D, generator=generator, dtype=torch.float64) for _ in range(2))
    return q, k, v


POSITIONS = {
    "consecutive": (torch.arange(7), torch.arange(7)),
    "decoding": (torch.arange(4, 7), torch.arange(7)),
    "shuffled, per row": (
        torch.stack([torch.randperm(7), torch.arange(3, 10)]),
        torch.arange(7).repeat(2, 1),
    ),
}


def max_error(encoding, positions, *, causal, kv_heads=H):
    q_positions, k_positions = positions
    q, k, v = random_inputs(q_positions.shape[-1], k_positions.shape[-1], kv_heads)
    encoding = encoding.double()
    got = hooks_attention(encoding, q, k, v, q_positions, k_positions, causal=causal)
    expected = loop_reference(encoding, q, k, v, q_positions, k_positions, causal=causal)
    return float((got - expected).abs().max().detach())


def randomised(encoding: ShawRelativePosition) -> ShawRelativePosition:
    """Tables drawn N(0, 1), so a wrong term moves the output far beyond rounding."""
    torch.manual_seed(1)
    with torch.no_grad():
        for table in encoding.parameters():
            table.normal_()
    return encoding


# --- the formula, in float64 ----------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", CONFIGS)
@pytest.mark.parametrize("where", list(POSITIONS))
@pytest.mark.parametrize("causal", [True, False])
def test_the_hooks_give_the_papers_attention_in_float64(kwargs, where, causal):
    encoding = randomised(ShawRelativePosition(D, **kwargs))
    assert max_error(encoding, POSITIONS[where], causal=causal) < FLOAT64


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_grouped_query_heads_read_their_key_head(kwargs):
    encoding = randomised(ShawRelativePosition(D, **kwargs))
    assert max_error(encoding, POSITIONS["consecutive"], causal=True, kv_heads=2) < FLOAT64


class MirroredShaw(ShawRelativePosition):
    """Planted error: clip(i − j) instead of clip(j − i)."""

    def rows(self, q_positions, k_positions):
        return 2 * self.max_distance - super().rows(q_positions, k_positions)


class ValuesFromKeyTable(ShawRelativePosition):
    """Planted error: the relative values read the key table."""

    def value_terms(self, weights, q_positions, k_positions):
        rows = self.rows(q_positions, k_positions)
        return sum_by_row(weights, rows, self.n_rows) @ self.key_table


class QueryOnlyKeyQuery(ShawRelativePosition):
    """Planted error: relative_key_query without its k·e term."""

    def score_terms(self, q, k, q_positions, k_positions, *, project=None):
        self.variant = "relative_key"
        try:
            return super().score_terms(q, k, q_positions, k_positions)
        finally:
            self.variant = "relative_key_query"


class UnscaledShaw(ShawRelativePosition):
    """Planted error: the term not divided by √d."""

    def score_terms(self, q, k, q_positions, k_positions, *, project=None):
        return super().score_terms(q, k, q_positions, k_positions) * math.sqrt(self.d_head)


@pytest.mark.parametrize(
    ("wrong", "kwargs"),
    [
        (MirroredShaw, {"max_distance": 3}),
        (ValuesFromKeyTable, {"max_distance": 3, "values": True}),
        (QueryOnlyKeyQuery, {"variant": "relative_key_query", "max_len": 12}),
        (UnscaledShaw, {"max_distance": 3}),
    ],
)
def test_the_reference_comparison_catches_a_planted_wrong_formula(wrong, kwargs):
    encoding = randomised(wrong(D, **kwargs))
    assert max_error(encoding, POSITIONS["consecutive"], causal=False) > 1e-3


def test_far_keys_share_the_clipped_rows_and_bert_indexes_query_minus_key():
    shaw = ShawRelativePosition(D, max_distance=2)
    rows = shaw.rows(torch.tensor([5]), torch.arange(10))  # j − i = −5 … 4
    assert rows.tolist() == [[0, 0, 0, 0, 1, 2, 3, 4, 4, 4]]
    bert = ShawRelativePosition(D, variant="relative_key", max_len=6)
    assert bert.rows(torch.tensor([5]), torch.arange(6)).tolist() == [[10, 9, 8, 7, 6, 5]]  # i − j + 5


# --- attention, the model, gradients ---------------------------------------------------------------


@pytest.mark.parametrize("kwargs", CONFIGS)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_agrees_on_every_backend_with_grouped_heads(kwargs, causal):
    torch.manual_seed(0)
    x = torch.randn(2, 11, 32)
    encoding = randomised(ShawRelativePosition(8, **kwargs))
    attention = MultiHeadAttention(32, 4, n_kv_heads=2, encoding=encoding, causal=causal)
    outputs = {}
    for backend in ATTENTION:
        attention.backend = backend
        outputs[backend] = attention(x)
    for backend, out in outputs.items():
        torch.testing.assert_close(out, outputs["eager"], rtol=0, atol=1e-5, msg=backend)


def test_relative_values_run_the_eager_path_on_every_backend(monkeypatch):
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4, encoding=ShawRelativePosition(8, values=True), backend="sdpa")
    calls = []
    eager = MultiHeadAttention._eager
    monkeypatch.setattr(
        MultiHeadAttention, "_eager", lambda self, *a, **kw: calls.append(1) or eager(self, *a, **kw)
    )
    for backend in ATTENTION:
        attention.backend = backend
        attention(torch.randn(1, 5, 32))
    assert len(calls) == len(ATTENTION)
    assert not MultiHeadAttention(32, 4, encoding=ShawRelativePosition(8)).encoding.capabilities.reads_attention_weights


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_kv_cache_decoding_equals_the_full_forward(kwargs):
    torch.manual_seed(0)
    model = TransformerLM(40, d_model=32, n_layers=2, n_heads=4, encoding="shaw", encoding_kwargs=kwargs)
    randomised(model.encoding)
    tokens = torch.randint(0, 40, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        steps = [model(tokens[:, :5], caches=caches)] + [
            model(tokens[:, t : t + 1], caches=caches) for t in range(5, 12)
        ]
    # logits reach about 40 here: the two summation orders of float32 differ by a few units in the
    # last place of that, so the bound is relative as well (1e-6 of it) as absolute
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("kwargs", CONFIGS)
@pytest.mark.parametrize("model_class", [TransformerLM, TransformerEncoder])
def test_gradients_reach_every_table(kwargs, model_class):
    torch.manual_seed(0)
    model = model_class(40, d_model=32, n_layers=2, n_heads=4, encoding="shaw", encoding_kwargs=kwargs)
    model(torch.randint(0, 40, (2, 9))).square().mean().backward()
    tables = dict(model.encoding.named_parameters())
    assert set(tables) == ({"key_table", "value_table"} if kwargs.get("values") else {"key_table"})
    for name, table in tables.items():
        assert table.grad is not None and table.grad.abs().sum() > 0, name


def test_a_shift_of_every_position_leaves_the_output_unchanged():
    torch.manual_seed(0)
    attention = MultiHeadAttention(
        32, 4, encoding=randomised(ShawRelativePosition(8, values=True)), causal=False
    )
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(attention(x, torch.arange(9) + 1000), attention(x), rtol=0, atol=1e-5)


# --- memory --------------------------------------------------------------------------------------


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an op returns while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_no_tensor_of_pairs_times_channels_is_built(kwargs):
    # [b, h, i, j] per pair is the floor (the terms themselves); [b, h, i, j, d] would be d times that
    s, d = 64, 32
    encoding = ShawRelativePosition(d, **{**kwargs, "max_len": 64} if "max_len" in kwargs else kwargs)
    q = k = torch.randn(1, 2, s, d, requires_grad=True)
    positions = torch.arange(s)
    with LargestTensor() as seen:
        terms = encoding.score_terms(q, k, positions, positions)
        extra = encoding.value_terms(terms.softmax(-1), positions, positions)
        (terms.sum() + (0 if extra is None else extra.sum())).backward()
    assert seen.largest <= 2 * 1 * 2 * s * s  # one [b, h, i, j] (or [b, h, i, 2L − 1]): nothing × d


# --- analysis, errors -----------------------------------------------------------------------------


def test_properties_say_relative_explicit_and_nothing_errors():
    measured = properties(specimen("shaw"))
    assert measured["relative"].category == "explicit" and measured["relative"].value < 1e-12
    assert measured["parameters"].holds
    assert not [p for p in measured.values() if p.error is not None]


def test_parameter_count_follows_the_variant():
    assert posenc.build("shaw", d_head=8, max_distance=4).count_parameters(0, 0, 0) == 9 * 8
    assert posenc.build("shaw", d_head=8, max_distance=4, values=True).count_parameters(0, 0, 0) == 2 * 9 * 8
    bert = posenc.build("shaw", d_head=8, variant="relative_key", max_len=10)
    assert bert.count_parameters(0, 0, 0) == 19 * 8 == sum(p.numel() for p in bert.parameters())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_distance": 0}, ValueError, "max_distance must be positive, got 0"),
        ({"max_distance": 2.0}, TypeError, "max_distance must be an integer"),
        (
            {"variant": "relative"},
            ValueError,
            "variant must be one of 'shaw', 'relative_key', 'relative_key_query'; got 'relative'",
        ),
        ({"values": 1}, TypeError, "values must be True or False, got 1"),
        ({"variant": "relative_key"}, ValueError, "variant 'relative_key' needs max_len"),
        ({"variant": "relative_key", "max_len": 8, "max_distance": 4}, ValueError, "does not clip"),
        ({"variant": "relative_key_query", "max_len": 8, "values": True}, ValueError, "has none"),
        ({"max_len": 0}, ValueError, "max_len must be positive, got 0"),
        ({"init_std": -1.0}, ValueError, "init_std must be positive"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        ShawRelativePosition(8, **kwargs)


def test_distances_beyond_berts_table_and_wrong_head_widths_are_named():
    bert = ShawRelativePosition(8, variant="relative_key", max_len=4)
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match=r"holds query − key distances −3 … 3 \(max_len=4\), got -4"):
        bert.score_terms(q, q, torch.arange(5), torch.arange(5))
    with pytest.raises(ValueError, match=r"q and k must be \[b, h, s, d_head=8\], got \(1, 2, 5, 4\)"):
        ShawRelativePosition(8).score_terms(q[..., :4], q[..., :4], torch.arange(5), torch.arange(5))


@misfit_positions
@pytest.mark.parametrize("kwargs", CONFIGS)
def test_positions_that_do_not_fit_q_and_k_are_refused(kwargs, q_positions, k_positions, name, shape):
    # they crashed inside torch's expand, or (6 keys' positions for 5 keys) gave [b, h, 5, 6] terms
    encoding = ShawRelativePosition(D, **kwargs)
    q = k = torch.randn(B, H, 5, D)
    with pytest.raises(ValueError, match=misfit_message(name, shape)):
        encoding.score_terms(q, k, q_positions, k_positions)
    if encoding.values:
        with pytest.raises(ValueError, match=misfit_message(name, shape)):
            encoding.value_terms(torch.rand(B, H, 5, 5), q_positions, k_positions)


def test_the_clipped_rows_sum_many_weights_without_float32_drift():
    # a clipped end row collects nearly every key: added one by one in float32 it drifted by 2.6e-6 here
    torch.manual_seed(0)
    weights = torch.rand(1, 2, 3, 16384, dtype=torch.float64).softmax(-1)  # [b, h, i, j]
    rows = ShawRelativePosition(8, max_distance=4).rows(torch.arange(3), torch.arange(16384))
    exact = sum_by_row(weights, rows, 9)
    summed = sum_by_row(weights.float(), rows, 9)
    assert summed.dtype == torch.float32
    assert float((summed.double() - exact).abs().max()) < 2e-7
