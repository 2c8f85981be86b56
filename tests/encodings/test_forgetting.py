"""FoX (Lin et al., 2025, https://arxiv.org/abs/2503.02130): the forget bias against a float64 loop of the
paper's formula and against x-transformers' DataDependentAlibi, decoding with a KV cache, gradients, the
refusals, and what the shift test says of a bias read from the content."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.analysis import logit_shift_change
from posenc.analysis.verification import relative as relative_claim
from posenc.attention import KVCache, MultiHeadAttention
from posenc.functional.forgetting import forget_bias
from posenc.model import TransformerLM
from tests.reference.forgetting_loop import forget_bias_loop, fox_attention_loop, log_forget_gates

D_MODEL, HEADS = 16, 2


def _layer(backend: str = "eager", **kwargs) -> MultiHeadAttention:
    encoding = posenc.build("forgetting", d_model=D_MODEL, n_heads=HEADS, **kwargs)
    return MultiHeadAttention(D_MODEL, HEADS, encoding=encoding, backend=backend).double()


def test_forget_bias_is_the_sum_of_log_gates_between_key_and_query():
    log_f = torch.nn.functional.logsigmoid(torch.randn(2, 7, 3, dtype=torch.float64))  # [b, j, h]
    for queries in (7, 3, 1):
        expected = forget_bias_loop(log_f.tolist(), queries)
        got = forget_bias(log_f, queries)  # [b, h, i, j]
        assert got.dtype == torch.float64 and got.shape == (2, 3, queries, 7)
        for index in torch.cartesian_prod(*(torch.arange(n) for n in got.shape)).tolist():
            b, h, i, j = index
            want = expected[b][h][i][j]
            if want is not None:
                assert abs(float(got[b, h, i, j]) - want) < 1e-12


def test_the_layer_equals_a_float64_loop_of_the_paper_on_every_backend():
    layer = _layer()
    x = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    b, s = 2, 6
    with torch.no_grad():
        q, k, v = (
            proj(x).view(b, s, HEADS, -1).transpose(1, 2) for proj in (layer.q_proj, layer.k_proj, layer.v_proj)
        )
        gate = layer.encoding.gate
        log_f = log_forget_gates(x.tolist(), gate.weight.tolist(), gate.bias.tolist())
        heads = torch.tensor(fox_attention_loop(q.tolist(), k.tolist(), v.tolist(), log_f), dtype=torch.float64)
        expected = layer.out_proj(heads.transpose(1, 2).reshape(b, s, D_MODEL))
        for backend in ("eager", "sdpa", "flex"):
            layer.backend = backend
            torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


def test_decoding_with_a_kv_cache_equals_the_full_forward_and_keeps_the_gates():
    torch.manual_seed(0)
    model = TransformerLM(
        40, d_model=D_MODEL, n_layers=2, n_heads=HEADS, encoding="forgetting", share_encoding=False
    ).double()
    tokens = torch.randint(0, 40, (2, 8))
    with torch.no_grad():
        full = model(tokens)
        for backend in ("eager", "flex"):  # sdpa: the registry-wide cache test
            for block in model.blocks:
                block.attention.backend = backend
            caches = model.new_caches()
            steps = [model(tokens[:, :4], caches=caches)] + [
                model(tokens[:, t : t + 1], caches=caches) for t in range(4, 8)
            ]
            torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
            assert caches[0].keys.shape[-1] == D_MODEL // HEADS + HEADS  # each key with its token's log gates


def test_attend_on_q_k_v_alone_is_refused():
    # without the layer input there are no gates: an answer would silently drop the bias
    layer = _layer()
    q = k = v = torch.randn(1, HEADS, 4, D_MODEL // HEADS, dtype=torch.float64)
    with pytest.raises(ValueError, match="reads each token's layer input"):
        layer.attend(q, k, v, None, None)


def test_gradcheck_of_the_layer_in_float64():
    layer = _layer(gate_bias=0.5)
    x = torch.randn(1, 3, D_MODEL, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x), (x,), fast_mode=True)
    weight = layer.encoding.gate.weight
    assert torch.autograd.gradcheck(
        lambda w: torch.func.functional_call(layer, {"encoding.gate.weight": w}, (x.detach(),)),
        (weight.detach().clone().requires_grad_(),),
        fast_mode=True,
    )


def test_shifting_every_position_changes_nothing_and_the_verdict_says_contextual():
    encoding = posenc.build("forgetting", d_model=32, n_heads=4, gate_bias=1.0)
    assert set(logit_shift_change(encoding).values()) == {0.0}
    relative = relative_claim(encoding, 16)
    assert relative.category == "contextual" and relative.holds


def test_a_bidirectional_model_is_refused():
    with pytest.raises(ValueError, match="causal=False is refused"):
        TransformerLM(16, d_model=D_MODEL, n_heads=HEADS, encoding="forgetting", causal=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_model": 0, "n_heads": 2}, ValueError, "d_model"),
        ({"d_model": 16, "n_heads": 2.0}, TypeError, "n_heads"),
        ({"d_model": 16, "n_heads": 2, "gate_bias": "5"}, TypeError, "gate_bias"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        posenc.build("forgetting", **kwargs)


def test_a_layer_input_of_another_width_is_refused():
    with pytest.raises(ValueError, match="d_model=16"):
        posenc.build("forgetting", d_model=16, n_heads=2).content(torch.randn(1, 3, 8))


def _x_transformers():
    return pytest.importorskip("x_transformers.x_transformers", reason="x-transformers is an optional test oracle")


def _peer_pair(dtype):
    xt = _x_transformers()
    torch.manual_seed(0)
    peer = xt.Attention(dim=D_MODEL, heads=HEADS, dim_head=D_MODEL // HEADS, causal=True, data_dependent_alibi=True)
    ours = MultiHeadAttention(
        D_MODEL, HEADS, encoding=posenc.build("forgetting", d_model=D_MODEL, n_heads=HEADS), backend="eager"
    )
    gate = peer.data_dependent_alibi.to_forget_gates[0]
    with torch.no_grad():
        torch.nn.init.normal_(gate.weight)  # gates far from 1, so that the bias matters
        torch.nn.init.normal_(gate.bias)
        for mine, theirs in (
            (ours.q_proj, peer.to_q),
            (ours.k_proj, peer.to_k),
            (ours.v_proj, peer.to_v),
            (ours.out_proj, peer.to_out),
            (ours.encoding.gate, gate),
        ):
            mine.weight.copy_(theirs.weight)
        ours.encoding.gate.bias.copy_(gate.bias)
    return ours.to(dtype), peer.to(dtype)


def test_the_gate_bias_starts_where_x_transformers_starts_it():
    xt = _x_transformers()
    peer = xt.DataDependentAlibi(D_MODEL, HEADS)
    ours = posenc.build("forgetting", d_model=D_MODEL, n_heads=HEADS)
    assert torch.equal(ours.gate.bias, peer.to_forget_gates[0].bias)


def test_bias_matches_x_transformers_data_dependent_alibi():
    ours, peer = _peer_pair(torch.float32)
    x = torch.randn(2, 9, D_MODEL)
    expected = peer.data_dependent_alibi(x)  # [b, h, i, j], c_i − c_j everywhere
    got = ours.encoding.content_terms(torch.empty(2, HEADS, 9, 1), None, None, ours.encoding.content(x))
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    torch.testing.assert_close(got[..., causal], expected[..., causal], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_outputs_and_gradients_match_x_transformers_attention(backend):
    ours, peer = _peer_pair(torch.float32)
    ours.backend = backend
    x = torch.randn(2, 9, D_MODEL)
    x_ours, x_peer = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours, out_peer = ours(x_ours), peer(x_peer)
    torch.testing.assert_close(out_ours, out_peer, rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(out_ours)
    out_ours.backward(grad)
    out_peer.backward(grad)
    torch.testing.assert_close(x_ours.grad, x_peer.grad, rtol=1e-5, atol=1e-5)
    gate = peer.data_dependent_alibi.to_forget_gates[0]
    for mine, theirs in (
        (ours.encoding.gate.weight, gate.weight),
        (ours.encoding.gate.bias, gate.bias),
        (ours.q_proj.weight, peer.to_q.weight),
        (ours.v_proj.weight, peer.to_v.weight),
    ):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)


def test_a_kv_cache_without_the_gates_of_earlier_tokens_is_refused():
    # a cache whose keys were written without their gates (another layer's) cannot be read by FoX
    layer = _layer()
    cache = KVCache()
    plain = MultiHeadAttention(D_MODEL, HEADS, backend="eager").double()
    plain(torch.randn(1, 3, D_MODEL, dtype=torch.float64), cache=cache)
    with pytest.raises(ValueError, match="another attention layer"):
        layer(torch.randn(1, 1, D_MODEL, dtype=torch.float64), cache=cache)


def test_a_cache_keeping_sinks_decays_through_the_kept_tokens_as_a_forward_over_them():
    # the gates move with their keys: the last token attends as if the kept tokens were the whole text
    layer = _layer()
    x = torch.randn(1, 7, D_MODEL, dtype=torch.float64)
    cache = KVCache(sinks=1, window=3)
    with torch.no_grad():
        last = [layer(x[:, t : t + 1], cache=cache) for t in range(7)][-1]
        kept = layer(x[:, [0, 4, 5, 6]])[:, -1:]
    torch.testing.assert_close(last, kept, rtol=0, atol=1e-12)


def test_cpu_sdpa_runs_the_bias_a_block_of_queries_at_a_time_with_the_eager_gradients(monkeypatch):
    # the [b, h, i, j] bias is never held whole: c_i − c_j per block of 3 queries, from c [b, h, j]
    import posenc.attention as attention
    import posenc.kernels.query_blocked as query_blocked

    monkeypatch.setattr(query_blocked, "DEFAULT_BLOCK", 3)
    calls = []
    blocked = attention.query_blocked_attention
    monkeypatch.setattr(attention, "query_blocked_attention", lambda *a, **k: calls.append(1) or blocked(*a, **k))
    encoding = posenc.build("forgetting", d_model=D_MODEL, n_heads=4, gate_bias=0.5)
    layer = MultiHeadAttention(D_MODEL, 4, n_kv_heads=2, encoding=encoding, backend="eager").double()
    x = torch.randn(2, 8, D_MODEL, dtype=torch.float64, requires_grad=True)
    results = []
    for backend in ("eager", "sdpa"):
        layer.backend = backend
        layer.zero_grad()
        x.grad = None
        out = layer(x)
        out.backward(torch.ones_like(out))
        results.append((out, x.grad, encoding.gate.weight.grad, encoding.gate.bias.grad))
    assert calls == [1]
    for eager, sdpa in zip(*results, strict=True):
        torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-12)


def test_a_float32_bias_over_thousands_of_tokens_keeps_the_nearest_keys_to_float32_rounding():
    # a float32 cumulative sum reaches |c| ≈ 3000 here: c_i − c_j then loses ~1e-4 of every bias, the
    # nearest keys' included; from float64 sums in two pieces the bias stays within its own rounding
    log_f = torch.nn.functional.logsigmoid(torch.randn(1, 4096, 1, dtype=torch.float64))  # [b, j, h]
    exact = forget_bias(log_f, 8)  # [1, 1, 8, 4096], float64
    got = forget_bias(log_f.float(), 8)
    assert got.dtype == torch.float32
    near = exact[..., -16:]
    error = (got[..., -16:].double() - near).abs()
    assert (error <= 2 * torch.finfo(torch.float32).eps * near.abs() + 1e-12).all()
    naive = log_f.float().cumsum(1).transpose(1, 2)
    naive = naive[..., -8:, None] - naive[..., None, -16:]  # what a float32 cumulative sum would give
    assert ((naive.double() - near).abs() > 2 * torch.finfo(torch.float32).eps * near.abs() + 1e-12).any()
