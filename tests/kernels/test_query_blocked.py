"""Terms that read q, k or positions, a block of queries at a time (posenc.kernels.query_blocked): on the sdpa
backend the same outputs and gradients, in float64, as the eager reference that materialises every pair."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import attention as attention_module
from posenc.attention import MultiHeadAttention
from posenc.encodings import shaw
from posenc.kernels import banded, query_blocked

D_MODEL, HEADS = 16, 2
#: Encodings with a query-blocked form, small (several blocks of 8 queries at s = 37, the last one partial).
BLOCKED = {
    "shaw": lambda: posenc.build("shaw", d_head=8, max_distance=3),
    "shaw relative_key_query": lambda: posenc.build(
        "shaw", d_head=8, variant="relative_key_query", max_len=50
    ),
    "transformer_xl": lambda: posenc.build("transformer_xl", d_model=D_MODEL, n_heads=HEADS),
    "deberta": lambda: posenc.build(
        "deberta", d_model=D_MODEL, n_heads=HEADS, position_buckets=8, max_relative_positions=20
    ),
    "deberta own projections, c2p": lambda: posenc.build(
        "deberta",
        d_model=D_MODEL,
        n_heads=HEADS,
        position_buckets=None,
        max_relative_positions=6,
        share_att_key=False,
        terms=("c2p",),
    ),
    "fire": lambda: posenc.build("fire", n_heads=HEADS, hidden=6, threshold=12.0),
    # every query at or below the threshold: a bias of i − j alone, one table per distance
    "fire below its threshold": lambda: posenc.build("fire", n_heads=HEADS, hidden=6, threshold=60.0),
    "cope": lambda: posenc.build("cope", d_head=8, npos_max=12, init_std=0.5),
}


def _gradients(layer, x, positions, weight):
    layer.zero_grad()
    x = x.detach().clone().requires_grad_()
    out = layer(x, positions)
    out.backward(weight)
    return out.detach(), x.grad, {name: p.grad for name, p in layer.named_parameters()}


def _positions(kind: str) -> torch.Tensor:
    if kind == "consecutive":
        return torch.arange(37) + 5  # [s]
    generator = torch.Generator().manual_seed(3)  # gaps, each batch row its own: [b, s]
    return torch.stack([torch.randperm(49, generator=generator)[:37].sort().values for _ in range(2)])


#: (causal, key/value heads, positions): grouped heads, gaps and batched positions, bidirectional attention.
CASES = [(True, HEADS, "consecutive"), (True, 1, "gapped"), (False, 1, "consecutive")]


@pytest.mark.parametrize(
    ("causal", "kv_heads", "positions"), CASES, ids=["causal", "gqa-gapped", "bidirectional"]
)
@pytest.mark.parametrize("block", [8, 256], ids=["blocks", "one block"])
@pytest.mark.parametrize("name", list(BLOCKED))
def test_blocked_terms_give_the_eager_outputs_and_gradients_in_float64(
    name, kv_heads, causal, positions, block, monkeypatch
):
    # 37 queries: blocks of 8, or one block of 256, where the terms are formed whole (no blocks, no
    # recomputation: at the lab's s = 64 the blocks cost up to 1.3x more)
    monkeypatch.setattr(query_blocked, "DEFAULT_BLOCK", block)
    monkeypatch.setattr(banded, "BAND_BLOCK", 8)
    calls = []
    blocked = attention_module.query_blocked_attention
    monkeypatch.setattr(
        attention_module, "query_blocked_attention", lambda *a, **kw: calls.append(1) or blocked(*a, **kw)
    )
    encoding = BLOCKED[name]().double()
    layers = {}
    for backend in ("eager", "sdpa"):
        torch.manual_seed(1)
        layers[backend] = MultiHeadAttention(
            D_MODEL, HEADS, n_kv_heads=kv_heads, encoding=encoding, backend=backend, causal=causal
        ).double()
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(2, 37, D_MODEL, dtype=torch.float64, generator=generator)
    weight = torch.randn(2, 37, D_MODEL, dtype=torch.float64, generator=generator)
    positions = _positions(positions)
    out, dx, dparams = _gradients(layers["eager"], x, positions, weight)
    calls_before = len(calls)
    got, got_dx, got_dparams = _gradients(layers["sdpa"], x, positions, weight)
    assert (len(calls) > calls_before) == (block < 37), "the sdpa backend took the wrong path"
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, out, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_dx, dx, rtol=0, atol=1e-12)
    for parameter, grad in dparams.items():
        assert got_dparams[parameter] is not None, parameter
        torch.testing.assert_close(got_dparams[parameter], grad, rtol=0, atol=1e-12, msg=parameter)


@pytest.mark.parametrize("clip", [3, 40], ids=["far keys", "every key in the band"])
@pytest.mark.parametrize("kv_heads", [HEADS, 1], ids=["mha", "gqa"])
def test_shaws_causal_terms_run_as_a_band_and_flash_over_the_far_keys(clip, kv_heads, monkeypatch):
    # keys farther than K read row 0: folded into the keys, their part is one is_causal flash call
    monkeypatch.setattr(banded, "BAND_BLOCK", 8)
    monkeypatch.setattr(query_blocked, "DEFAULT_BLOCK", 8)  # 37 queries: more than one block
    calls = []
    band = shaw.clipped_relative_attention
    monkeypatch.setattr(
        shaw, "clipped_relative_attention", lambda *a, **kw: calls.append(1) or band(*a, **kw)
    )
    encoding = posenc.build("shaw", d_head=8, max_distance=clip).double()
    layers = {}
    for backend in ("eager", "sdpa"):
        torch.manual_seed(1)
        layers[backend] = MultiHeadAttention(
            D_MODEL, HEADS, n_kv_heads=kv_heads, encoding=encoding, backend=backend
        ).double()
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(2, 37, D_MODEL, dtype=torch.float64, generator=generator)
    weight = torch.randn(2, 37, D_MODEL, dtype=torch.float64, generator=generator)
    positions = torch.arange(37) + 5
    out, dx, dparams = _gradients(layers["eager"], x, positions, weight)
    got, got_dx, got_dparams = _gradients(layers["sdpa"], x, positions, weight)
    assert calls, "causal Shaw at consecutive positions did not run as a band"
    torch.testing.assert_close(got, out, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_dx, dx, rtol=0, atol=1e-12)
    for parameter, grad in dparams.items():
        torch.testing.assert_close(got_dparams[parameter], grad, rtol=0, atol=1e-12, msg=parameter)
