"""DeBERTa's disentangled attention against transformers' DebertaV2, weights copied in (float32, 1e-5 relative).

The peer: transformers' ``DebertaV2Encoder`` (its relative embeddings, their LayerNorm and the relative
positions it builds) and the ``DisentangledSelfAttention`` / ``DebertaV2Attention`` of its first layer.
posenc's side: ``MultiHeadAttention(bias=True, encoding=deberta, causal=False)`` with the same query, key
and value projections (and, without a shared key, the encoding's own relative projections).
"""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.attention import MultiHeadAttention
from posenc.encodings import deberta
from posenc.encodings.deberta import deberta_log_bucket

transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")

D_MODEL, HEADS, LENGTH = 32, 4, 40
#: Largest |posenc − transformers| / max |transformers| accepted (float32 both).
TOLERANCE = 1e-5


def _peer(*, position_buckets, max_relative_positions, share_att_key, terms, norm_rel_ebd):
    """transformers' one-layer DebertaV2 encoder (eval, no dropout), every parameter drawn N(0, 0.5)."""
    config = transformers.DebertaV2Config(
        hidden_size=D_MODEL,
        num_attention_heads=HEADS,
        intermediate_size=2 * D_MODEL,
        num_hidden_layers=1,
        relative_attention=True,
        pos_att_type=list(terms),
        position_buckets=-1 if position_buckets is None else position_buckets,
        max_relative_positions=max_relative_positions,
        share_att_key=share_att_key,
        norm_rel_ebd=norm_rel_ebd,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-7,
    )
    encoder = modeling.DebertaV2Encoder(config).eval()
    with torch.no_grad():
        for parameter in encoder.parameters():
            parameter.normal_(0, 0.5)
    return encoder


def _posenc(encoder, *, encoding=None, **arguments) -> MultiHeadAttention:
    """posenc's attention with the peer's weights copied in."""
    peer = encoder.layer[0].attention
    encoding = encoding or posenc.build(
        "deberta",
        d_model=D_MODEL,
        n_heads=HEADS,
        layer_norm="layer_norm" in encoder.norm_rel_ebd,
        layer_norm_eps=1e-7,
        **arguments,
    )
    attention = MultiHeadAttention(D_MODEL, HEADS, encoding=encoding, causal=False, bias=True)
    with torch.no_grad():
        for ours, theirs in (("q_proj", "query_proj"), ("k_proj", "key_proj"), ("v_proj", "value_proj")):
            getattr(attention, ours).load_state_dict(getattr(peer.self, theirs).state_dict())
        attention.out_proj.load_state_dict(peer.output.dense.state_dict())
        encoding.relative_embeddings.copy_(encoder.rel_embeddings.weight)
        if encoding.norm is not None:
            encoding.norm.load_state_dict(encoder.LayerNorm.state_dict())
        for name in ("pos_key_proj", "pos_query_proj"):
            if hasattr(encoding, name):
                getattr(encoding, name).load_state_dict(getattr(peer.self, name).state_dict())
    return attention


def _peer_context(encoder, x: torch.Tensor) -> torch.Tensor:
    """transformers' DisentangledSelfAttention output (before the output dense), ``[b, s, d_model]``."""
    mask = encoder.get_attention_mask(torch.ones(x.shape[:2], dtype=torch.long))
    with torch.no_grad():
        context, _ = encoder.layer[0].attention.self(
            x, mask, relative_pos=encoder.get_rel_pos(x), rel_embeddings=encoder.get_rel_embedding()
        )
    return context


def _context(attention: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """posenc's attention output before the output projection, ``[b, s, d_model]``."""
    b, s, _ = x.shape
    q, k, v = (
        getattr(attention, f"{name}_proj")(x).view(b, s, HEADS, D_MODEL // HEADS).transpose(1, 2)
        for name in ("q", "k", "v")
    )
    positions = torch.arange(s)
    with torch.no_grad():
        out = attention.attend(q, k, v, positions, positions)  # [b, h, s, d]
    return out.transpose(1, 2).reshape(b, s, D_MODEL)


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).abs().max() / expected.abs().max())


CASES = {
    "log buckets": {"position_buckets": 8, "max_relative_positions": 16},
    "exact distances": {"position_buckets": None, "max_relative_positions": 12},
}


@pytest.mark.parametrize(
    ("position_buckets", "max_relative_positions"),
    [(256, 512), (8, 16), (4, 13), (2, 3), (5, 100), (64, 1024)],
)
def test_buckets_equal_transformers_make_log_bucket_position(position_buckets, max_relative_positions):
    relative = torch.arange(-20000, 20001)
    theirs = modeling.make_log_bucket_position(relative, position_buckets, max_relative_positions).long()
    ours = deberta_log_bucket(
        relative, position_buckets=position_buckets, max_relative_positions=max_relative_positions
    )
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("share_att_key", [True, False])
@pytest.mark.parametrize("terms", [("c2p", "p2c"), ("c2p",), ("p2c",)])
@pytest.mark.parametrize("norm_rel_ebd", ["layer_norm", "none"])
@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_the_context_equals_debertav2_self_attention(case, share_att_key, terms, norm_rel_ebd, backend):
    torch.manual_seed(0)
    arguments = CASES[case] | {"share_att_key": share_att_key, "terms": terms}
    encoder = _peer(**arguments, norm_rel_ebd=norm_rel_ebd)
    attention = _posenc(encoder, **arguments)
    attention.backend = backend
    x = torch.randn(2, LENGTH, D_MODEL)  # 40 positions: past the exact buckets and the table's clamp
    assert _relative_error(_context(attention, x), _peer_context(encoder, x)) < TOLERANCE


@pytest.mark.parametrize("share_att_key", [True, False])
def test_the_attention_block_equals_debertav2_attention(share_att_key):
    # DebertaV2Attention: LayerNorm(dense(context) + x); posenc: the same LayerNorm of out_proj(…) + x
    torch.manual_seed(1)
    arguments = CASES["log buckets"] | {"share_att_key": share_att_key, "terms": ("c2p", "p2c")}
    encoder = _peer(**arguments, norm_rel_ebd="layer_norm")
    attention = _posenc(encoder, **arguments)
    peer = encoder.layer[0].attention
    x = torch.randn(2, LENGTH, D_MODEL)
    mask = encoder.get_attention_mask(torch.ones(2, LENGTH, dtype=torch.long))
    with torch.no_grad():
        expected, _ = peer(
            x, mask, relative_pos=encoder.get_rel_pos(x), rel_embeddings=encoder.get_rel_embedding()
        )
        got = peer.output.LayerNorm(attention(x) + x)
    assert _relative_error(got, expected) < TOLERANCE


def test_deberta_reads_p2c_at_the_row_of_c2p_not_at_algorithm_1s_literal_delta(monkeypatch):
    torch.manual_seed(2)
    arguments = CASES["log buckets"] | {"share_att_key": True, "terms": ("c2p", "p2c")}
    encoder = _peer(**arguments, norm_rel_ebd="layer_norm")
    attention = _posenc(encoder, **arguments)
    x = torch.randn(2, LENGTH, D_MODEL)
    expected = _peer_context(encoder, x)
    assert _relative_error(_context(attention, x), expected) < TOLERANCE
    original = deberta.position_to_content

    def mirrored(k, pos_query, index, n_heads):  # δ(j, i) = 2S − δ(i, j) inside the table
        rows = pos_query.shape[1]
        return original(k, pos_query, (rows - index).clamp(0, rows - 1), n_heads)

    monkeypatch.setattr(deberta, "position_to_content", mirrored)
    assert _relative_error(_context(attention, x), expected) > 1e-3
