"""PaTH (Yang et al., 2025, https://arxiv.org/abs/2505.16381): the eager and chunked logits against a float64
loop of the paper's products, the chunked form's memory bound measured on the tensors it makes, decoding
with a KV cache that keeps each token's transform, gradients, and what the shift test says."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import posenc
from posenc.analysis import logit_shift_change
from posenc.analysis.verification import relative as relative_claim
from posenc.attention import MultiHeadAttention
from posenc.functional.path import path_scores_chunked, path_scores_eager
from posenc.model import TransformerLM
from tests.reference.path_loop import path_attention_loop, path_logit

D_MODEL, HEADS = 16, 2


def _inputs(b=2, h=2, i=7, j=7, d=4, dtype=torch.float64):
    q, k = torch.randn(b, h, i, d, dtype=dtype), torch.randn(b, h, j, d, dtype=dtype)
    w = torch.nn.functional.normalize(torch.randn(b, h, j, d, dtype=dtype), dim=-1)
    return q, k, w, 2 * torch.rand(b, h, j, dtype=dtype)


@pytest.mark.parametrize(("queries", "chunk"), [(7, None), (7, 1), (7, 3), (7, 7), (7, 16), (2, 3), (1, 4)])
def test_logits_are_the_papers_product_of_householders(queries, chunk):
    q, k, w, beta = _inputs(i=queries)
    got = path_scores_eager(q, k, w, beta) if chunk is None else path_scores_chunked(q, k, w, beta, chunk=chunk)
    assert got.shape == (2, 2, queries, 7) and got.dtype == torch.float64
    for b in range(2):
        for h in range(2):
            for r in range(queries):
                i = 7 - queries + r
                for j in range(i + 1):
                    want = path_logit(q[b, h, r].tolist(), k[b, h, j].tolist(), w[b, h].tolist(), beta[b, h].tolist(), j, i)
                    assert abs(float(got[b, h, r, j]) - want) < 1e-12


def test_where_every_transform_is_the_same_reflection_the_logit_depends_on_the_distance_parity():
    # H² = I for β = 2: q_iᵀ H^(i−j) k_j is q·k at even distances and q·H·k at odd ones
    q, k, w, _ = _inputs(b=1, h=1, i=6, j=6)
    w = w[:, :, :1].expand_as(w)
    beta = torch.full((1, 1, 6), 2.0, dtype=torch.float64)
    scores = path_scores_chunked(q, k, w, beta, chunk=4)[0, 0]
    reflection = torch.eye(4, dtype=torch.float64) - 2 * w[0, 0, 0, :, None] * w[0, 0, 0, None, :]
    for i in range(6):
        for j in range(i + 1):
            carried = k[0, 0, j] if (i - j) % 2 == 0 else reflection @ k[0, 0, j]
            torch.testing.assert_close(scores[i, j], q[0, 0, i] @ carried, rtol=0, atol=1e-12)


class _Largest(TorchDispatchMode):
    """The largest tensor any operation makes, in elements."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple | list) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


def _largest(function, *args, **kwargs) -> int:
    with _Largest() as mode:
        function(*args, **kwargs)
    return mode.largest


def test_the_chunked_form_holds_nothing_beyond_the_logits_and_steps_of_s_times_d_plus_chunk():
    b, h, s, d, chunk = 1, 2, 96, 8, 8
    q, k, w, beta = _inputs(b=b, h=h, i=s, j=s, d=d, dtype=torch.float32)
    logits = b * h * s * s
    chunked = _largest(path_scores_chunked, q, k, w, beta, chunk=chunk)
    assert chunked <= logits  # the logits [b, h, i, j] (and the bands stacked into them) are the largest
    with _Largest() as mode:  # every step of the loop: O(s·(d + C)) per batch row and head
        path_scores_chunked(q[:, :, :chunk], k, w, beta, chunk=chunk)  # one block of queries: no logits of s²
    assert mode.largest <= b * h * s * max(d, chunk)
    eager = _largest(path_scores_eager, q, k, w, beta)
    assert eager >= logits * d  # the eager form holds every key as each query sees it: O(s²·d)


