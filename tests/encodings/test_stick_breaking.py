"""Stick-breaking attention (Tan et al., 2025, https://arxiv.org/abs/2410.17980): the weights against a
float64 loop of the paper's products on every backend, stability where products underflow, decoding with
a KV cache, gradients, and the refusals (bidirectional models, packed documents)."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.analysis import logit_shift_change
from posenc.analysis.verification import relative as relative_claim
from posenc.attention import MultiHeadAttention
from posenc.functional.stick_breaking import stick_breaking_log_weights
from posenc.model import TransformerLM
from tests.reference.stick_breaking_loop import stick_breaking_loop, stick_weights

D_MODEL, HEADS = 16, 2


def _layer(backend: str = "eager", remainder: str = "drop") -> MultiHeadAttention:
    encoding = posenc.build("stick_breaking", remainder=remainder)
    return MultiHeadAttention(D_MODEL, HEADS, encoding=encoding, backend=backend).double()


def test_log_weights_are_the_papers_products_and_each_row_with_its_leftover_sums_to_one():
    q, k = torch.randn(2, 5, 4, dtype=torch.float64), torch.randn(2, 8, 4, dtype=torch.float64)
    log_weights, log_rest = stick_breaking_log_weights(q @ k.transpose(-1, -2) / 2)  # [2, 5, 8], [2, 5]
    for b in range(2):
        for r in range(5):
            i = 3 + r
            weights, left = stick_weights(q[b, r].tolist(), k[b].tolist(), i)
            torch.testing.assert_close(
                log_weights[b, r, :i].exp(), torch.tensor(weights, dtype=torch.float64)
            )
            assert (log_weights[b, r, i:] == float("-inf")).all()
            assert abs(float(log_rest[b, r].exp()) - left) < 1e-14
    torch.testing.assert_close(
        log_weights.exp().sum(-1) + log_rest.exp(), torch.ones(2, 5, dtype=torch.float64)
    )


def test_log_weights_stay_finite_where_the_products_underflow():
    # 400 keys each breaking off nearly all: Π(1 − β) is below float32's smallest number long before
    logits = torch.full((1, 400), 30.0).expand(400, 400).clone()  # [i, j], float32
    log_weights, log_rest = stick_breaking_log_weights(logits)
    assert torch.isfinite(log_rest).all() and float(log_rest[-1]) < -10_000
    assert torch.isfinite(log_weights.tril(-1)[torch.ones(400, 400, dtype=torch.bool).tril(-1)]).all()


@pytest.mark.parametrize("remainder", ["drop", "self"])
def test_the_layer_equals_a_float64_loop_of_the_paper_on_every_backend(remainder):
    layer = _layer(remainder=remainder)
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    b, s = 2, 6
    with torch.no_grad():
        q, k, v = (
            proj(x).view(b, s, HEADS, -1).transpose(1, 2)
            for proj in (layer.q_proj, layer.k_proj, layer.v_proj)
        )
        heads = torch.tensor(
            stick_breaking_loop(q.tolist(), k.tolist(), v.tolist(), remainder=remainder), dtype=torch.float64
        )
        expected = layer.out_proj(heads.transpose(1, 2).reshape(b, s, D_MODEL))
        for backend in ("eager", "sdpa", "flex"):
            layer.backend = backend
            torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


def test_the_first_token_has_no_earlier_key_and_gets_nothing_the_paper_way():
    layer = _layer()
    x = torch.randn(1, 4, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        first = layer(x)[0, 0]
    torch.testing.assert_close(
        first, layer.out_proj(torch.zeros(D_MODEL, dtype=torch.float64)), rtol=0, atol=1e-12
    )


def test_decoding_with_a_kv_cache_equals_the_full_forward():
    torch.manual_seed(0)
    model = TransformerLM(40, d_model=D_MODEL, n_layers=2, n_heads=HEADS, encoding="stick_breaking").double()
    tokens = torch.randint(0, 40, (2, 8))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        steps = [model(tokens[:, :4], caches=caches)] + [
            model(tokens[:, t : t + 1], caches=caches) for t in range(4, 8)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)


def test_gradcheck_of_the_layer_in_float64():
    layer = _layer()
    x = torch.randn(1, 4, D_MODEL, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x), (x,), fast_mode=True)


def test_shifting_every_position_changes_nothing_and_the_verdict_says_contextual():
    encoding = posenc.build("stick_breaking")
    assert set(logit_shift_change(encoding).values()) == {0.0}
    relative = relative_claim(encoding, 16)
    assert relative.category == "contextual" and relative.holds


def test_a_bidirectional_model_is_refused():
    with pytest.raises(ValueError, match="causal=False is refused"):
        TransformerLM(16, d_model=D_MODEL, n_heads=HEADS, encoding="stick_breaking", causal=False)


def test_packed_documents_are_refused():
    # the leftover stick of a document's first token would run over the previous document's keys
    model = TransformerLM(16, d_model=D_MODEL, n_heads=HEADS, encoding="stick_breaking")
    with pytest.raises(ValueError, match="give each document a call of its own"):
        model(
            torch.zeros(1, 4, dtype=torch.long),
            torch.tensor([0, 1, 0, 1]),
            documents=torch.tensor([0, 0, 1, 1]),
        )


def test_an_unknown_remainder_is_named():
    with pytest.raises(ValueError, match="remainder"):
        posenc.build("stick_breaking", remainder="keep")


@pytest.mark.parametrize("remainder", ["drop", "self"])
def test_cpu_sdpa_runs_the_weights_a_block_of_queries_at_a_time_with_the_eager_gradients(
    remainder, monkeypatch
):
    # each row's weights read only its own logits: blocks of 3 queries against the keys up to their last
    import posenc.attention as attention
    import posenc.kernels.query_blocked as query_blocked

    monkeypatch.setattr(query_blocked, "DEFAULT_BLOCK", 3)
    calls = []
    blocked = attention.query_blocked_attention
    monkeypatch.setattr(
        attention, "query_blocked_attention", lambda *a, **k: calls.append(1) or blocked(*a, **k)
    )
    encoding = posenc.build("stick_breaking", remainder=remainder)
    layer = MultiHeadAttention(D_MODEL, 4, n_kv_heads=2, encoding=encoding, backend="eager").double()
    x = torch.randn(2, 8, D_MODEL, dtype=torch.float64, requires_grad=True)
    results = []
    for backend in ("eager", "sdpa"):
        layer.backend = backend
        layer.zero_grad()
        x.grad = None
        out = layer(x)
        out.backward(torch.ones_like(out))
        results.append((out, x.grad, layer.q_proj.weight.grad, layer.k_proj.weight.grad))
    assert calls == [1]
    for eager, sdpa in zip(*results, strict=True):
        torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-12)


def test_the_dropped_leftover_is_summed_a_block_of_queries_at_a_time_with_the_whole_forms_values(monkeypatch):
    # the leftover stick of every (query, key) pair at once held [b, h, i, j] (2 GiB at s = 2048, h = 8,
    # b = 4); in blocks of 3 queries, recomputed in the backward, it is the same output and gradients
    import posenc.kernels.query_blocked as query_blocked

    x = torch.randn(2, 10, D_MODEL, dtype=torch.float64, requires_grad=True)
    results, rows = [], []
    for block in (256, 3):
        monkeypatch.setattr(query_blocked, "DEFAULT_BLOCK", block)
        torch.manual_seed(0)
        layer = _layer("sdpa")
        encoding = layer.encoding
        whole = encoding._log_rest
        monkeypatch.setattr(
            encoding,
            "_log_rest",
            lambda q, k, first, whole=whole: rows.append(q.shape[2]) or whole(q, k, first),
        )
        x.grad = None
        out = layer(x)
        out.backward(torch.ones_like(out))
        results.append((out, x.grad, layer.q_proj.weight.grad, layer.k_proj.weight.grad))
    assert rows[0] == 10 and max(rows[1:]) == 3 and len(rows) > 5  # the blocks, and their recomputation
    for whole_form, blocked in zip(*results, strict=True):
        torch.testing.assert_close(blocked, whole_form, rtol=0, atol=1e-12)
