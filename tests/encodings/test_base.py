"""The base class: every hook's default, the derived bias and score_mod, and what an encoding declares."""

from __future__ import annotations

import pytest
import torch

from posenc.encodings import PositionalEncoding
from posenc.encodings.base import SPECIMEN_MODEL


class Plain(PositionalEncoding):
    """Declares nothing."""

    def __init__(self, d_model: int, *, max_len: int = 8) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len


class ScoreMod(PositionalEncoding):
    kind = "bias"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads

    def score_mod(self, q_offset=0, kv_offset=0, *, q_positions=None, k_positions=None):
        def at(positions, b, index):  # [s] shared by the batch, or [b, s]
            return positions[index] if positions.dim() == 1 else positions[b, index]

        return lambda score, b, h, i, j: score + 10.0 * h + (at(k_positions, b, j) - at(q_positions, b, i))


class Bias(PositionalEncoding):
    kind = "bias"
    n_heads = 2

    def bias(self, q_positions, k_positions):
        return torch.stack(
            [10.0 * h + (k_positions[None, :] - q_positions[:, None]).float() for h in range(2)]
        )


def test_the_default_hooks_change_nothing():
    encoding, x, q = Plain(4), torch.randn(2, 3, 4), torch.randn(1, 2, 3, 4)
    assert encoding.embed(x) is x and encoding.rotate(q, q) == (q, q)
    assert encoding.bias(torch.arange(3), torch.arange(3)) is None and encoding.score_mod() is None
    assert encoding.distance_bias(torch.arange(3)) is None and encoding.score_terms(q, q, None, None) is None
    assert encoding.codes(torch.arange(3)) is None and encoding.frequencies() is None
    assert encoding.count_parameters(8, 4, 2) == 0 and not encoding.acts_in_attention


def test_a_bias_is_derived_from_a_score_mod_for_shared_and_batched_positions():
    encoding = ScoreMod(2)
    q, k = torch.tensor([3, 4]), torch.tensor([0, 1, 2])
    expected = torch.stack([10.0 * h + (k[None, :] - q[:, None]).float() for h in range(2)])  # [h, i, j]
    torch.testing.assert_close(encoding.bias(q, k), expected)
    batched = encoding.bias(torch.stack([q, q + 1]), k)  # [b, h, i, j]
    torch.testing.assert_close(batched, torch.stack([expected, expected - 1]))


def test_a_score_mod_is_derived_from_a_bias_and_needs_positions():
    encoding, q, k = Bias(), torch.tensor([3, 4]), torch.tensor([0, 1, 2])
    score_mod = encoding.score_mod(q_positions=q, k_positions=k)
    h, i, j = torch.meshgrid(torch.arange(2), torch.arange(2), torch.arange(3), indexing="ij")
    torch.testing.assert_close(score_mod(torch.zeros(2, 2, 3), 0, h, i, j), encoding.bias(q, k))
    with pytest.raises(ValueError, match="Bias derives its score_mod from its bias and needs q_positions"):
        encoding.score_mod()


def test_model_arguments_are_the_sizes_the_constructor_takes():
    assert Plain.model_arguments(d_model=32, n_heads=4, max_len=16, causal=True) == {
        "d_model": 32,
        "max_len": 16,
    }
    assert ScoreMod.model_arguments(d_model=32, n_heads=4, max_len=16, causal=False) == {"n_heads": 4}
    assert Plain.specimen_arguments() == {
        "d_model": SPECIMEN_MODEL["d_model"],
        "max_len": SPECIMEN_MODEL["max_len"],
    }


def test_translations_stay_inside_the_positions_an_encoding_holds():
    class Table(Plain):
        @property
        def position_limit(self):
            return self.max_len

    positions, shifts = Plain(4).translations(16)
    assert positions.tolist() == list(range(16)) and shifts == (1, 7, 100)
    positions, shifts = Table(4, max_len=20).translations(16)
    assert positions.tolist() == list(range(10)) and shifts == (1, 7)
    with pytest.raises(ValueError, match="shift 15 moves positions 0 … 9 outside the table of 20"):
        Table(4, max_len=20).translations(16, (15,))
