"""Addition with coupled positions (Cho et al. 2024, "Position Coupling: Improving Length Generalization
of Arithmetic Transformers Using Task Structure", arXiv:2405.20671): the digits of equal significance
in both addends and the sum share one position id.

``BOS a_0 … a_{n−1} + b_0 … b_{n−1} SEP s_0 … s_n EOS`` (digits least significant first) at ids
``o, o+1 … o+n, o+n+1, o+1 … o+n, o+1, o+2 … o+n+2``: a_k and b_k read o + 1 + k, and so does the token
from which the model predicts s_k (SEP for s_0, s_{k−1} after it), so that the prediction of a digit
and the two digits it adds are at one position. In training one start o per example is drawn uniformly
so that every id up to :data:`POSITIONS` − 1 is trained (Cho et al. draw a random start); when
evaluating o = 0. Cho et al. read the ids with a learned absolute embedding (``learned``); any encoding
can read them.
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


def coupled_ids(n: int, offset: int) -> list[int]:
    """The ids of ``BOS a + b SEP s EOS`` for n-digit addends from start ``offset``."""
    digits = [offset + 1 + k for k in range(n)]
    answer = [offset + 1 + k for k in range(n + 2)]  # SEP, s_0 … s_n: each at the id of what it predicts
    return [offset, *digits, offset + n + 1, *digits, *answer, offset + n + 3]


class CoupledAddition(AdditionLayout):
    """Digits of equal significance, and the token predicting the sum's, share a position id."""

    positions_given = True
    position_range = POSITIONS

    def sequence_length(self, length: int) -> int:
        return 3 * length + 5

    def write(self, a: list[int], b: list[int], width: int, generator: torch.Generator | None) -> Written:
        tokens = question(a, b)
        start = len(tokens)
        tokens += [*digit_tokens(sum_digits(a, b)), EOS]
        return Written(
            tokens, answer_mask(tokens, start), coupled_ids(len(a), self.offset(len(a), generator))
        )


register_task("addition_coupled", CoupledAddition)
