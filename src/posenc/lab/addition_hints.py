"""Addition with index hints (Zhou et al. 2024, "Transformers Can Achieve Length Generalization But Not
Robustly", arXiv:2402.09371): a hint token before every digit names its significance,
``BOS h_0 a_0 … h_{n−1} a_{n−1} + h_0 b_0 … SEP h_0 s_0 … h_n s_n EOS``, digits least significant
first.

The same hint precedes the digits of equal significance in both addends and the sum, so attention can
find the operand digits of a sum digit by content (matching its hint) instead of by distance. The hints
are consecutive tokens of :data:`HINTS`, starting at a random one in training (so that every hint is
trained, as Zhou et al. sample them) and at the first when evaluating. The sum's hints are given: the
model is scored on the sum's digits and EOS (a decoder writes each hint, which the question fixes, and
the model the digit after it).
"""

from __future__ import annotations

import torch

from posenc.lab.addition_layout import (
    BOS,
    EOS,
    FIRST_HINT,
    PLUS,
    SEP,
    AdditionLayout,
    Written,
    digit_tokens,
    sum_digits,
)
from posenc.lab.tasks import register_task

#: Hint tokens: a sum of n + 1 digits needs n + 1 consecutive ones.
HINTS = 64


def _hinted(digits: list[int], first: int) -> list[int]:
    tokens = []
    for k, token in enumerate(digit_tokens(digits)):
        tokens += [FIRST_HINT + first + k, token]
    return tokens


class HintedAddition(AdditionLayout):
    """Every digit preceded by the hint of its significance (6n + 6 tokens)."""

    vocab_size = FIRST_HINT + HINTS

    def sequence_length(self, length: int) -> int:
        return 6 * length + 6

    def check(self, config) -> None:
        for n in (config.train_length, *config.eval_lengths):
            if n + 1 > HINTS:
                raise ValueError(f"task {self.name!r} has {HINTS} hints: length {n} needs {n + 1}")

    def write(self, a: list[int], b: list[int], width: int, generator: torch.Generator | None) -> Written:
        n = len(a)
        first = 0 if generator is None else int(torch.randint(0, HINTS - n, (), generator=generator))
        tokens = [BOS, *_hinted(a, first), PLUS, *_hinted(b, first), SEP]
        answer = [False] * len(tokens)
        for k, token in enumerate(digit_tokens(sum_digits(a, b))):
            tokens += [FIRST_HINT + first + k, token]
            answer += [False, True]  # the hint is given, the digit scored
        return Written([*tokens, EOS], [*answer, True])


register_task("addition_hints", HintedAddition)
