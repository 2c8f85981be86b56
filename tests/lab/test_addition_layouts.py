"""The addition layouts: every example read back against the sum and the layout's definition (its tokens,
answer mask and position ids, from each paper), training batches at the training width with their random
offsets, the positions reaching the model in training and evaluation, and a tiny sweep end to end."""

from __future__ import annotations

import pytest
import torch

from posenc.lab import addition_layout, algorithmic
from posenc.lab.addition_abacus import POSITIONS as ABACUS_POSITIONS
from posenc.lab.addition_hints import HINTS
from posenc.lab.addition_layout import BOS, EOS, FIRST_HINT, FIRST_SYMBOL, PLUS, SEP
from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.tasks import task_named
from posenc.model import TransformerLM
from tests.lab.helpers import lab

LAYOUTS = ("addition_padded", "addition_hints", "addition_abacus", "addition_coupled")


def _number(digits: list[int]) -> int:
    """The number of digits given least significant first."""
    return sum(d * 10**k for k, d in enumerate(digits))


def _digits(tokens: list[int]) -> list[int]:
    digits = [t - FIRST_SYMBOL for t in tokens]
    assert all(0 <= d < 10 for d in digits), tokens
    return digits


def _examples(name: str, n: int, seed: int = 0):
    task = task_named(name)
    examples = task.examples(torch.full((64,), n), torch.Generator().manual_seed(seed))
    return task, examples


def _check_padded(tokens, answer, positions, n):
    plus, sep = tokens.index(PLUS), tokens.index(SEP)
    a, b = _digits(tokens[1:plus])[::-1], _digits(tokens[plus + 1 : sep])[::-1]  # written top digit first
    total = _digits(tokens[sep + 1 : -1])  # least significant first
    assert len(a) == len(b) == n and len(total) == n + 1
    assert _number(total) == _number(a) + _number(b)
    assert answer == [i > sep for i in range(len(tokens))] and positions is None


def _check_hints(tokens, answer, positions, n):
    plus, sep = tokens.index(PLUS), tokens.index(SEP)
    pairs = lambda part: (part[0::2], _digits(part[1::2]))  # noqa: E731 (hint, digit) pairs
    hints_a, a = pairs(tokens[1:plus])
    hints_b, b = pairs(tokens[plus + 1 : sep])
    hints_s, total = pairs(tokens[sep + 1 : -1])
    assert hints_a == hints_b == hints_s[:n] == [FIRST_HINT + k for k in range(n)]  # offset 0 when testing
    assert hints_s[n] == FIRST_HINT + n and _number(total) == _number(a) + _number(b)
    scored = [i for i, selected in enumerate(answer) if selected]
    assert scored == [*range(sep + 2, len(tokens) - 1, 2), len(tokens) - 1]  # the digits and EOS
    assert positions is None


def _check_abacus(tokens, answer, positions, n):
    plus, sep = tokens.index(PLUS), tokens.index(SEP)
    a, b, total = _digits(tokens[1:plus]), _digits(tokens[plus + 1 : sep]), _digits(tokens[sep + 1 : -1])
    assert _number(total) == _number(a) + _number(b)
    # McLeish et al.: a digit's id is its significance within its number, from 1; the rest read 0
    significance = [*range(1, n + 1)]
    assert positions == [0, *significance, 0, *significance, 0, *significance, n + 1, 0]
    assert answer == [i > sep for i in range(len(tokens))]


def _check_coupled(tokens, answer, positions, n):
    plus, sep = tokens.index(PLUS), tokens.index(SEP)
    a, b, total = _digits(tokens[1:plus]), _digits(tokens[plus + 1 : sep]), _digits(tokens[sep + 1 : -1])
    assert _number(total) == _number(a) + _number(b)
    for k in range(n):  # Cho et al.: a_k, b_k and the token that predicts s_k share one id
        assert positions[1 + k] == positions[plus + 1 + k] == positions[sep + k]
    assert positions[sep + n] == positions[sep + n - 1] + 1  # the carry digit's predictor: the next id
    assert len(set(positions[1:plus])) == n


CHECKS = {
    "addition_padded": _check_padded,
    "addition_hints": _check_hints,
    "addition_abacus": _check_abacus,
    "addition_coupled": _check_coupled,
}


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("n", [1, 3, 12])
def test_every_test_example_is_the_sum_in_the_layout_it_defines(name, n):
    task, examples = _examples(name, n)
    assert examples.tokens.shape[1] == task.sequence_length(n)
    for row in range(examples.tokens.shape[0]):
        tokens = examples.tokens[row].tolist()
        assert tokens[0] == BOS and tokens[-1] == EOS
        positions = None if examples.positions is None else examples.positions[row].tolist()
        CHECKS[name](tokens, examples.answer[row].tolist(), positions, n)


