"""Seeded generators for the algorithmic tasks: copy, reverse, multi-digit addition, sort, summation and
parity (the last three as in Kazemnejad et al., 2023, "The Impact of Positional Encoding on Length
Generalization in Transformers").

Every example is one token sequence ``[BOS] question [SEP] answer [EOS]``; the model is trained and
scored on the answer and EOS only. The length n of an example is the number of symbols in its
operand (every task but addition) or digits in each addend (addition):

- copy:      ``BOS x1 … xn SEP x1 … xn EOS``                             (2n + 3 tokens)
- reverse:   ``BOS x1 … xn SEP xn … x1 EOS``                             (2n + 3 tokens)
- addition:  ``BOS a1 … an + b1 … bn SEP s1 … s(n+1) EOS``, digits least significant first
  (the order in which the carry is computed), the sum padded to n + 1 digits (3n + 5 tokens).
- sort:      ``BOS x1 … xn SEP sorted(x) EOS``, ascending                (2n + 3 tokens)
- summation: ``BOS x1 … xn SEP (x1 + … + xn) mod 10 EOS``                (n + 4 tokens)
- parity:    ``BOS x1 … xn SEP (number of ones) mod 2 EOS``, xi in {0, 1} (n + 4 tokens)

Symbols are 10 tokens (the digits for addition, sort and summation; parity draws only the first two).
The sequence starts with BOS so that an encoding without positions (NoPE) has an anchor. Each task is
an :class:`AlgorithmicTask`, registered under its name (an exact-match task:
:mod:`posenc.lab.exact_match`).
"""

from __future__ import annotations

import torch

from posenc._validation import check_choice, check_positive_int
from posenc.lab.evaluate import TEST_SEED
from posenc.lab.exact_match import ExactMatchTask, Examples, training_lengths
from posenc.lab.tasks import register_task

PAD, BOS, SEP, EOS, PLUS = 0, 1, 2, 3, 4
#: First of the 10 symbol tokens (digit k is token FIRST_SYMBOL + k).
FIRST_SYMBOL = 5
SYMBOLS = 10
VOCAB_SIZE = FIRST_SYMBOL + SYMBOLS
#: Registered tasks, in the order that seeds each one's test set (new tasks go last).
ALGORITHMIC_TASKS = ("copy", "reverse", "addition", "sort", "summation", "parity")
#: Symbols an operand draws from, where not all of SYMBOLS.
_ALPHABET = {"parity": 2}


def sequence_length(task: str, n: int) -> int:
    """Tokens in one example of length n (the position count a model needs for it).

    Raises:
        ValueError: an unknown task (listing the valid ones) or n below 1.
    """
    check_choice("task", task, ALGORITHMIC_TASKS)
    check_positive_int("n", n)
    if task == "addition":
        return 3 * n + 5
    return n + 4 if task in ("summation", "parity") else 2 * n + 3


def _sum_digits(a: list[int], b: list[int]) -> list[int]:
    """a + b as n + 1 digits, least significant first (as are a and b)."""
    digits, carry = [], 0
    for a_digit, b_digit in zip(a, b, strict=True):
        carry, digit = divmod(a_digit + b_digit + carry, 10)
        digits.append(digit)
    return [*digits, carry]


#: The answer's digits from the operand's, for the tasks with one operand.
_ANSWERS = {
    "copy": lambda x: x,
    "reverse": lambda x: x[::-1],
    "sort": sorted,
    "summation": lambda x: [sum(x) % 10],
    "parity": lambda x: [x.count(1) % 2],
}


def _tokens(digits: list[int]) -> list[int]:
    return [FIRST_SYMBOL + d for d in digits]


def _example(task: str, symbols: torch.Tensor, others: torch.Tensor) -> tuple[list[int], int]:
    """One example's tokens and the index where its answer starts."""
    x = symbols.tolist()
    if task == "addition":
        b = others.tolist()
        y = _sum_digits(x, b)
        question = [BOS, *_tokens(x), PLUS, *_tokens(b), SEP]
    else:
        y = _ANSWERS[task](x)
        question = [BOS, *_tokens(x), SEP]
    return question + _tokens(y) + [EOS], len(question)


def make_examples(task: str, lengths: torch.Tensor, generator: torch.Generator) -> Examples:
    """Random examples of ``task`` with the given lengths ``[b]``, drawn from ``generator``.

    Raises:
        ValueError: an unknown task (listing the valid ones) or a length below 1.
    """
    check_choice("task", task, ALGORITHMIC_TASKS)
    lengths = lengths.tolist()
    if not lengths:
        raise ValueError("lengths must hold at least one length, got none")
    if min(lengths) < 1:
        raise ValueError(f"lengths must be at least 1, got {min(lengths)} (in {lengths})")
    alphabet = _ALPHABET.get(task, SYMBOLS)
    rows = []
    for n in lengths:
        symbols = torch.randint(0, alphabet, (2, n), generator=generator)  # [2, n]: operand(s)
        rows.append(_example(task, symbols[0], symbols[1]))
    width = max(len(tokens) for tokens, _ in rows)
    tokens = torch.full((len(rows), width), PAD, dtype=torch.int64)  # [b, s]
    answer = torch.zeros((len(rows), width), dtype=torch.bool)  # [b, s]
    for index, (row, start) in enumerate(rows):
        tokens[index, : len(row)] = torch.tensor(row)
        answer[index, start : len(row)] = True
    return Examples(tokens, answer)


class AlgorithmicTask(ExactMatchTask):
    """An algorithmic task (copy, sort, parity, …): train on lengths 1 … L drawn uniformly, score the
    answer tokens."""

    vocab_size = VOCAB_SIZE
    unit = "symbols"

    def __init__(self, name: str) -> None:
        self.name = check_choice("task", name, ALGORITHMIC_TASKS)

    def sequence_length(self, length: int) -> int:
        return sequence_length(self.name, length)

    def examples(self, lengths: torch.Tensor, generator: torch.Generator) -> Examples:
        return make_examples(self.name, lengths, generator)

    def test_seed(self, n: int) -> int:
        """Seeded by the task's place in ALGORITHMIC_TASKS: the test sets the records were scored on."""
        return TEST_SEED + 7919 * n + ALGORITHMIC_TASKS.index(self.name)


for _name in ALGORITHMIC_TASKS:
    register_task(_name, AlgorithmicTask(_name))

__all__ = [
    "ALGORITHMIC_TASKS",
    "AlgorithmicTask",
    "Examples",
    "make_examples",
    "sequence_length",
    "training_lengths",
]
