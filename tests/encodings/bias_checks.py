"""Checks shared by the tests of the attention-bias encodings (FIRE, Kerple, Sandwich): every attention
backend gives the same outputs and gradients, KV-cache decoding equals the full forward, and the score_mod
adds the same numbers as the materialised bias."""

from __future__ import annotations

import torch

import posenc
from posenc.attention import MultiHeadAttention
from posenc.backends import ATTENTION
from posenc.encodings import ENCODINGS
from posenc.model import TransformerEncoder, TransformerLM

VOCAB, D_MODEL, HEADS = 50, 32, 4


def built(name: str, *, causal: bool = True, **overrides) -> posenc.PositionalEncoding:
    """The encoding ``name`` as a model of width 32 with 4 heads and 64 positions builds it."""
    arguments = ENCODINGS[name].model_arguments(d_model=D_MODEL, n_heads=HEADS, max_len=64, causal=causal)
    return posenc.build(name, **(arguments | overrides))


def attention_outputs_and_grads(
    encoding: posenc.PositionalEncoding, *, causal: bool, positions: torch.Tensor
) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """backend -> (output, gradients of every parameter) of one grouped-query attention layer."""
    torch.manual_seed(0)
    x = torch.randn(2, positions.shape[-1], D_MODEL)
    layer = MultiHeadAttention(D_MODEL, HEADS, n_kv_heads=2, encoding=encoding, causal=causal)
    results = {}
    for backend in ATTENTION:
        layer.backend = backend
        layer.zero_grad()
        out = layer(x, positions)
        out.square().mean().backward()
        grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None}
        results[backend] = (out.detach(), grads)
    return results


def assert_backends_agree(
    encoding: posenc.PositionalEncoding, *, causal: bool, positions: torch.Tensor
) -> None:
    """Outputs and every gradient (the encoding's parameters included) agree on every backend."""
    results = attention_outputs_and_grads(encoding, causal=causal, positions=positions)
    reference, reference_grads = results[ATTENTION[0]]
    for backend, (out, grads) in results.items():
        torch.testing.assert_close(out, reference, rtol=0, atol=1e-5, msg=backend)
        assert grads.keys() == reference_grads.keys(), backend
        for name, grad in grads.items():
            torch.testing.assert_close(
                grad, reference_grads[name], rtol=1e-4, atol=1e-5, msg=f"{backend} {name}"
            )


def assert_cache_decoding_equals_the_full_forward(name: str, backend: str, **overrides) -> None:
    """A TransformerLM fed one token at a time through its KV caches gives the logits of the full forward."""
    torch.manual_seed(0)
    model = TransformerLM(
        VOCAB,
        d_model=D_MODEL,
        n_layers=2,
        n_heads=HEADS,
        encoding=name,
        max_len=64,
        backend=backend,
        encoding_kwargs=overrides or None,
    )
    tokens = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.enable_grad():  # flex then takes its reference path, as on CPU it always does
        full = model(tokens).detach()
        caches = model.new_caches()
        steps = [model(tokens[:, :4], caches=caches).detach()]
        steps += [model(tokens[:, t : t + 1], caches=caches).detach() for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-6, atol=1e-5)


def model_gradients(name: str, backend: str, *, causal: bool = True) -> dict[str, torch.Tensor]:
    """Gradients of the shared encoding's parameters after one backward through a 2-layer model."""
    torch.manual_seed(0)
    cls = TransformerLM if causal else TransformerEncoder
    model = cls(VOCAB, d_model=D_MODEL, n_layers=2, n_heads=HEADS, encoding=name, max_len=64, backend=backend)
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    model(tokens).square().mean().backward()
    return {key: p.grad for key, p in model.encoding.named_parameters()}


def score_mod_bias(
    encoding: posenc.PositionalEncoding, q_positions: torch.Tensor, k_positions: torch.Tensor
) -> torch.Tensor:
    """What the encoding's score_mod adds to zero scores on broadcast index grids, ``[h, i, j]`` (1-D positions)."""
    score_mod = encoding.score_mod(q_positions=q_positions, k_positions=k_positions)
    h, i, j = encoding.n_heads, q_positions.shape[-1], k_positions.shape[-1]
    grids = (
        torch.zeros(1, 1, 1, 1, dtype=torch.long),
        torch.arange(h).view(1, h, 1, 1),
        torch.arange(i).view(1, 1, i, 1),
        torch.arange(j).view(1, 1, 1, j),
    )
    return score_mod(torch.zeros(1, h, i, j), *grids)[0]