def test_the_layouts_write_the_addition_tasks_tokens():
    for name in ("PAD", "BOS", "SEP", "EOS", "PLUS", "FIRST_SYMBOL", "SYMBOLS", "VOCAB_SIZE"):
        assert getattr(addition_layout, name) == getattr(algorithmic, name), name


def test_padded_training_examples_are_all_written_at_the_training_width():
    task = task_named("addition_padded")
    batch = task.train_batch(64, 6, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (64, task.sequence_length(6) - 1)
    assert bool((batch.lengths == task.sequence_length(6) - 1).all())  # no row is shorter: no padding


@pytest.mark.parametrize("name", ["addition_abacus", "addition_coupled"])
def test_training_offsets_move_every_example_and_stay_within_the_ids(name):
    task = task_named(name)
    batch = task.train_batch(256, 8, torch.Generator().manual_seed(0))
    assert batch.positions is not None and batch.positions.shape == batch.inputs.shape
    assert int(batch.positions.max()) < task.position_range
    digit_ids = batch.positions[:, 1]  # the first digit's id: offset + 1 in both layouts
    assert len(set(digit_ids.tolist())) > 20 and int(digit_ids.max()) > ABACUS_POSITIONS - 15
    assert task.position_count(8) == task.position_range


def test_hint_offsets_cover_the_hints():
    task = task_named("addition_hints")
    batch = task.train_batch(256, 8, torch.Generator().manual_seed(0))
    first = batch.inputs[:, 1] - FIRST_HINT
    assert int(first.min()) == 0 and int(first.max()) > HINTS - 12


def test_lengths_past_a_layouts_ids_are_refused_before_training():
    preset = PRESETS["addition"]
    for name, longest in (("addition_coupled", 60), ("addition_hints", HINTS - 1)):
        run_config(preset, name, "rope", 0, overrides=Overrides(eval_lengths=(8, longest)))  # fits
        config = run_config(preset, name, "rope", 0, overrides=Overrides(eval_lengths=(8, longest + 1)))
        with pytest.raises(ValueError, match=f"length {longest + 1}"):
            task_named(name).check(config)


def test_a_learned_table_is_sized_to_the_layouts_ids():
    config = run_config(PRESETS["addition"], "addition_coupled", "learned", 0)
    assert config.encoding_kwargs["max_len"] == task_named("addition_coupled").position_range
    config = run_config(PRESETS["addition"], "addition_padded", "learned", 0)
    assert config.encoding_kwargs["max_len"] == task_named("addition_padded").sequence_length(8)


def test_the_layouts_positions_reach_the_model_in_training_and_in_evaluation(monkeypatch, tmp_path):
    from posenc.lab.distributed import start
    from posenc.lab.train import train

    seen = []
    forward = TransformerLM.forward

    def spy(self, tokens, positions=None, *args, **kwargs):
        seen.append(positions)
        return forward(self, tokens, positions, *args, **kwargs)

    monkeypatch.setattr(TransformerLM, "forward", spy)
    config = run_config(
        PRESETS["smoke"],
        "addition_coupled",
        "rope",
        0,
        overrides=Overrides(steps=3, warmup=1, eval_lengths=(3,)),
    )
    task = task_named("addition_coupled")
    outcome = train(config, task, start("spread", "cpu"), tmp_path / "checkpoint.pt")
    assert len(seen) == 3 and all(p is not None and p.dim() == 2 for p in seen)
    assert any(int(p[:, 0].max()) > 0 for p in seen)  # a random offset in training
    seen.clear()
    task.evaluate(outcome.model, config)
    assert seen and all(p is not None and int(p[:, 0].max()) == 0 for p in seen)  # offset 0 when testing


def test_a_tiny_sweep_of_the_layouts_is_recorded_and_reported(tmp_path):
    db = tmp_path / "records.sqlite"
    argv = ["run", "--preset", "smoke", "--task", ",".join(LAYOUTS), "--encodings", "learned,rope"]
    assert (
        lab(*argv, "--db", str(db), "--threads", "1", "--no-progress", "--steps", "3", "--warmup", "1") == 0
    )
    with Records(db, readonly=True) as records:
        done = records.rows(status="done")
    assert sorted({(r["task"], r["encoding"]) for r in done}) == sorted(
        (task, encoding) for task in LAYOUTS for encoding in ("learned", "rope")
    )
    from posenc.lab.report import comparison_markdown

    markdown = comparison_markdown(db)
    for task in LAYOUTS:
        assert f"{task} at 3 (1L)" in markdown
