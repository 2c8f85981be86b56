"""Which kernel attention hands each case to: SDPA's causal kernel where nothing is added to the scores,
one call per packed document, and learned biases never through SDPA's math backend; same numbers as eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.attention import MultiHeadAttention
from posenc.encodings import encoding_class
from posenc.functional import grid_positions

D_MODEL, HEADS = 32, 4


def _layer(name: str, *, causal: bool = True, backend: str = "sdpa", seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    arguments = encoding_class(name).model_arguments(
        d_model=D_MODEL, n_heads=HEADS, max_len=64, causal=causal
    )
    encoding = posenc.build(name, **arguments)
    return MultiHeadAttention(D_MODEL, HEADS, encoding=encoding, backend=backend, causal=causal, **kwargs)


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Every call of ``F.scaled_dot_product_attention``: (q's length, k's length, attn_mask, is_causal)."""
    calls = []
    original = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        calls.append((q.shape[2], k.shape[2], attn_mask, is_causal))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    return calls


def _outputs_and_grads(layer, x, backend, **kwargs):
    layer.backend = backend
    layer.zero_grad()
    x = x.detach().requires_grad_()
    out = layer(x, **kwargs)
    out.square().mean().backward()
    return (
        out.detach(),
        x.grad,
        {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None},
    )


def _assert_same(got, expected, atol=1e-5):
    for a, b in zip(got[:2], expected[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=atol)
    assert got[2].keys() == expected[2].keys()
    for name, grad in got[2].items():
        torch.testing.assert_close(grad, expected[2][name], rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
@pytest.mark.parametrize("name", ["nope", "rope", "sinusoidal"])
def test_nothing_added_to_the_scores_takes_sdpas_causal_kernel_with_no_mask(name, backend, sdpa_calls):
    layer = _layer(name)
    x = torch.randn(2, 24, D_MODEL)
    got = _outputs_and_grads(layer, x, backend)
    assert [(i, j, mask, causal) for i, j, mask, causal in sdpa_calls] == [(24, 24, None, True)]
    _assert_same(got, _outputs_and_grads(layer, x, "eager"))


def test_bidirectional_attention_with_nothing_added_passes_no_mask(sdpa_calls):
    layer = _layer("rope", causal=False)
    x = torch.randn(2, 9, D_MODEL)
    got = _outputs_and_grads(layer, x, "sdpa")
    assert [(mask, causal) for _, _, mask, causal in sdpa_calls] == [(None, False)]
    _assert_same(got, _outputs_and_grads(layer, x, "eager"))


def test_decoding_after_a_cache_passes_no_mask_for_one_query_and_a_bool_mask_for_several(sdpa_calls):
    from posenc.kv_cache import KVCache

    layer = _layer("rope")
    x = torch.randn(1, 9, D_MODEL)
    with torch.no_grad():
        full = layer(x)
        cache = KVCache()
        steps = [layer(x[:, :4], cache=cache), layer(x[:, 4:5], cache=cache), layer(x[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    prompt, one, several = sdpa_calls[1:]
    assert prompt[2:] == (None, True) and one[2:] == (None, False)
    i, j, mask, causal = several
    assert (i, j, causal) == (4, 9, False) and mask.dtype == torch.bool
    assert torch.equal(mask, torch.ones(4, 9, dtype=torch.bool).tril(5))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shared", [True, False])
def test_packed_documents_run_one_sdpa_call_per_document_with_no_mask(causal, shared, sdpa_calls):
    layer = _layer("rope", causal=causal)
    row = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    documents = row if shared else torch.stack((row, torch.tensor([0] * 7 + [1] * 5)))
    positions = torch.cat([torch.arange(n) for n in (5, 3, 4)])
    if not shared:
        positions = torch.stack((positions, torch.cat((torch.arange(7), torch.arange(5)))))
    x = torch.randn(2, 12, D_MODEL)
    got = _outputs_and_grads(layer, x, "sdpa", positions=positions, documents=documents)
    lengths = [5, 3, 4] if shared else [5, 3, 4, 7, 5]
    assert [(i, j, mask, causal_call) for i, j, mask, causal_call in sdpa_calls] == [
        (n, n, None, causal and n > 1) for n in lengths
    ]
    _assert_same(got, _outputs_and_grads(layer, x, "eager", positions=positions, documents=documents))


def test_many_packed_documents_fall_back_to_one_masked_call(sdpa_calls, monkeypatch):
    import posenc.packing

    monkeypatch.setattr(posenc.packing, "MAX_DOCUMENT_CALLS", 2)
    layer = _layer("nope")
    documents = torch.tensor([0, 0, 1, 1, 1, 2])
    x = torch.randn(1, 6, D_MODEL)
    got = _outputs_and_grads(
        layer, x, "sdpa", positions=torch.tensor([0, 1, 0, 1, 2, 0]), documents=documents
    )
    ((_, _, mask, causal),) = sdpa_calls
    assert mask.dtype == torch.bool and not causal
    _assert_same(got, _outputs_and_grads(layer, x, "eager", documents=documents))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["t5", "kerple", "swin", "swin_v2", "fire", "alibi", "sandwich"])
def test_learned_biases_train_without_sdpas_math_backend(name, causal, sdpa_calls):
    # a mask that requires grad sends SDPA to its math backend (weights and their gradient materialised)
    layer = _layer(name, causal=causal)
    s = 16
    positions = grid_positions((4, 4)) if name == "swin_v2" else None
    x = torch.randn(2, s, D_MODEL)
    got = _outputs_and_grads(layer, x, "sdpa", positions=positions)
    assert not any(mask is not None and mask.requires_grad for _, _, mask, _ in sdpa_calls)
    expected = _outputs_and_grads(layer, x, "eager", positions=positions)
    _assert_same(got, expected)
    if name not in ("alibi", "sandwich"):
        assert any(grad.abs().sum() > 0 for grad in got[2].values())


@pytest.mark.parametrize("name", ["t5", "kerple", "swin", "swin_v2", "nope"])
def test_the_fast_paths_keep_float64_exact(name):
    layer = _layer(name).double()
    positions = grid_positions((3, 4)) if name == "swin_v2" else None
    x = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    _assert_same(
        _outputs_and_grads(layer, x, "sdpa", positions=positions),
        _outputs_and_grads(layer, x, "eager", positions=positions),
        atol=1e-12,
    )
