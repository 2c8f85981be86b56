"""CoPE against float64 loops written from the paper, on every backend and with a KV cache; what it
refuses."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import posenc
import posenc.encodings.cope as cope_module
from posenc.attention import MultiHeadAttention
from posenc.backends import ATTENTION
from posenc.encodings.cope import ContextualPositionEncoding
from posenc.model import TransformerEncoder, TransformerLM
from tests.reference.cope_loop import cope_attention_loop, cope_terms_loop, counted_position

VOCAB = 40


def _qk(b=2, h=4, h_kv=4, i=7, j=9, d=8, seed=0, scale=1.5):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, i, d, generator=generator, dtype=torch.float64) * scale
    k = torch.randn(b, h_kv, j, d, generator=generator, dtype=torch.float64) * scale
    return q, k


def _cope(d_head=8, npos_max=12, seed=0, **kwargs):
    torch.manual_seed(seed)
    return posenc.build("cope", d_head=d_head, npos_max=npos_max, init_std=1.0, **kwargs).double()


def deviation_from_loop(encoding: ContextualPositionEncoding, q, k) -> float:
    """max |score_terms − the paper's loop| over the keys each query sees (the one comparison every
    formula test, and every planted wrong formula, goes through)."""
    with torch.no_grad():
        terms = encoding.score_terms(q, k, None, None)  # [b, h, i, j]
    expected = cope_terms_loop(q.tolist(), k.tolist(), encoding.table.detach().tolist())
    largest = 0.0
    for index, value in _seen(expected):
        largest = max(largest, abs(float(terms[index]) - value))
    return largest


def _seen(nested, index=()):
    """(index, value) of every entry of nested lists that is not None (the keys a query sees)."""
    if isinstance(nested, list):
        for position, item in enumerate(nested):
            yield from _seen(item, (*index, position))
    elif nested is not None:
        yield index, nested


# --- the formula ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "npos_max"),
    [
        ({"i": 7, "j": 7}, 12),  # a forward pass: every count within the table
        ({"i": 3, "j": 9}, 12),  # the last queries of a longer key sequence (a KV cache)
        ({"h": 4, "h_kv": 2, "i": 6, "j": 6}, 12),  # grouped keys
        ({"i": 9, "j": 9, "scale": 3.0}, 3),  # counts beyond the table clamp at npos_max − 1
    ],
)
def test_terms_are_the_papers_formula_for_every_query_and_key(shape, npos_max):
    encoding = _cope(npos_max=npos_max)
    q, k = _qk(**shape)
    assert deviation_from_loop(encoding, q, k) <= 1e-12


def test_counted_positions_are_the_papers_gate_sums_clamped_at_the_last_row():
    encoding = _cope(npos_max=4)
    q, k = _qk(b=1, h=1, h_kv=1, i=10, j=10, scale=2.0)
    positions = encoding.counted_positions(q, k)[0, 0]  # [i, j]
    for i in range(10):
        for j in range(10):
            expected = counted_position(q[0, 0, i].tolist(), k[0, 0].tolist(), j, i, 4) if j <= i else 0.0
            assert abs(float(positions[i, j]) - expected) <= 1e-12
    assert float(positions.max()) == 3.0  # some counts reach past the table and take its last row


def test_every_gate_one_gives_token_count_positions():
    # the paper's remark: with every gate 1, p_ij = i − j + 1, the token-count relative position
    encoding = _cope(npos_max=20)
    q = torch.full((1, 1, 8, 8), 10.0, dtype=torch.float64)  # q·k/√d = 283: σ = 1 in float64
    positions = encoding.counted_positions(q, q)[0, 0]
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    torch.testing.assert_close(positions, torch.where(j <= i, i - j + 1, 0).to(torch.float64), rtol=0, atol=0)


def test_integer_counts_read_one_row_of_the_table():
    encoding = _cope(npos_max=20)
    q = torch.full((1, 1, 5, 8), 10.0, dtype=torch.float64)
    terms = encoding.score_terms(q, q, None, None)[0, 0]
    table = encoding.table.detach()
    for i in range(5):
        for j in range(i + 1):
            torch.testing.assert_close(terms[i, j], q[0, 0, i] @ table[i - j + 1], rtol=0, atol=1e-12)


# --- planted wrong formulas: the loop comparison catches each --------------------------------------


class UnscaledGates(ContextualPositionEncoding):
    """σ(q·k) instead of σ(q·k/√d)."""

    def gates(self, q, k):
        q, k = self._checked(q, k)
        seen = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(diagonal=k.shape[2] - q.shape[2])
        return torch.sigmoid(q @ k.transpose(-1, -2)).masked_fill(~seen, 0.0)


class CountFromTheStart(ContextualPositionEncoding):
    """Σ_{t=0}^{j} g_it (an absolute count of the key) instead of Σ_{t=j}^{i} g_it."""

    def counted_positions(self, q, k):
        return self.gates(q, k).cumsum(dim=-1).clamp(max=self.npos_max - 1)


class CountAfterTheKey(ContextualPositionEncoding):
    """Σ_{t=j+1}^{i} g_it: the key's own gate left out."""

    def counted_positions(self, q, k):
        return (super().counted_positions(q, k) - self.gates(q, k)).clamp(min=0)


