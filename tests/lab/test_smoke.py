"""The smoke preset end to end: every task and encoding trained, recorded, skipped on re-run, reported.

Each check compares values read back from the records with what the run's own config says they must
be, or the report with the records it was made from.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from pathlib import Path

import pytest

import posenc
from posenc.lab.algorithmic import ALGORITHMIC_TASKS
from posenc.lab.presets import PRESETS, lab_encodings, not_applicable
from posenc.lab.records import Records
from posenc.lab.report import (
    PUBLISHED_MRR,
    bits_per_position_figure,
    comparison_markdown,
    grade,
    lab_figures,
    write_report,
)
from posenc.lab.tasks import make_task_shape
from tests.lab.helpers import lab

#: The tasks the smoke preset sweeps (the addition layouts run when named).
TASKS = PRESETS["smoke"].sweep_tasks

#: log2 of the byte vocabulary (256 bytes and BOS): bits per byte of uniform predictions.
UNIFORM_BPB = math.log2(257)


def _done(db) -> list[dict]:
    with Records(db, readonly=True) as records:
        return records.rows(status="done")


def _table_rows(markdown: str, first_header: str) -> dict[str, list[str]]:
    """The rows of the first Markdown table whose header starts with ``first_header``, by encoding."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = [cell.strip().replace("\\", "") for cell in line.strip("| ").split(" | ")]  # as shown
        name = cells[0].rpartition("(")[2].rstrip(")") if cells[0].endswith(")") else cells[0]
        rows[name] = cells[1:]
    return rows


def test_every_task_and_encoding_is_recorded_once_and_not_applicable_ones_with_their_reason(smoke_db):
    with Records(smoke_db, readonly=True) as records:
        done, skipped = records.rows(status="done"), records.rows(status="not applicable")
    assert sorted((r["task"], r["encoding"]) for r in done) == sorted(
        (task, encoding)
        for task in TASKS
        for encoding in lab_encodings()
        if encoding not in not_applicable(task)
    )
    assert sorted((r["task"], r["encoding"]) for r in skipped) == sorted(
        (task, encoding) for task in TASKS for encoding in not_applicable(task)
    )
    assert skipped and all(r["reason"] == not_applicable(r["task"])[r["encoding"]] for r in skipped)


def test_each_record_is_keyed_by_the_hash_of_its_own_config(smoke_db):
    for row in _done(smoke_db):
        canonical = json.dumps(row["config"], sort_keys=True, separators=(",", ":"))
        assert row["config_hash"] == hashlib.sha256(canonical.encode()).hexdigest()
        assert (row["task"], row["encoding"], row["seed"]) == tuple(
            row["config"][key] for key in ("task", "encoding", "seed")
        )
        assert (row["corpus"] is not None) == (row["task"] == "lm")
        if row["corpus"] is not None:
            assert row["corpus"]["sha256"] == row["config"]["corpus_sha256"]


def test_every_run_trained_its_steps_and_its_loss_fell(smoke_db):
    for row in _done(smoke_db):
        train, losses = row["config"]["train"], row["metrics"]["train_loss"]
        logged = [
            s for s in range(1, train["steps"] + 1) if s % train["log_every"] == 0 or s == train["steps"]
        ]
        assert [step for step, _ in losses] == logged, row["config_hash"]
        assert all(math.isfinite(loss) and loss > 0 for _, loss in losses)
        assert losses[-1][1] < losses[0][1], (row["task"], row["encoding"], losses)
        assert row["timings"]["steps"] == train["steps"]
        assert 0 < row["timings"]["seconds_per_step"] < math.inf


def test_metrics_are_finite_and_evaluated_at_the_configured_lengths(smoke_db):
    for row in _done(smoke_db):
        config, evaluation = row["config"], row["metrics"]["eval"]
        assert sorted(int(n) for n in evaluation) == config["eval_lengths"]
        for n, entry in ((int(n), entry) for n, entry in evaluation.items()):
            if entry["status"] != "ok":
                continue
            if row["task"] == "lm":
                assert entry["windows"] * n == config["eval_size"]
                assert len(entry["curve"]) == n and all(math.isfinite(v) and v > 0 for v in entry["curve"])
                assert entry["bpb"] == pytest.approx(statistics.fmean(entry["curve"]), rel=1e-5)
                assert 0 < entry["bpb"] < UNIFORM_BPB  # trained: below uniform predictions
                assert (entry["bpb_from_L"] is None) == (n == config["train_length"])
            else:
                assert entry["examples"] == config["eval_size"]
                assert 0 <= entry["exact_match"] <= 1 and 0 <= entry["token_accuracy"] <= 1
                assert math.isfinite(entry["loss"]) and entry["loss"] > 0