def test_the_layer_equals_a_float64_loop_of_the_paper_on_every_backend():
    encoding = posenc.build("path", d_model=D_MODEL, n_heads=HEADS, chunk=4)
    layer = MultiHeadAttention(D_MODEL, HEADS, encoding=encoding, backend="eager").double()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    b, s, d = 2, 6, D_MODEL // HEADS
    with torch.no_grad():
        q, k, v = (proj(x).view(b, s, HEADS, d).transpose(1, 2) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
        content = encoding.content(x)
        w = content[..., : HEADS * d].view(b, s, HEADS, d).transpose(1, 2)
        beta = content[..., HEADS * d :].transpose(1, 2)
        assert torch.allclose(w.norm(dim=-1), torch.ones((), dtype=torch.float64)) and ((0 < beta) & (beta < 2)).all()
        heads = torch.tensor(
            path_attention_loop(q.tolist(), k.tolist(), v.tolist(), w.tolist(), beta.tolist()), dtype=torch.float64
        )
        expected = layer.out_proj(heads.transpose(1, 2).reshape(b, s, D_MODEL))
        for backend in ("eager", "sdpa", "flex"):
            layer.backend = backend
            torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk", [None, 3])
def test_decoding_with_a_kv_cache_equals_the_full_forward_and_keeps_the_transforms(chunk):
    torch.manual_seed(0)
    model = TransformerLM(
        40, d_model=D_MODEL, n_layers=2, n_heads=HEADS, encoding="path", share_encoding=False,
        encoding_kwargs={"chunk": chunk},
    ).double()
    tokens = torch.randint(0, 40, (2, 8))
    with torch.no_grad():
        full = model(tokens)
        caches = model.new_caches()
        steps = [model(tokens[:, :3], caches=caches)] + [model(tokens[:, t : t + 1], caches=caches) for t in range(3, 8)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
    d = D_MODEL // HEADS
    assert caches[0].keys.shape[-1] == d + HEADS * d + HEADS  # each key with its token's w and β


def test_attend_on_q_k_v_alone_is_refused():
    layer = MultiHeadAttention(D_MODEL, HEADS, encoding=posenc.build("path", d_model=D_MODEL, n_heads=HEADS))
    q = k = v = torch.randn(1, HEADS, 4, D_MODEL // HEADS)
    with pytest.raises(ValueError, match="reads each token's layer input"):
        layer.attend(q, k, v, None, None)


@pytest.mark.parametrize("chunk", [None, 2])
def test_gradcheck_of_the_logits_and_of_the_layer_in_float64(chunk):
    q, k, w, beta = (t.requires_grad_() for t in _inputs(b=1, h=1, i=5, j=5, d=3))
    form = path_scores_eager if chunk is None else lambda *a: path_scores_chunked(*a, chunk=chunk)
    assert torch.autograd.gradcheck(form, (q, k, w, beta), fast_mode=True)
    encoding = posenc.build("path", d_model=8, n_heads=2, chunk=chunk)
    layer = MultiHeadAttention(8, 2, encoding=encoding, backend="eager").double()
    x = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x), (x,), fast_mode=True)


def test_shifting_every_position_changes_nothing_and_the_verdict_says_contextual():
    encoding = posenc.build("path", d_model=32, n_heads=4, chunk=8)
    assert set(logit_shift_change(encoding).values()) == {0.0}
    relative = relative_claim(encoding, 16)
    assert relative.category == "contextual" and relative.holds


def test_a_bidirectional_model_is_refused():
    with pytest.raises(ValueError, match="causal=False is refused"):
        TransformerLM(16, d_model=D_MODEL, n_heads=HEADS, encoding="path", causal=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_model": 15, "n_heads": 2}, ValueError, "d_model=15 must be divisible"),
        ({"d_model": 16, "n_heads": 2, "chunk": 0}, ValueError, "chunk"),
        ({"d_model": 16, "n_heads": 2, "chunk": 2.5}, TypeError, "chunk"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        posenc.build("path", **kwargs)


@pytest.mark.parametrize("chunk", [None, 2])
def test_cpu_sdpa_runs_the_logits_a_block_of_queries_at_a_time_with_the_eager_gradients(chunk, monkeypatch):
    # each block of 3 queries is carried through the transforms of the keys up to its last query
    import posenc.attention as attention
    import posenc.kernels.query_blocked as query_blocked

    monkeypatch.setattr(query_blocked, "DEFAULT_BLOCK", 3)
    calls = []
    blocked = attention.query_blocked_attention
    monkeypatch.setattr(attention, "query_blocked_attention", lambda *a, **k: calls.append(1) or blocked(*a, **k))
    encoding = posenc.build("path", d_model=D_MODEL, n_heads=4, chunk=chunk)
    layer = MultiHeadAttention(D_MODEL, 4, n_kv_heads=2, encoding=encoding, backend="eager").double()
    x = torch.randn(2, 8, D_MODEL, dtype=torch.float64, requires_grad=True)
    results = []
    for backend in ("eager", "sdpa"):
        layer.backend = backend
        layer.zero_grad()
        x.grad = None
        out = layer(x)
        out.backward(torch.ones_like(out))
        results.append((out, x.grad, encoding.direction.weight.grad, encoding.strength.bias.grad))
    assert calls == [1]
    for eager, sdpa in zip(*results, strict=True):
        torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-12)