def _swapped_weights(position_logits, positions):
    floor = positions.floor()
    weight = positions - floor
    at_floor = position_logits.gather(-1, floor.long())
    at_ceil = position_logits.gather(-1, positions.ceil().long())
    return (1 - weight) * at_ceil + weight * at_floor


@pytest.mark.parametrize("planted", [UnscaledGates, CountFromTheStart, CountAfterTheKey])
def test_the_loop_comparison_catches_a_wrong_count(planted):
    torch.manual_seed(0)
    encoding = planted(d_head=8, npos_max=12, init_std=1.0).double()
    assert deviation_from_loop(encoding, *_qk()) > 1e-3


def test_the_loop_comparison_catches_swapped_interpolation_weights(monkeypatch):
    monkeypatch.setattr(cope_module, "interpolate_position_logits", _swapped_weights)
    assert deviation_from_loop(_cope(), *_qk()) > 1e-3


# --- in attention ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ATTENTION)
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_on_every_backend_is_the_papers_attention(backend, kv_heads):
    # softmax(q·k/√d + q·e(p)) over the keys j ≤ i, with values, against the float64 loop
    encoding = _cope()
    attention = MultiHeadAttention(32, 4, n_kv_heads=kv_heads, encoding=encoding, backend=backend).double()
    q, k = _qk(h_kv=kv_heads, i=5, j=8)
    v = torch.randn(2, kv_heads, 8, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    positions = torch.arange(8)
    with torch.no_grad():
        out = attention.attend(q, k, v, positions[3:], positions)  # [b, h, i, d]
    expected = cope_attention_loop(q.tolist(), k.tolist(), v.tolist(), encoding.table.detach().tolist())
    # eager attention computes its scores in float32 (whatever the inputs): one float32 rounding
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-5)


def _model(backend="eager", **kwargs):
    torch.manual_seed(0)
    return TransformerLM(
        VOCAB,
        d_model=32,
        n_layers=2,
        n_heads=4,
        encoding="cope",
        encoding_kwargs={"init_std": 0.5},
        max_len=32,
        backend=backend,
        **kwargs,
    )


def _tokens(b=2, s=12, seed=1):
    return torch.randint(0, VOCAB, (b, s), generator=torch.Generator().manual_seed(seed))


def _set_backend(model, backend):
    for block in model.blocks:
        block.attention.backend = backend


def test_backends_agree_on_logits_and_gradients():
    model, x = _model(), _tokens()
    results = {}
    for backend in ATTENTION:
        _set_backend(model, backend)
        model.zero_grad()
        logits = model(x)
        logits.square().mean().backward()
        results[backend] = logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    expected, expected_grads = results["eager"]
    for backend, (logits, grads) in results.items():
        torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5, msg=backend)
        for name, grad in grads.items():
            torch.testing.assert_close(
                grad, expected_grads[name], rtol=1e-4, atol=1e-5, msg=f"{backend} {name}"
            )