def test_learned_cannot_run_exactly_where_its_table_ends(smoke_db):
    learned = [r for r in _done(smoke_db) if r["encoding"] == "learned"]
    assert {r["task"] for r in learned} == set(TASKS)
    for row in learned:
        table = row["config"]["encoding_kwargs"]["max_len"]
        assert table == make_task_shape(row["task"], row["config"]["train_length"])
        for n, entry in row["metrics"]["eval"].items():
            if row["task"] == "grid":  # a larger grid reads the table resampled to it, as a ViT's
                assert entry["status"] == "ok", n
                continue
            runs = make_task_shape(row["task"], int(n)) - (0 if row["task"] == "lm" else 1) <= table
            assert (entry["status"] == "ok") == runs, (row["task"], n)


def test_counted_parameters_match_the_recorded_settings(smoke_db):
    for row in _done(smoke_db):
        model, kwargs, metrics = row["config"]["model"], row["config"]["encoding_kwargs"], row["metrics"]
        # the encoding built again from its recorded arguments: the lab counts what the instance holds
        built = posenc.build(row["encoding"], **kwargs)
        expected = sum(p.numel() for p in built.parameters() if p.requires_grad)
        if row["encoding"] == "learned":
            assert expected == kwargs["max_len"] * model["d_model"]  # L·d, as the seed says
        if row["encoding"] == "t5":
            assert expected == kwargs["num_buckets"] * model["n_heads"]  # B·h, not O(L)
        assert metrics["positional_parameters"] == expected, (row["task"], row["encoding"])
        assert metrics["fixed_constants"] == (model["n_heads"] if row["encoding"] == "alibi" else 0)
        assert metrics["model_parameters"] > metrics["positional_parameters"]


def test_t5_far_buckets_lie_within_the_training_sequence(smoke_db):
    t5 = [r for r in _done(smoke_db) if r["encoding"] == "t5"]
    assert {r["task"] for r in t5} == set(TASKS)
    for row in t5:
        kwargs = row["config"]["encoding_kwargs"]
        sequence = make_task_shape(row["task"], row["config"]["train_length"])
        # the exact buckets: half of them, or half of each direction's half for a bidirectional model
        exact = kwargs["num_buckets"] // (4 if kwargs["bidirectional"] else 2)
        assert exact < kwargs["max_distance"] <= sequence


def test_every_encoding_trained_through_sdpa_the_fastest_correct_cpu_path(smoke_db):
    for row in _done(smoke_db):
        assert row["config"]["train_backend"] == row["timings"]["train_backend"] == "sdpa"


def test_rerun_trains_nothing_and_changes_no_record(smoke_db, capsys):
    with Records(smoke_db, readonly=True) as records:
        before = records.rows()
    assert lab("run", "--preset", "smoke", "--db", str(smoke_db), "--threads", "1", "--no-progress") == 0
    planned = sum(row["status"] == "done" for row in before)
    assert f"0 run(s) trained, {planned} already recorded, {planned} planned" in capsys.readouterr().out
    with Records(smoke_db, readonly=True) as records:
        assert records.rows() == before


def test_report_tables_show_the_recorded_values(smoke_db):
    markdown = comparison_markdown(smoke_db)
    done = _done(smoke_db)
    lm = {r["encoding"]: r for r in done if r["task"] == "lm"}
    bits = _table_rows(markdown, "Encoding")  # the language-modelling table
    comparison = _table_rows(markdown, "Method")
    for encoding, row in lm.items():
        evaluation, length_l = row["metrics"]["eval"], row["config"]["train_length"]
        for column, n in enumerate(row["config"]["eval_lengths"]):
            entry = evaluation[str(n)]
            shown = f"{entry['bpb']:.3f}" if entry["status"] == "ok" else "cannot run past L"
            assert bits[encoding][column] == shown, (encoding, n)
        at_l, at_4l = evaluation[str(length_l)], evaluation[str(4 * length_l)]
        if at_4l["status"] == "ok":
            ratio = at_4l["bpb"] / at_l["bpb"]
            assert comparison[encoding][3].startswith(f"{ratio:.3f} {grade(ratio)}")
        else:
            assert comparison[encoding][3].startswith("cannot run past L")
    copy = {r["encoding"]: r for r in done if r["task"] == "copy"}
    for encoding, row in copy.items():
        entry = row["metrics"]["eval"][str(2 * row["config"]["train_length"])]
        shown = f"{entry['exact_match']:.2f}" if entry["status"] == "ok" else "cannot run"
        assert comparison[encoding][4] == shown


