"""The report aggregates over seeds only: runs of different settings get tables of their own, named."""

from __future__ import annotations

import re
import statistics
from dataclasses import replace

import pytest

from posenc.lab.intervals import interval
from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.report import (
    Run,
    _parameter_cell,
    bits_per_position_figure,
    comparison_markdown,
    configurations,
)
from tests.lab.helpers import FAKE_CORPUS, lab, record_run

SMOKE = PRESETS["smoke"]
L = SMOKE.tasks["lm"].train_length


def _record(records: Records, encoding: str, seed: int, ratio: float, **overrides) -> None:
    """An lm run whose bpb is 2 below 4L and 2·ratio from 4L on."""
    config = run_config(
        SMOKE, "lm", encoding, seed, corpus_sha256=FAKE_CORPUS["sha256"], overrides=Overrides(**overrides)
    )
    record_run(
        records, "smoke", config, {n: 2.0 * (ratio if n >= 4 * L else 1.0) for n in config.eval_lengths}
    )


def _sections(markdown: str) -> dict[str, str]:
    """``{configuration heading: its Markdown}``."""
    parts = re.split(r"^#### Configuration: (.*)$", markdown, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _ratio_cell(section: str, encoding: str) -> str:
    row = next(line for line in section.splitlines() if line.startswith("| ") and f"({encoding})" in line)
    return row.split(" | ")[4].replace("\\", "")  # the cell as shown, without Markdown's escapes


@pytest.fixture
def db(tmp_path):
    """alibi: seeds 0 and 1 at the preset's 12 steps (r = 1.10, 1.20), seed 0 at 2500 steps (r = 0.90),
    rope: seed 0 at 2500 steps (r = 1.02)."""
    path = tmp_path / "r.sqlite"
    with Records(path) as records:
        _record(records, "alibi", 0, 1.10)
        _record(records, "alibi", 0, 0.90, steps=2500)
        _record(records, "alibi", 1, 1.20)
        _record(records, "rope", 0, 1.02, steps=2500)
    return path


def test_runs_of_different_steps_are_not_averaged_as_seeds(db):
    sections = _sections(comparison_markdown(db))
    assert set(sections) == {"preset defaults", "steps=2500"}
    mean, low, high = interval([1.10, 1.20])
    assert _ratio_cell(sections["preset defaults"], "alibi").startswith(f"{mean:.3f} [{low:.3f}, {high:.3f}]")
    assert _ratio_cell(sections["steps=2500"], "alibi").startswith("0.900 Excellent")
    assert "- `lm`:" in sections["steps=2500"] and "2500 steps" in sections["steps=2500"]
    assert "12 steps" in sections["preset defaults"] and "seeds [0, 1]" in sections["preset defaults"]


def test_encodings_of_one_configuration_share_its_tables(db):
    sections = _sections(comparison_markdown(db))
    assert _ratio_cell(sections["steps=2500"], "rope").startswith("1.020 Good")
    assert "(`rope`)" not in sections["preset defaults"]


def test_every_setting_that_differs_names_its_own_configuration(tmp_path):
    path = tmp_path / "r.sqlite"
    lengths = (L, 2 * L, 3 * L)
    with Records(path) as records:
        _record(records, "alibi", 0, 1.0, steps=40)
        _record(records, "alibi", 0, 1.0, steps=2500)
        _record(records, "alibi", 0, 1.0, checkpoint_every=3)
        _record(records, "alibi", 0, 1.0, eval_lengths=lengths)
        _record(records, "alibi", 0, 1.0, steps=40, sliding_stride=4)
    headings = set(_sections(comparison_markdown(path)))
    assert headings == {
        "steps=40",
        "steps=2500",
        "checkpoint_every=3",
        f"eval_lengths={L},{2 * L},{3 * L}",
        "steps=40, sliding_stride=4",
    }


def test_a_config_recorded_by_another_version_is_its_own_configuration(tmp_path):
    path = tmp_path / "r.sqlite"
    current = run_config(SMOKE, "lm", "alibi", 0, corpus_sha256=FAKE_CORPUS["sha256"])
    with Records(path) as records:
        record_run(records, "smoke", current, dict.fromkeys(current.eval_lengths, 2.0))
        old = replace(run_config(SMOKE, "lm", "alibi", 1, corpus_sha256=FAKE_CORPUS["sha256"]), version=0)
        record_run(records, "smoke", old, dict.fromkeys(old.eval_lengths, 3.0))
    with Records(path, readonly=True) as records:
        groups = configurations([Run.of(row) for row in records.rows()])
    assert [group.settings for group in groups] == [(), (("version", "0"),)]
    assert [[run.seed for run in group.runs] for group in groups] == [[0], [1]]


def test_figure_draws_one_configuration_and_names_it(db):
    figure = bits_per_position_figure(db)
    axes = figure.axes[0]
    assert "preset defaults" in axes.get_title() and "2 seed(s)" in axes.get_title()
    [line] = [line for line in axes.get_lines() if line.get_gid() == "encoding-alibi"]
    # at 8L: 2.2 and 2.4 in the preset's configuration, 1.8 at 2500 steps; the mean is of the first two
    assert statistics.fmean(line.get_ydata()) == pytest.approx(2.3)
    assert not [line for line in axes.get_lines() if line.get_gid() == "encoding-rope"]


def test_cli_report_prints_one_table_per_configuration(db, tmp_path, capsys):
    assert lab("report", "--db", str(db), "--out", str(tmp_path / "out")) == 0
    out = capsys.readouterr().out
    assert out.count("##### Seed 004's table, measured") == 2
    assert "2 configurations of this preset are recorded" in out


def _learned_run(task: str, length: int, at_l: int, at_2l: int) -> Run:
    metrics = {"positional_parameters": at_l, "positional_parameters_at_2L": at_2l, "fixed_constants": 0}
    config = {"task": task, "train_length": length, "model": {"d_model": 32}}
    return Run("h", "smoke", task, "learned", 0, "done", None, config, metrics, {}, {}, None, "")


@pytest.mark.parametrize(
    ("task", "length", "at_l", "at_2l", "agrees"),
    [
        ("lm", 16, 16 * 32, 32 * 32, True),
        ("copy", 3, 9 * 32, 15 * 32, True),  # 2n + 3 tokens: 9 at 3 symbols, 15 at 6
        ("copy", 3, 9 * 32, 18 * 32, False),  # doubled, though the example is not twice as long
        ("lm", 16, 16 * 32, 16 * 32, False),
    ],
)
def test_a_learned_table_agrees_with_l_times_d_when_it_grows_with_the_tasks_positions(
    task, length, at_l, at_2l, agrees
):
    cell = _parameter_cell("L × d", _learned_run(task, length, at_l, at_2l))
    assert cell.endswith("✓" if agrees else "✗"), cell