@pytest.mark.parametrize("backend", ATTENTION)
@pytest.mark.parametrize("kv_heads", [None, 2])
def test_kv_cache_decoding_equals_the_full_forward(backend, kv_heads):
    # the counts of a decoded token run over every cached key, as in the full forward
    model, x = _model(backend, n_kv_heads=kv_heads), _tokens(s=11)
    with torch.no_grad():
        full = model(x)
        caches = model.new_caches()
        steps = [model(x[:, :4], caches=caches)] + [
            model(x[:, t : t + 1], caches=caches) for t in range(4, 11)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-6, atol=1e-5)


def test_future_tokens_never_change_earlier_outputs():
    model, x = _model(), _tokens(b=1)
    changed = x.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % VOCAB
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[:, :8], model(x)[:, :8], rtol=0, atol=1e-6)


def test_the_given_positions_are_not_read():
    model, x = _model(), _tokens()
    with torch.no_grad():
        expected = model(x)
        shifted = model(x, torch.arange(12) + 1000)
        scrambled = model(x, torch.randperm(12, generator=torch.Generator().manual_seed(0)).repeat(2, 1))
    assert torch.equal(shifted, expected) and torch.equal(scrambled, expected)


def test_gradients_reach_the_table_and_the_projections_through_the_gates():
    model, x = _model(), _tokens()
    model(x).square().mean().backward()
    assert model.encoding.table.grad is not None and model.encoding.table.grad.abs().sum() > 0
    # the gates carry gradient too: through p − ⌊p⌋, checked against finite differences
    encoding = _cope(npos_max=12)
    q, k = _qk(b=1, h=2, h_kv=2, i=5, j=5)
    q.requires_grad_(True)
    k.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, table: cope_module.interpolate_position_logits(
            q @ table.T, encoding.counted_positions(q, k)
        ),
        (q, k, encoding.table.detach().clone().requires_grad_(True)),
    )


def test_a_zero_table_starts_as_no_position_encoding_as_in_the_paper():
    cope = posenc.build("cope", d_head=8, npos_max=10)
    assert torch.equal(cope.table, torch.zeros(10, 8))
    q, k = _qk(d=8)
    assert torch.equal(cope.score_terms(q, k, None, None), torch.zeros(2, 4, 7, 9, dtype=torch.float64))


def test_the_term_never_holds_a_tensor_of_every_pair_and_channel():
    # memory: nothing larger than the [b, h, i, j] counts, z [b, h, i, npos_max] or the keys is made
    b, h, s, d, npos = 1, 2, 64, 32, 16
    encoding = posenc.build("cope", d_head=d, npos_max=npos)
    q, k = torch.randn(b, h, s, d), torch.randn(b, h, s, d)

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, tuple | list) else (out,):
                if isinstance(tensor, torch.Tensor):
                    Largest.numel = max(Largest.numel, tensor.numel())
            return out

    with Largest():
        encoding.score_terms(q, k, None, None)
    assert Largest.numel <= max(b * h * s * s, b * h * s * npos, b * h * s * d) < b * h * s * s * d


def test_bf16_models_run_with_float32_terms():
    model = _model().to(torch.bfloat16)
    assert model(_tokens()).dtype == torch.bfloat16
    q = torch.randn(1, 4, 5, 8, dtype=torch.bfloat16)
    assert model.encoding.score_terms(q, q, None, None).dtype == torch.float32


def test_model_arguments_give_a_count_for_every_token_of_the_model():
    arguments = ContextualPositionEncoding.model_arguments(d_model=64, n_heads=8, max_len=256, causal=True)
    assert arguments == {"d_head": 8, "npos_max": 257}
    assert posenc.build("cope", **arguments).count_parameters(0, 0, 0) == 257 * 8


def test_an_explicit_table_is_copied_and_sets_the_sizes():
    table = torch.randn(6, 4)
    cope = posenc.build("cope", table=table)
    assert (cope.npos_max, cope.d_head) == (6, 4)
    assert torch.equal(cope.table, table) and cope.table.data_ptr() != table.data_ptr()
    assert posenc.build("cope", table=table, npos_max=6, d_head=4).npos_max == 6


