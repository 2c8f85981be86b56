"""Sliding-window and chunked attention as masks of the layer: every backend against a float64 loop written
from the definitions, the blocked SDPA paths against the masked softmax (values and gradients), packed
documents, and KV-cache decoding equal to the full forward."""

from __future__ import annotations

import pytest
import torch

from posenc.attention import BACKENDS, KVCache, MultiHeadAttention
from posenc.masks import attention_mask, chunked_sdpa, visible, windowed_sdpa
from posenc.model import TransformerLM
from posenc.stacks import layer, pattern
from tests.reference.layer_loop import attend as loop_attend
from tests.reference.layer_loop import sees

MASKS = [dict(window=3), dict(chunk=4), dict(window=5, chunk=4), dict(window=1)]


def _qkv(b=2, h=4, h_kv=2, i=11, j=11, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, i, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h_kv, j, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h_kv, j, d, generator=g, dtype=torch.float64)
    return q, k, v


def _loop(q, k, v, scale, **kwargs):
    """[b, h, i, d] from the loop reference, head by head (grouped keys shared as attention shares them)."""
    b, h, _, _ = q.shape
    groups = h // k.shape[1]
    return torch.tensor(
        [
            [
                loop_attend(
                    q[n, m].tolist(),
                    k[n, m // groups].tolist(),
                    v[n, m // groups].tolist(),
                    scale=scale,
                    **kwargs,
                )
                for m in range(h)
            ]
            for n in range(b)
        ],
        dtype=torch.float64,
    )


def test_visible_is_the_window_and_chunk_definition():
    t, u = torch.arange(12)[:, None], torch.arange(12)[None, :]
    for causal in (True, False):
        for spans in MASKS:
            grid = visible(t, u, causal=causal, **spans)
            expected = [
                [sees(a, c, causal=causal, **{"window": None, "chunk": None} | spans) for c in range(12)]
                for a in range(12)
            ]
            assert grid.tolist() == expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spans", MASKS, ids=str)
def test_window_and_chunk_match_the_loop_on_every_backend(backend, spans):
    layer_ = MultiHeadAttention(32, 4, n_kv_heads=2, backend=backend, **spans).double()
    q, k, v = _qkv()
    expected = _loop(q, k, v, 8**-0.5, window=spans.get("window"), chunk=spans.get("chunk"))
    torch.testing.assert_close(layer_.attend(q, k, v, None, None), expected, atol=1e-12, rtol=1e-12)
    q_last = q[:, :, -3:]  # three queries after eight cached keys: the queries are the last of the keys
    expected = _loop(q_last, k, v, 8**-0.5, window=spans.get("window"), chunk=spans.get("chunk"))
    torch.testing.assert_close(layer_.attend(q_last, k, v, None, None), expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_and_chunk_combine_with_packed_documents(backend):
    layer_ = MultiHeadAttention(32, 4, backend=backend, window=3, chunk=4).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    documents = torch.tensor([0] * 6 + [1] * 5)
    packed = layer_(x, positions=torch.cat([torch.arange(6), torch.arange(5)]), documents=documents)
    torch.testing.assert_close(packed[:, :6], layer_(x[:, :6]))
    torch.testing.assert_close(packed[:, 6:], layer_(x[:, 6:]))


@pytest.mark.parametrize("seq_len", [5, 12, 13])
@pytest.mark.parametrize("kind", ["window", "chunk"])
def test_blocked_sdpa_paths_give_the_masked_softmax_and_its_gradients(kind, seq_len):
    q, k, v = (t.requires_grad_() for t in _qkv(i=seq_len, j=seq_len))
    fast = (windowed_sdpa if kind == "window" else chunked_sdpa)(q, k, v, 4, scale=0.3)
    mask = attention_mask(seq_len, seq_len, "cpu", causal=True, **{kind: 4})
    keys, values = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    slow = ((q @ keys.transpose(-1, -2)) * 0.3).masked_fill(~mask, float("-inf")).softmax(-1) @ values
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=1e-12)
    grad = torch.randn_like(fast)
    for a, b in zip(
        torch.autograd.grad(fast, (q, k, v), grad), torch.autograd.grad(slow, (q, k, v), grad), strict=True
    ):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


STACK = pattern("SG", S=layer("rope", window=4), G=layer("rope", chunk=5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_model_trained_with_a_window_decodes_with_a_windowed_cache_to_its_full_forward(backend):
    torch.manual_seed(0)
    model = TransformerLM(40, d_model=32, n_heads=4, n_layers=2, layers=STACK, backend=backend).double()
    tokens = torch.randint(0, 40, (1, 9))
    full = model(tokens)
    caches = model.new_caches(window="layers")  # the window layer keeps 4 keys, the chunk layer every key
    assert caches[0].window == 4 and caches[1].window is None
    steps = torch.cat(
        [model(tokens[:, :3], caches=caches)]
        + [model(tokens[:, t : t + 1], caches=caches) for t in range(3, 9)],
        1,
    )
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=1e-12)
    assert caches[0].length == 4  # constant memory in the window layer


def test_mask_errors_name_the_value():
    with pytest.raises(ValueError, match="window must be a positive number of tokens, got 0"):
        MultiHeadAttention(16, 2, window=0)
    with pytest.raises(ValueError, match="chunk must be a positive number of tokens, got -4"):
        MultiHeadAttention(16, 2, chunk=-4)
    with pytest.raises(TypeError, match="window must be a positive int"):
        MultiHeadAttention(16, 2, window=2.5)
    attention = MultiHeadAttention(16, 2, window=8)
    with pytest.raises(ValueError, match="window of 4 tokens drops keys this layer's window=8"):
        attention(torch.randn(1, 2, 16), cache=KVCache(window=4))
    chunked = MultiHeadAttention(16, 2, chunk=8)
    with pytest.raises(ValueError, match="chunk=8 reads each token's place in the text"):
        chunked(torch.randn(1, 2, 16), cache=KVCache(window=8))


def test_an_encoding_whose_weights_read_hidden_keys_refuses_a_window_chunks_and_sinks():
    from posenc.encodings import PositionalEncoding
    from posenc.encodings.capabilities import declare

    class Leftover(PositionalEncoding):
        kind = "bias"
        capabilities = declare(follows_documents=False)  # as stick-breaking: a query's weights read keys it does not see

    for spans in ({"window": 4}, {"chunk": 4}, {"sinks": True}):
        with pytest.raises(
            ValueError, match=f"{next(iter(spans))}=.*Leftover's weights read keys a query does not see"
        ):
            MultiHeadAttention(16, 2, encoding=Leftover(), **spans)
