"""What the addition layouts share: n-digit addends, their sum, and the batch of examples a layout writes.

The ``addition`` task (:mod:`posenc.lab.algorithmic`) writes both addends unpadded, with n drawn from
1 … L per example: the distance from an answer digit back to the operand digits it adds then depends on
n, and no encoding learns it. Each layout here is a task of its own file that fixes that distance in
one of the published ways:

- ``addition_padded`` (:mod:`posenc.lab.addition_padded`): zero-padded operands and the sum written
  least significant digit first (Lee et al. 2023, arXiv:2307.03381);
- ``addition_hints`` (:mod:`posenc.lab.addition_hints`): an index-hint token before every digit
  (Zhou et al. 2024, arXiv:2402.09371);
- ``addition_abacus`` (:mod:`posenc.lab.addition_abacus`): each digit at its significance within its
  number, all numbers shifted by a random offset in training (McLeish et al. 2024, arXiv:2405.17399);
- ``addition_coupled`` (:mod:`posenc.lab.addition_coupled`): the digits of equal significance in both
  addends and the sum share one position id, from a random start in training (Cho et al. 2024,
  arXiv:2405.20671).

A layout writes one example from its addends (:meth:`AdditionLayout.write`); the tokens, the answer
mask and, where the layout gives them, the position ids of a batch are assembled here. Training draws
n from 1 … L per example (:meth:`AdditionLayout.train_batch` passes L to the layout as ``width``, the
padded layout's width); evaluation at length n writes n-digit addends at width n and offset 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posenc.lab.exact_match import ExactMatchTask, Examples, examples_batch, training_lengths
from posenc.lab.tasks import Batch

#: The tokens of the ``addition`` task (:mod:`posenc.lab.algorithmic`), which the layouts share (the digit
#: k is token FIRST_SYMBOL + k); defined here too so that a layout imports without the algorithmic tasks.
PAD, BOS, SEP, EOS, PLUS = 0, 1, 2, 3, 4
FIRST_SYMBOL, SYMBOLS = 5, 10
VOCAB_SIZE = FIRST_SYMBOL + SYMBOLS

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "PLUS",
    "SEP",
    "AdditionLayout",
    "Written",
    "digit_tokens",
    "sum_digits",
]


def sum_digits(a: list[int], b: list[int]) -> list[int]:
    """a + b as len(a) + 1 digits, least significant first (as are a and b, of equal length)."""
    digits, carry = [], 0
    for a_digit, b_digit in zip(a, b, strict=True):
        carry, digit = divmod(a_digit + b_digit + carry, 10)
        digits.append(digit)
    return [*digits, carry]


def digit_tokens(digits: list[int]) -> list[int]:
    """The tokens of digits 0 … 9."""
    return [FIRST_SYMBOL + d for d in digits]


@dataclass(frozen=True)
class Written:
    """One example as a layout writes it."""

    tokens: list[int]  # BOS … EOS
    answer: list[bool]  # per token: True where the model must predict it (the sum's digits and EOS)
    positions: list[int] | None = None  # per token, the position id the encoding reads; None: 0 … s − 1


class AdditionLayout(ExactMatchTask):
    """An addition task of n-digit addends (digits least significant first) written in one layout.

    Subclasses give ``sequence_length`` and :meth:`write`; a layout with position ids of its own sets
    ``positions_given`` and ``position_range`` (the ids it may use: a learned table's size) and draws
    its training offset from the generator it is given.
    """

    vocab_size = VOCAB_SIZE
    unit = "digits"
    positions_given = False  # True: every example carries its position ids (Examples.positions)
    position_range: int | None = None  # with positions_given: ids lie in 0 … position_range − 1

    def write(self, a: list[int], b: list[int], width: int, generator: torch.Generator | None) -> Written:
        """The example ``a + b`` (digits least significant first). ``width``: the training length L while
        training, n when evaluating; ``generator``: the training data's (random offsets), None when
        evaluating (offset 0)."""
        raise NotImplementedError(f"layout {self.name!r} does not say how it writes an example")

    def position_count(self, length: int) -> int:
        return self.position_range if self.positions_given else self.sequence_length(length)

    def check(self, config) -> None:
        """Refuse lengths whose position ids would not fit the layout's range."""
        if not self.positions_given:
            return
        for n in (config.train_length, *config.eval_lengths):
            if self.offset_room(n) < 0:
                raise ValueError(
                    f"task {self.name!r} writes its ids in 0 … {self.position_range - 1}: length {n} "
                    f"does not fit"
                )

    def offset_room(self, n: int) -> int:
        """The largest training offset of an n-digit example (ids up to n + 3 above the offset)."""
        return self.position_range - (n + 4)

    def offset(self, n: int, generator: torch.Generator | None) -> int:
        """A training offset drawn uniformly from 0 … :meth:`offset_room`, or 0 when evaluating."""
        if generator is None:
            return 0
        return int(torch.randint(0, self.offset_room(n) + 1, (), generator=generator))

    def _examples(self, lengths: torch.Tensor, generator: torch.Generator, width: int | None) -> Examples:
        rows = []
        for n in lengths.tolist():
            digits = torch.randint(0, SYMBOLS, (2, n), generator=generator)  # [2, n]: the addends
            a, b = digits.tolist()
            rows.append(self.write(a, b, width or n, generator if width else None))
        longest = max(len(row.tokens) for row in rows)
        tokens = torch.full((len(rows), longest), PAD, dtype=torch.int64)  # [b, s]
        answer = torch.zeros((len(rows), longest), dtype=torch.bool)  # [b, s]
        positions = torch.zeros((len(rows), longest), dtype=torch.int64) if self.positions_given else None
        for index, row in enumerate(rows):
            tokens[index, : len(row.tokens)] = torch.tensor(row.tokens)
            answer[index, : len(row.answer)] = torch.tensor(row.answer)
            if positions is not None:
                ids = torch.tensor(row.positions)
                positions[index, : len(ids)] = ids
                positions[index, len(ids) :] = ids[-1]  # padding repeats the last id (never scored)
        return Examples(tokens, answer, positions)

    def examples(self, lengths: torch.Tensor, generator: torch.Generator) -> Examples:
        """Test examples: n-digit addends at width n and offset 0."""
        return self._examples(lengths, generator, None)

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        """n drawn from 1 … L per example, written at width L with the layout's random offsets."""
        lengths = training_lengths(batch_size, length, generator)
        return examples_batch(self._examples(lengths, generator, length), self.pad)


def answer_mask(tokens: list[int], start: int) -> list[bool]:
    """True from ``start`` to the end (the sum's digits and EOS)."""
    return [index >= start for index in range(len(tokens))]


def question(a: list[int], b: list[int]) -> list[int]:
    """``BOS a PLUS b SEP`` with the addends as given."""
    return [BOS, *digit_tokens(a), PLUS, *digit_tokens(b), SEP]


#: Hint tokens follow the digits in the vocabulary of the hints layout.
FIRST_HINT = VOCAB_SIZE
