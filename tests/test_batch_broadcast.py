"""Positions and document ids with a batch axis of 1 (``[1, s]``, the shape transformers passes its
position ids in) hold for every row of a larger batch, as ``[s]`` does, for every registered encoding."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.model import TransformerLM


def _positions(length: int, columns: int) -> torch.Tensor:
    line = torch.arange(3, 3 + length)  # [s]: not from 0, so that a default would differ
    return line if columns == 1 else line[:, None].expand(length, columns)  # [s(, columns)]


@pytest.mark.parametrize("name", posenc.available())
def test_positions_of_one_row_hold_for_every_row(name):
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=32, n_layers=1, n_heads=4, encoding=name, max_len=16)
    tokens = torch.randint(0, 32, (3, 6))  # [b, s]
    positions = _positions(6, model.encoding.position_space.columns)  # [s(, n)]
    with torch.no_grad():
        shared = model(tokens, positions)
        one_row = model(tokens, positions.unsqueeze(0))  # [1, s(, n)]
        every_row = model(tokens, positions.unsqueeze(0).expand(3, *positions.shape))  # [b, s(, n)]
    torch.testing.assert_close(one_row, shared)
    torch.testing.assert_close(every_row, shared, rtol=1e-4, atol=1e-5)  # a per-row path: its rounding


def test_document_ids_of_one_row_hold_for_every_row():
    torch.manual_seed(0)
    model = TransformerLM(32, d_model=32, n_layers=1, n_heads=4, encoding="rope")
    tokens = torch.randint(0, 32, (3, 6))
    positions = torch.tensor([0, 1, 2, 0, 1, 2])
    documents = torch.tensor([0, 0, 0, 1, 1, 1])
    with torch.no_grad():
        torch.testing.assert_close(
            model(tokens, positions.unsqueeze(0), documents=documents.unsqueeze(0)),
            model(tokens, positions, documents=documents),
        )


def test_a_batch_axis_other_than_one_or_the_batch_is_refused_naming_the_shapes():
    model = TransformerLM(32, d_model=32, n_layers=1, n_heads=4, encoding="rope")
    tokens = torch.randint(0, 32, (3, 6))
    with pytest.raises(ValueError, match=r"must have shape \[6\], \[1, 6\] or \[3, 6\].*got \(2, 6\)"):
        model(tokens, torch.arange(6).expand(2, 6))
    with pytest.raises(ValueError, match=r"documents must have shape \[6\], \[1, 6\] or \[3, 6\]"):
        model(tokens, documents=torch.zeros(2, 6, dtype=torch.long))
