"""An example posenc plugin: an exact-match lab task, each symbol of the question plus one (mod 10).

``BOS x1 … xn SEP (x1 + 1) … (xn + 1) EOS``: the answer token i reads the question token i, n + 1
places back, so the task asks what copying asks, with a twist that a model must learn. An exact-match
task gets the lab's training, its evaluation at every length, the algorithmic tables, the ranking and
the figures from its family; it declares only its vocabulary, its length and its examples. Installed,
its entry point (pyproject.toml) makes ``--task increment`` valid in every ``posenc lab`` command.
"""

from __future__ import annotations

import torch

from posenc.lab.exact_match import ExactMatchTask, Examples

PAD, BOS, SEP, EOS, FIRST = 0, 1, 2, 3, 4  # special tokens, then the symbols
SYMBOLS = 10


class Increment(ExactMatchTask):
    """Each symbol of the question plus one, mod 10 (2n + 3 tokens for n symbols)."""

    vocab_size = FIRST + SYMBOLS

    def sequence_length(self, length: int) -> int:
        return 2 * length + 3

    def examples(self, lengths: torch.Tensor, generator: torch.Generator) -> Examples:
        """Examples of the given lengths ``[b]``: tokens ``[b, s]`` and the answer mask ``[b, s]``."""
        width = self.sequence_length(int(lengths.max()))
        tokens = torch.full((len(lengths), width), PAD, dtype=torch.int64)  # [b, s]
        answer = torch.zeros((len(lengths), width), dtype=torch.bool)  # [b, s]
        for row, n in enumerate(lengths.tolist()):
            x = torch.randint(0, SYMBOLS, (n,), generator=generator)  # [n]
            question, reply = FIRST + x, FIRST + (x + 1) % SYMBOLS
            tokens[row, : 2 * n + 3] = torch.cat(
                (torch.tensor([BOS]), question, torch.tensor([SEP]), reply, torch.tensor([EOS]))
            )
            answer[row, n + 2 : 2 * n + 3] = True  # the reply and EOS count
        return Examples(tokens, answer)
