"""The base class: every hook's default, the derived bias and score_mod, and what an encoding declares."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posenc.encodings import PositionalEncoding, describe
from posenc.encodings.base import SPECIMEN_MODEL, PositionSpace
from posenc.encodings.views import frequencies, translations, view


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
    assert encoding.score_terms(q, q, None, None) is None and encoding.views == frozenset()
    assert (
        view(encoding, "distance_bias", torch.arange(3)) is None
        and view(encoding, "codes", torch.arange(3)) is None
    )
    assert frequencies(encoding) is None
    assert encoding.count_parameters(8, 4, 2) == 0 and not encoding.capabilities.acts_in_attention


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
    assert describe(Plain).specimen_arguments(Plain) == {
        "d_model": SPECIMEN_MODEL["d_model"],
        "max_len": SPECIMEN_MODEL["max_len"],
    }


def test_translations_stay_inside_the_positions_an_encoding_holds():
    class Table(Plain):
        @property
        def position_space(self):
            return PositionSpace(limit=self.max_len)

    positions, shifts = translations(Plain(4), 16)
    assert positions.tolist() == list(range(16)) and shifts == (1, 7, 100)
    positions, shifts = translations(Table(4, max_len=20), 16)
    assert positions.tolist() == list(range(10)) and shifts == (1, 7)
    with pytest.raises(ValueError, match="shift 15 moves positions 0 … 9 outside the table of 20"):
        translations(Table(4, max_len=20), 16, (15,))


class LearnedDistanceBias(PositionalEncoding):
    """A learned bias per head and distance, and a fixed buffer; it declares no parameter count."""

    kind = "bias"

    def __init__(self, n_heads: int, *, max_distance: int = 8) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.table = nn.Parameter(torch.randn(n_heads, max_distance + 1))  # [h, K+1]
        self.register_buffer("fixed", torch.ones(3))  # a constant, never counted


class NeedsSize(PositionalEncoding):
    """A constructor argument beyond the model sizes, so it cannot be built from them alone."""

    def __init__(self, n_heads: int, table_size: int) -> None:
        super().__init__()
        self.n_heads, self.table = n_heads, nn.Parameter(torch.zeros(table_size, n_heads))


def test_the_model_sizes_are_declared_none_until_an_encoding_keeps_them():
    encoding = PositionalEncoding()
    assert (encoding.d_model, encoding.n_heads, encoding.d_head, encoding.max_len) == (None,) * 4
    assert (
        Plain(4).d_model == 4
        and Plain(4).d_head is None
        and describe(PositionalEncoding).parameter_formula is None
    )


def test_the_default_parameter_count_counts_the_instance_at_its_own_sizes():
    # used to return 0 whatever the instance held, so a learned table "failed" its own count
    encoding = LearnedDistanceBias(4, max_distance=5)
    assert encoding.count_parameters(0, 0, 0) == 4 * 6  # 0: the instance's own size
    assert encoding.count_parameters(999, 77, 4) == 4 * 6  # it takes neither L nor d
    encoding.table.requires_grad_(False)
    assert encoding.count_parameters(0, 0, 4) == 0  # frozen: not learned


def test_the_default_parameter_count_builds_at_other_sizes_without_moving_the_rng():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    assert LearnedDistanceBias(4, max_distance=5).count_parameters(0, 0, 8) == 8 * 9  # default max_distance
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), expected)


def test_the_default_parameter_count_is_none_where_it_cannot_build_at_those_sizes():
    encoding = NeedsSize(2, 5)
    assert encoding.count_parameters(0, 0, 2) == 10
    assert encoding.count_parameters(0, 0, 4) is None
