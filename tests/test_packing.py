"""Packed sequences: documents one after another in a row, each at its own positions, give each
document what it gets alone, for every registered encoding and backend; bad document ids are refused."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.attention import KVCache, MultiHeadAttention
from posenc.encodings import encoding_class
from posenc.model import TransformerEncoder, TransformerLM

LENGTHS = (5, 3, 4)  # three documents in one row


def _positions(length: int, columns: int) -> torch.Tensor:
    line = torch.arange(length)  # [n]
    return line if columns == 1 else line[:, None].expand(length, columns)  # [n(, columns)]


def _has_a_bidirectional_form(name: str) -> bool:
    """Whether the encoding builds for bidirectional attention (CoPE's paper defines no such form, and its
    ``model_arguments`` refuses ``causal=False``)."""
    try:
        encoding_class(name).model_arguments(d_model=32, n_heads=4, max_len=16, causal=False)
    except ValueError:
        return False
    return True


MODELS = [
    pytest.param(name, model_class, id=f"{name}-{kind}")
    for name in posenc.available()
    for model_class, kind in ((TransformerLM, "causal"), (TransformerEncoder, "bidirectional"))
    if model_class is TransformerLM or _has_a_bidirectional_form(name)
]


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
@pytest.mark.parametrize(("name", "model_class"), MODELS)
def test_each_packed_document_gets_what_it_gets_alone(name, model_class, backend):
    # without a document mask the second document attended to the first one's keys (logits off by ~5)
    torch.manual_seed(0)
    model = model_class(32, d_model=32, n_layers=2, n_heads=4, encoding=name, max_len=16, backend=backend)
    columns = model.encoding.position_space.columns
    tokens = [torch.randint(0, 32, (2, n)) for n in LENGTHS]
    positions = torch.cat([_positions(n, columns) for n in LENGTHS])  # [s(, columns)]: each from 0
    documents = torch.cat([torch.full((n,), d) for d, n in enumerate(LENGTHS)])  # [s]
    if not model.encoding.capabilities.follows_documents:  # its weights read keys outside the document: refused
        with pytest.raises(ValueError, match="give each document a call of its own"):
            model(torch.cat(tokens, dim=1), positions, documents=documents)
        return
    with torch.no_grad():
        packed = model(torch.cat(tokens, dim=1), positions, documents=documents)  # [2, s, vocab]
        alone = torch.cat([model(t, _positions(t.shape[1], columns)) for t in tokens], dim=1)
    torch.testing.assert_close(packed, alone, rtol=1e-4, atol=1e-5)


def test_packed_documents_train_as_each_alone():
    # the gradient too: a loss over the packed row equals the sum of each document's loss alone
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=32, n_layers=2, n_heads=4, encoding="rope")
    tokens = [torch.randint(0, 32, (1, n)) for n in LENGTHS]
    positions = torch.cat([torch.arange(n) for n in LENGTHS])
    documents = torch.cat([torch.full((n,), d) for d, n in enumerate(LENGTHS)])
    model(torch.cat(tokens, dim=1), positions, documents=documents).square().sum().backward()
    packed = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    sum(model(t).square().sum() for t in tokens).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(packed[name], p.grad, rtol=1e-4, atol=1e-3, msg=name)  # grads ~ 100s


@pytest.mark.parametrize(
    ("documents", "error", "message"),
    [
        (torch.tensor([0, 0, 1, 0]), ValueError, "a decrease after index 2"),
        (torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0]]), ValueError, "a decrease after index 2 of row 1"),
        (torch.tensor([0, 0, 1]), ValueError, r"documents must have shape \[4\], \[1, 4\] or \[2, 4\]"),
        (torch.tensor([0.0, 0.0, 1.0, 1.0]), TypeError, "documents must be an integer tensor of ids"),
        (torch.tensor([False, False, True, True]), TypeError, "documents must be an integer tensor of ids"),
    ],
)
def test_bad_document_ids_are_refused_naming_them(documents, error, message):
    model = TransformerLM(32, d_model=32, n_layers=1, n_heads=4)
    with pytest.raises(error, match=message):
        model(torch.randint(0, 32, (2, 4)), documents=documents)


def test_documents_with_a_kv_cache_are_refused():
    model = TransformerLM(32, d_model=32, n_layers=1, n_heads=4)
    with pytest.raises(ValueError, match="documents with a KV cache"):
        model(torch.randint(0, 32, (1, 4)), caches=model.new_caches(), documents=torch.tensor([0, 0, 1, 1]))
    layer = MultiHeadAttention(32, 4, encoding=posenc.build("rope", d_head=8))
    with pytest.raises(ValueError, match="documents with a KV cache"):
        layer(torch.randn(1, 4, 32), cache=KVCache(), documents=torch.tensor([0, 0, 1, 1]))


@pytest.mark.parametrize("backend", ["eager", "sdpa", "flex"])
def test_each_row_packs_its_own_documents_with_grouped_query_attention(backend):
    torch.manual_seed(0)
    model = TransformerLM(
        32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, encoding="alibi", backend=backend
    )
    packings = [(5, 3, 4), (8, 4)]  # [b, s] documents: each row its own boundaries
    tokens = torch.randint(0, 32, (2, 12))
    positions = torch.stack([torch.cat([torch.arange(n) for n in lengths]) for lengths in packings])
    documents = torch.stack([torch.cat([torch.full((n,), d) for d, n in enumerate(p)]) for p in packings])
    with torch.no_grad():
        packed = model(tokens, positions, documents=documents)  # [2, 12, vocab]
        for row, lengths in enumerate(packings):
            starts = [sum(lengths[:d]) for d in range(len(lengths))]
            for start, n in zip(starts, lengths, strict=True):
                alone = model(tokens[row : row + 1, start : start + n])[0]
                torch.testing.assert_close(packed[row, start : start + n], alone, rtol=1e-4, atol=1e-5)
