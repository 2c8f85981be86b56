"""Exact-match tasks: an example is one token sequence ``question answer EOS``, the model is trained on
examples of lengths 1 … L drawn uniformly and scored on the answer and EOS only.

A task of this family defines its examples (:meth:`ExactMatchTask.examples`) and their length; the
rest is here. Exact match is scored by one teacher-forced forward pass: an example is right when every
answer token and EOS is the argmax prediction, the same verdict as greedy decoding. The accuracy at
each answer position is kept too: it shows which tokens a model that fails the example misses. The
report shows every task of the family in its exact-match tables, figures and ranking.
"""

from __future__ import annotations

import statistics
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from posenc._validation import at_least_float32, check_positive_int
from posenc.lab.evaluate import TEST_SEED, cannot_run, position_limit
from posenc.lab.tasks import EXACT_MATCH, Batch, Task

if TYPE_CHECKING:
    from posenc.lab.presets import RunConfig
    from posenc.model import TransformerLM

#: The padding token after each example's EOS.
PAD = 0
#: Mean exact match over seeds at L from which a task counts as learned by an encoding.
LEARNED_AT_L = 0.9
#: Test examples of the exact match at L evaluated during training (``TrainConfig.curve_every``).
CURVE_EXAMPLES = 256


@dataclass(frozen=True)
class Examples:
    """A padded batch of examples (PAD after each example's EOS)."""

    tokens: torch.Tensor  # [b, s] int64, every example padded to the longest
    answer: torch.Tensor  # [b, s] bool, True at the answer tokens and EOS (what the model must predict)
    positions: torch.Tensor | None = None  # [b, s] int64, each token's position id; None: 0 … s − 1


def training_lengths(batch_size: int, max_length: int, generator: torch.Generator) -> torch.Tensor:
    """Lengths drawn uniformly from 1 … max_length, ``[batch_size]``."""
    check_positive_int("batch_size", batch_size)
    return torch.randint(
        1, check_positive_int("max_length", max_length) + 1, (batch_size,), generator=generator
    )


def examples_batch(examples: Examples, pad: int = PAD) -> Batch:
    """Examples as a next-token batch whose mask selects the answer tokens and EOS."""
    inputs = examples.tokens[:, :-1]  # [b, s]
    lengths = (inputs != pad).sum(dim=-1)  # [b]: the inputs before each row's padding
    positions = None if examples.positions is None else examples.positions[:, :-1]  # [b, s]
    return Batch(inputs, examples.tokens[:, 1:], examples.answer[:, 1:], lengths, positions)


class ExactMatchTask(Task):
    """A task scored by exact match of its answers; subclasses give ``examples``, ``sequence_length``
    and ``vocab_size``."""

    family = EXACT_MATCH
    unit = "symbols"
    causal = True
    axes = 1
    metrics = ("exact_match", "token_accuracy")
    pad = PAD  # the token after each example's EOS

    def examples(self, lengths: torch.Tensor, generator: torch.Generator) -> Examples:
        """Random examples with the given lengths ``[b]``, drawn from ``generator``."""
        raise NotImplementedError(f"task {self.name!r} has no examples")

    def test_seed(self, n: int) -> int:
        """The seed of the test examples of length n: the same for every run, encoding and seed."""
        return TEST_SEED + 7919 * n + zlib.crc32(self.name.encode())

    def train_batch(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        lengths = training_lengths(batch_size, length, generator)
        return examples_batch(self.examples(lengths, generator), self.pad)

    def exact_match(self, model: TransformerLM, n: int, examples: int, batch_size: int = 256) -> dict:
        """Exact match, token accuracy and answer loss on ``examples`` test examples of length n
        (teacher-forced), and the accuracy at each answer position (EOS last)."""
        generator = torch.Generator().manual_seed(self.test_seed(n))
        exact, nll_sum = 0, 0.0
        correct_at = None  # [answer tokens]: right predictions at each answer position, summed over examples
        device = next(model.parameters()).device
        for first in range(0, examples, batch_size):
            count = min(batch_size, examples - first)
            batch = examples_batch(self.examples(torch.full((count,), n), generator), self.pad)
            inputs = batch.inputs.to(device)  # [b, s]
            with torch.no_grad():
                if batch.positions is None:
                    logits = at_least_float32(model(inputs)).cpu()  # [b, s, vocab]
                else:  # the task's own position ids [b, s]
                    logits = at_least_float32(model(inputs, batch.positions.to(device))).cpu()
            right = logits.argmax(-1) == batch.targets  # [b, s]
            exact += int((right | ~batch.mask).all(dim=1).sum())
            answer_right = right[batch.mask].view(count, -1)  # [b, answer tokens]: every example is n long
            correct_at = answer_right.sum(0) if correct_at is None else correct_at + answer_right.sum(0)
            nll = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")
            nll_sum += float(nll[batch.mask.flatten()].sum())
        tokens = examples * len(correct_at)
        return {
            "status": "ok",
            "examples": examples,
            "exact_match": exact / examples,
            "token_accuracy": int(correct_at.sum()) / tokens,
            "position_accuracy": [int(correct) / examples for correct in correct_at],
            "loss": nll_sum / tokens,
        }

    def evaluate(self, model: TransformerLM, config: RunConfig) -> dict:
        """Per evaluation length n: exact match, token accuracy, accuracy per answer position and loss."""
        limit = position_limit(model)
        results = {}
        for n in config.eval_lengths:
            positions = self.position_count(n) - 1  # the model sees the example without its last token
            if limit is not None and positions > limit:
                results[str(n)] = cannot_run(limit, positions)
                continue
            results[str(n)] = self.exact_match(model, n, config.eval_size)
        return results

    def learning_point(self, model: TransformerLM, config: RunConfig) -> float:
        """Exact match at L on the first :data:`CURVE_EXAMPLES` test examples (of the run's ``eval_size``)."""
        examples = min(CURVE_EXAMPLES, config.eval_size)
        return self.exact_match(model, config.train_length, examples)["exact_match"]

    def summary(self, entry: dict) -> str:
        return f"{entry['exact_match']:.2f} EM"

    def learned(self, entries: list[dict]) -> bool:
        """Learned at L: mean exact match over the seeds ≥ :data:`LEARNED_AT_L`."""
        return statistics.fmean(entry["exact_match"] for entry in entries) >= LEARNED_AT_L
