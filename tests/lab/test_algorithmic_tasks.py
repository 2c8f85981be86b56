"""Sort, summation and parity (Kazemnejad et al., 2023): every generated example against a reference
written from the task's definition, and the reference comparison catches a planted wrong answer."""

from __future__ import annotations

import pytest
import torch

from posenc.lab import algorithmic
from posenc.lab.algorithmic import AlgorithmicTask
from posenc.lab.presets import PRESETS, run_config
from posenc.lab.tasks import TASKS
from posenc.lab.train import build_model

NEW_TASKS = ("sort", "summation", "parity")
#: The answer each task defines, from the operand's symbols (0 … 9).
REFERENCE = {
    "sort": lambda x: sorted(x),
    "summation": lambda x: [sum(x) % 10],
    "parity": lambda x: [x.count(1) % 2],
}
#: Seeds × examples per seed checked for each task, lengths 1 … 12.
SEEDS, PER_SEED, LONGEST = 20, 64, 12


def _examples(task: str, seed: int) -> algorithmic.Examples:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, LONGEST + 1, (PER_SEED,), generator=generator)  # [b]
    return algorithmic.make_examples(task, lengths, generator)


def _symbols(tokens: list[int]) -> list[int]:
    symbols = [t - algorithmic.FIRST_SYMBOL for t in tokens]
    assert all(0 <= s < algorithmic.SYMBOLS for s in symbols), tokens
    return symbols


def _parsed(tokens: list[int], answer: list[bool]) -> tuple[list[int], list[int], list[int]]:
    """(operand symbols, answer symbols, indices the mask selects) of one padded example."""
    sep, end = tokens.index(algorithmic.SEP), tokens.index(algorithmic.EOS)
    assert tokens[0] == algorithmic.BOS and set(tokens[end + 1 :]) <= {algorithmic.PAD}
    masked = [i for i, selected in enumerate(answer) if selected]
    return _symbols(tokens[1:sep]), _symbols(tokens[sep + 1 : end]), masked


def _mismatches(task: str) -> list[tuple[list[int], list[int]]]:
    """Every (operand, answer) of the seeded examples whose answer is not the reference's."""
    wrong = []
    for seed in range(SEEDS):
        examples = _examples(task, seed)
        for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
            operand, given, _ = _parsed(tokens, answer)
            if given != REFERENCE[task](operand):
                wrong.append((operand, given))
    return wrong


@pytest.mark.parametrize("task", NEW_TASKS)
def test_every_answer_is_the_one_the_task_defines(task):
    assert _mismatches(task) == []


@pytest.mark.parametrize("task", NEW_TASKS)
def test_sequence_length_is_the_token_count_and_the_mask_is_the_answer_and_eos(task):
    for seed in range(SEEDS):
        examples = _examples(task, seed)
        for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
            operand, given, masked = _parsed(tokens, answer)
            end = tokens.index(algorithmic.EOS)
            assert end + 1 == algorithmic.sequence_length(task, len(operand))
            assert masked == list(range(end - len(given), end + 1))  # the answer, then EOS


@pytest.mark.parametrize(
    ("task", "wrong"),
    [
        ("sort", lambda x: sorted(x, reverse=True)),
        ("sort", lambda x: [*sorted(x[:-1]), x[-1]]),  # the last symbol left where it was
        ("summation", lambda x: [(sum(x) + 1) % 10]),
        ("summation", lambda x: [sum(x) % 9]),
        ("parity", lambda x: [1 - x.count(1) % 2]),
        ("parity", lambda x: [x.count(0) % 2]),
    ],
)
def test_a_planted_wrong_answer_is_caught_by_the_reference(monkeypatch, task, wrong):
    monkeypatch.setitem(algorithmic._ANSWERS, task, wrong)
    assert _mismatches(task)


def test_parity_operands_are_binary_and_both_answers_occur():
    answers = set()
    for seed in range(SEEDS):
        examples = _examples("parity", seed)
        for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
            operand, given, _ = _parsed(tokens, answer)
            assert set(operand) <= {0, 1}
            answers.update(given)
    assert answers == {0, 1}


def test_the_operands_cover_every_residue_and_repeated_symbols():
    sums, repeated = set(), 0
    for seed in range(SEEDS):
        for task in ("summation", "sort"):
            examples = _examples(task, seed)
            for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
                operand, given, _ = _parsed(tokens, answer)
                if task == "summation":
                    sums.update(given)
                elif len(set(operand)) < len(operand):
                    repeated += 1
    assert sums == set(range(10)) and repeated > 100


def test_the_tasks_are_registered_after_the_first_three_whose_test_sets_keep_their_seeds():
    assert algorithmic.ALGORITHMIC_TASKS[:3] == ("copy", "reverse", "addition")
    assert set(NEW_TASKS) <= set(algorithmic.ALGORITHMIC_TASKS)
    layouts = ("addition_padded", "addition_hints", "addition_abacus", "addition_coupled")
    assert TASKS == ("lm", *algorithmic.ALGORITHMIC_TASKS, *layouts, "grid")
    sweeps = [preset for preset in PRESETS.values() if "copy" in preset.tasks]
    assert sweeps and all(set(NEW_TASKS) <= set(preset.tasks) for preset in sweeps)


@pytest.mark.parametrize("task", NEW_TASKS)
def test_training_batches_score_the_answer_and_eos_only(task):
    batch = AlgorithmicTask(task).train_batch(32, 5, torch.Generator().manual_seed(4))
    tokens = (batch.targets != algorithmic.PAD).sum(1) + 1  # [b]: every token but BOS is a target
    answer_tokens = (tokens - 3) // 2 + 1 if task == "sort" else torch.full_like(tokens, 2)
    assert torch.equal(batch.mask.sum(1), answer_tokens)
    assert not batch.mask[batch.targets == algorithmic.PAD].any()


@pytest.mark.parametrize("task", NEW_TASKS)
def test_an_untrained_model_is_scored_on_the_task(task):
    config = run_config(PRESETS["smoke"], task, "nope", 0)
    metrics = AlgorithmicTask(task).exact_match(build_model(config, AlgorithmicTask(task)).eval(), 4, 16)
    assert metrics["examples"] == 16 and 0 <= metrics["exact_match"] <= metrics["token_accuracy"] <= 1


@pytest.mark.parametrize("task", NEW_TASKS)
def test_an_unknown_task_or_a_length_below_one_is_named(task):
    with pytest.raises(ValueError, match="'sorting'"):
        algorithmic.make_examples("sorting", torch.tensor([3]), torch.Generator())
    with pytest.raises(ValueError, match="'sorting'"):
        algorithmic.sequence_length("sorting", 3)
    with pytest.raises(ValueError, match="at least 1, got 0"):
        algorithmic.make_examples(task, torch.tensor([3, 0]), torch.Generator())
    with pytest.raises(ValueError, match="n must be positive, got -2"):
        algorithmic.sequence_length(task, -2)