# --- what it refuses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_head": 8, "npos_max": 0}, ValueError, "npos_max must be positive, got 0"),
        ({"d_head": 8, "npos_max": -3}, ValueError, "npos_max must be positive, got -3"),
        ({"d_head": 8, "npos_max": 2.5}, TypeError, "npos_max must be an integer, got 2.5"),
        ({"d_head": 0, "npos_max": 8}, ValueError, "d_head must be positive, got 0"),
        (
            {"d_head": 8},
            ValueError,
            "CoPE needs d_head and npos_max, or a table [npos_max, d_head]; got d_head=8, npos_max=None",
        ),
        (
            {"d_head": 8, "npos_max": 8, "init_std": -1.0},
            ValueError,
            "init_std must be non-negative and finite, got -1.0",
        ),
        (
            {"table": torch.zeros(5, 8), "npos_max": 9},
            ValueError,
            "npos_max=9 is more positions than the table's 5 rows: counted positions up to 8 would have no embedding",
        ),
        (
            {"table": torch.zeros(12, 8), "npos_max": 9},
            ValueError,
            "the table has 12 rows but npos_max=9: counts clamp at 8, so rows 9 … 11 would never be read",
        ),
        ({"table": torch.zeros(5, 8), "npos_max": 0}, ValueError, "npos_max must be positive, got 0"),
        ({"table": torch.zeros(5, 8), "d_head": 4}, ValueError, "table rows have width 8, but d_head=4"),
        (
            {"table": torch.zeros(5, 8, dtype=torch.long)},
            TypeError,
            "table must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            {"table": torch.zeros(0, 8)},
            ValueError,
            "table must be [npos_max, d_head] with both ≥ 1, got shape (0, 8)",
        ),
        (
            {"table": torch.zeros(8)},
            ValueError,
            "table must be [npos_max, d_head] with both ≥ 1, got shape (8,)",
        ),
        ({"table": torch.full((2, 2), math.nan)}, ValueError, "table must be finite, got non-finite values"),
        (
            {"table": torch.zeros(2, 2), "init_std": 0.1},
            ValueError,
            "init_std draws a table; got both a table and init_std=0.1",
        ),
    ],
)
def test_bad_sizes_and_tables_are_refused_naming_the_value(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        posenc.build("cope", **kwargs)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "message"),
    [
        ((1, 2, 4, 6), (1, 2, 4, 8), "q has heads of width 6, but CoPE's d_head=8"),
        ((1, 2, 4, 8), (1, 2, 4, 6), "k has heads of width 6, but CoPE's d_head=8"),
        ((1, 2, 5, 8), (1, 2, 4, 8), "5 queries need at least as many keys, got 4"),
        ((1, 3, 4, 8), (1, 2, 4, 8), "a number of heads dividing q's"),
        ((4, 8), (4, 8), "q and k must be [b, h, s, d_head], got shapes (4, 8) and (4, 8)"),
    ],
)
def test_queries_and_keys_of_the_wrong_shape_are_refused(q_shape, k_shape, message):
    cope = posenc.build("cope", d_head=8, npos_max=8)
    with pytest.raises(ValueError, match=re.escape(message)):
        cope.score_terms(torch.randn(q_shape), torch.randn(k_shape), None, None)


def test_integer_queries_are_refused_naming_the_dtype():
    cope = posenc.build("cope", d_head=8, npos_max=8)
    with pytest.raises(TypeError, match="q must be a floating-point tensor, got dtype torch.int64"):
        cope.score_terms(torch.ones(1, 1, 2, 8, dtype=torch.long), torch.ones(1, 1, 2, 8), None, None)


def test_a_bidirectional_model_is_refused_saying_what_the_paper_defines():
    with pytest.raises(ValueError, match=r"the paper defines no bidirectional form: causal=False is refused"):
        TransformerEncoder(VOCAB, d_model=32, n_heads=4, encoding="cope")
    with pytest.raises(ValueError, match=r"p_ij = Σ_\{t=j\}\^\{i\} g_it for j ≤ i"):
        ContextualPositionEncoding.model_arguments(d_model=32, n_heads=4, max_len=16, causal=False)
