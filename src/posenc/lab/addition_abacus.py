"""Addition with Abacus positions (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right
Embeddings", arXiv:2405.17399): each digit's position id is its significance within its number,
``BOS a_0 … a_{n−1} + b_0 … b_{n−1} SEP s_0 … s_n EOS`` (digits least significant first) at ids
``0, o+1 … o+n, 0, o+1 … o+n, 0, o+1 … o+n+1, 0``.

Every token that is not a digit reads id 0; the digits of one significance read the same id in both
addends and the sum. In training all digit ids are shifted by one offset o per example, drawn uniformly
so that every id up to :data:`POSITIONS` − 1 is trained (McLeish et al. draw it from 0 … 100); when
evaluating o = 0. The ids are a position tensor (``Examples.positions``) that any encoding reads:
McLeish et al. add a learned embedding of them, as ``learned`` does.
"""

from __future__ import annotations

import torch

from posenc.lab.addition_layout import (
    EOS,
    AdditionLayout,
    Written,
    answer_mask,
    digit_tokens,
    question,
    sum_digits,
)
from posenc.lab.tasks import register_task

#: Position ids of the layout: offsets and digits of the longest evaluated numbers lie below it.
POSITIONS = 64


def abacus_ids(n: int, offset: int) -> list[int]:
    """The ids of ``BOS a + b SEP s EOS`` for n-digit addends: digits at offset + significance (from 1)."""
    digits = [offset + 1 + k for k in range(n)]
    return [0, *digits, 0, *digits, 0, *digits, offset + n + 1, 0]


class AbacusAddition(AdditionLayout):
    """Digits at their significance within their number, shifted by a random offset in training."""

    positions_given = True
    position_range = POSITIONS

    def sequence_length(self, length: int) -> int:
        return 3 * length + 5

    def write(self, a: list[int], b: list[int], width: int, generator: torch.Generator | None) -> Written:
        tokens = question(a, b)
        start = len(tokens)
        tokens += [*digit_tokens(sum_digits(a, b)), EOS]
        return Written(tokens, answer_mask(tokens, start), abacus_ids(len(a), self.offset(len(a), generator)))


register_task("addition_abacus", AbacusAddition)