def test_report_ranks_every_encoding_run_on_the_algorithmic_tasks(smoke_db):
    ranked = _table_rows(comparison_markdown(smoke_db), "Encoding | MRR (all encodings)")
    assert set(ranked) == {r["encoding"] for r in _done(smoke_db) if r["task"] in ALGORITHMIC_TASKS}
    for encoding, (measured, on_learned, among_five, published) in ranked.items():
        assert 0 < float(measured) <= 1
        assert on_learned == "—" or 0 < float(on_learned) <= 1
        assert (among_five == "—") == (published == "—") == (encoding not in PUBLISHED_MRR)
        assert published in ("—", f"{PUBLISHED_MRR.get(encoding, 0):.2f}")


def test_report_is_written_and_printed_as_made(smoke_db, tmp_path, capsys):
    markdown = comparison_markdown(smoke_db)
    with_plot = markdown + (
        "\n![bits per byte against position](lab_bits_per_position.png)\n"
        "\n![exact match against length per task](lab_exact_match.png)\n"
        "\n![patch accuracy against grid side](lab_grid_accuracy.png)\n"
        "\n![accuracy at each answer position at L per task](lab_answer_positions.png)\n"
    )
    assert markdown.endswith("\n") and not markdown.endswith("\n\n")
    assert write_report(smoke_db, tmp_path) == with_plot
    assert (tmp_path / "lab.md").read_text() == with_plot
    assert (tmp_path / "lab_bits_per_position.png").stat().st_size > 0
    drawn = {line.get_gid() for line in bits_per_position_figure(smoke_db).axes[0].get_lines()}
    assert drawn >= {f"encoding-{r['encoding']}" for r in _done(smoke_db) if r["task"] == "lm"}
    assert lab("report", "--db", str(smoke_db), "--out", str(tmp_path / "cli")) == 0
    assert capsys.readouterr().out == with_plot + "\n"
    assert (tmp_path / "cli" / "lab.md").read_text() == with_plot


def test_accuracy_figures_draw_each_task_and_encoding_at_its_recorded_means(smoke_db):
    figures = {stem: figure for stem, _, figure in lab_figures(smoke_db)}
    assert {"bits-per-position", "exact-match", "grid-accuracy"} <= set(figures)
    for stem, tasks, metric in (
        ("exact-match", ALGORITHMIC_TASKS, "exact_match"),
        ("grid-accuracy", ("grid",), "token_accuracy"),
    ):
        lines = {
            line.get_gid(): line for axes in figures[stem].axes for line in axes.get_lines() if line.get_gid()
        }
        for row in _done(smoke_db):
            if row["task"] not in tasks:
                continue
            line = lines[f"{row['task']}-{row['encoding']}"]  # one seed in smoke: the mean is the run's value
            measured = {int(n): e[metric] for n, e in row["metrics"]["eval"].items() if e["status"] == "ok"}
            assert dict(zip(line.get_xdata(), line.get_ydata(), strict=True)) == pytest.approx(measured)


def test_the_answer_position_figure_draws_each_runs_accuracy_at_every_answer_token_at_l(smoke_db):
    figure = {stem: figure for stem, _, figure in lab_figures(smoke_db)}["answer-positions"]
    lines = {line.get_gid(): line for axes in figure.axes for line in axes.get_lines() if line.get_gid()}
    drawn = 0
    for row in _done(smoke_db):
        if row["task"] not in ALGORITHMIC_TASKS:
            continue
        at_l = row["metrics"]["eval"][str(row["config"]["train_length"])]
        if at_l["status"] != "ok":
            continue
        line = lines[f"{row['task']}-{row['encoding']}"]  # one seed in smoke: the mean is the run's value
        assert list(line.get_xdata()) == list(range(1, len(at_l["position_accuracy"]) + 1))
        assert list(line.get_ydata()) == pytest.approx(at_l["position_accuracy"])
        drawn += 1
    assert drawn == len(lines)


def test_records_made_before_the_answer_positions_were_kept_draw_no_answer_position_figure():
    stems = [
        stem for stem, _, _ in lab_figures(Path(__file__).parents[2] / "docs" / "lab" / "gpu-records.sqlite")
    ]
    assert "exact-match" in stems and "answer-positions" not in stems


def test_the_grid_table_shows_each_encodings_patch_accuracy_per_side(smoke_db):
    markdown = comparison_markdown(smoke_db)
    assert "Grid task: resolution generalisation" in markdown
    table = _table_rows(markdown, "Encoding | 3×3 (trained) | 6×6")
    grid_rows = [row for row in _done(smoke_db) if row["task"] == "grid"]
    assert set(table) == {row["encoding"] for row in grid_rows}
    for row in grid_rows:
        accuracy = row["metrics"]["eval"]["6"]["token_accuracy"]
        assert table[row["encoding"]][1].startswith(f"{accuracy:.2f}")
