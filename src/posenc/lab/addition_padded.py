"""Addition with zero-padded operands and the sum reversed (Lee et al. 2023, "Teaching Arithmetic to
Small Transformers", arXiv:2307.03381): ``BOS a_{W−1} … a_0 + b_{W−1} … b_0 SEP s_0 … s_W EOS``.

The addends are written most significant digit first (as in the plain format) and zero-padded to the
width W; the sum, W + 1 digits, least significant first (their "reverse" format, in which each digit
depends only on the digits before it). Training pads every example to W = L, so every training sequence
has the same 3L + 5 tokens and the distance from a sum digit to its operand digits is fixed; evaluation
at n pads to W = n. Lee et al. find that a small model learns addition at the trained width this way;
nothing in the layout fixes the distances at a width never trained.
"""

from __future__ import annotations

import torch

from posenc.lab.addition_layout import (
    BOS,
    EOS,
    PLUS,
    SEP,
    AdditionLayout,
    Written,
    answer_mask,
    digit_tokens,
    sum_digits,
)
from posenc.lab.tasks import register_task


class PaddedAddition(AdditionLayout):
    """Zero-padded addends, most significant first; the sum least significant first (3W + 5 tokens)."""

    def sequence_length(self, length: int) -> int:
        return 3 * length + 5

    def write(self, a: list[int], b: list[int], width: int, generator: torch.Generator | None) -> Written:
        if len(a) > width:
            raise ValueError(f"an addend of {len(a)} digits does not fit width {width}")
        padding = [0] * (width - len(a))
        a, b = a + padding, b + padding  # least significant first: the zeros pad the top
        tokens = [BOS, *digit_tokens(a[::-1]), PLUS, *digit_tokens(b[::-1]), SEP]
        start = len(tokens)
        tokens += [*digit_tokens(sum_digits(a, b)), EOS]
        return Written(tokens, answer_mask(tokens, start))


register_task("addition_padded", PaddedAddition)
