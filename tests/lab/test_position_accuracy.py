"""Accuracy at each answer position: a model that copies every symbol but one, at a planted position, is
scored right everywhere else and wrong there, and the summaries follow from the positions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from posenc.lab import algorithmic
from posenc.lab.algorithmic import AlgorithmicTask
from posenc.lab.presets import PRESETS, run_config
from posenc.lab.train import build_model

#: Answer tokens (EOS included) of an example of 5 symbols: 5 + 1, the 6 digits of the sum + 1, 1 + 1.
ANSWER_TOKENS = {"copy": 6, "reverse": 6, "sort": 6, "addition": 7, "summation": 2, "parity": 2}
COPY = AlgorithmicTask("copy")


class CopiesButOne(nn.Module):
    """Predicts copy's answer from the question it is given, except the answer token at ``wrong``
    (EOS is answer token n), where it predicts PAD."""

    def __init__(self, wrong: int | None):
        super().__init__()
        self.wrong = wrong
        self.anchor = nn.Parameter(torch.zeros(()))  # where evaluation looks for the device

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # [b, s] -> [b, s, vocab]
        n = (inputs.shape[1] - 2) // 2  # inputs: BOS x1 … xn SEP x1 … xn
        predicted = torch.full_like(inputs, algorithmic.PAD)  # [b, s]
        predicted[:, n + 1 : 2 * n + 1] = inputs[:, 1 : n + 1]  # answer token j is x(j+1)
        predicted[:, 2 * n + 1] = algorithmic.EOS
        if self.wrong is not None:
            predicted[:, n + 1 + self.wrong] = algorithmic.PAD
        return nn.functional.one_hot(predicted, algorithmic.VOCAB_SIZE).float()


def test_a_model_that_copies_is_right_at_every_answer_position():
    metrics = COPY.exact_match(CopiesButOne(None), 6, 40, batch_size=16)
    assert metrics["position_accuracy"] == [1.0] * 7
    assert metrics["exact_match"] == metrics["token_accuracy"] == 1.0


@pytest.mark.parametrize("wrong", [0, 3, 6])
def test_a_planted_wrong_position_is_the_only_one_scored_wrong(wrong):
    metrics = COPY.exact_match(CopiesButOne(wrong), 6, 40, batch_size=16)
    expected = [1.0] * 7
    expected[wrong] = 0.0
    assert metrics["position_accuracy"] == expected
    assert metrics["exact_match"] == 0.0 and metrics["token_accuracy"] == pytest.approx(6 / 7)


@pytest.mark.parametrize("task", algorithmic.ALGORITHMIC_TASKS)
def test_each_answer_token_of_every_task_has_an_accuracy_whose_mean_is_the_token_accuracy(task):
    config = run_config(PRESETS["smoke"], task, "nope", 0)
    metrics = AlgorithmicTask(task).exact_match(
        build_model(config, AlgorithmicTask(task)).eval(), 5, 24, batch_size=10
    )
    accuracy = metrics["position_accuracy"]
    assert len(accuracy) == ANSWER_TOKENS[task] and all(0 <= a <= 1 for a in accuracy)
    assert sum(accuracy) / len(accuracy) == pytest.approx(metrics["token_accuracy"])
