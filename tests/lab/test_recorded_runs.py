"""The recorded runs in docs/lab/ are what docs/LAB.md shows: every table line and note the report
prints from those records appears in the document, so a change to the report or to the records that
alters them shows here; and every recorded run is a run of its preset as committed, so a changed
preset cannot leave the document describing runs it would no longer make."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.lab.extension import plan_runs
from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.report import comparison_markdown

DOCS = Path(__file__).parents[2] / "docs"

#: (records file, preset) of every recorded table in docs/LAB.md
RECORDED = [
    ("cpu-records.sqlite", "cpu"),  # `make lab`, and runs added after it
    ("cpu-records.sqlite", "grid"),  # `make lab-grid`
    ("cpu-summation-records.sqlite", "cpu"),  # the cpu preset's summation (trained on 1 … 8 symbols)
    ("gpu-records.sqlite", "gpu"),  # `make lab-gpu` on one H200, stopped by the time limit
    ("extension-records.sqlite", "extension"),  # `make lab-extension`
    ("stacks-records.sqlite", "stacks"),  # the stacks study: lm, copy and reverse, 3 seeds
    ("addition-records.sqlite", "addition"),  # the addition study: five layouts, 3 seeds
    ("grid-vision-records.sqlite", "grid"),  # the grid study's vision rows: DINOv3 (± augmentation), STRING …
]
#: (records file, preset, runs done, runs with another lr or warm-up than the preset's) of the presets
#: planned one (task, encoding, seed) at a time
SWEEPS = [
    # `make lab` (60 runs, 3 scaled by √d), 54 added after it at the preset's budget; 15 reverse runs with
    # --warmup 100 and the preset before's 45 algorithmic runs (--lr 0.001 --warmup 100)
    ("cpu-records.sqlite", "cpu", 177, 60),
    ("cpu-records.sqlite", "grid", 21, 0),  # 18 runs and 3 scaled 2-D sin-cos runs
    ("cpu-summation-records.sqlite", "cpu", 15, 0),  # the five encodings, 3 seeds
    ("gpu-records.sqlite", "gpu", 60, 0),  # 60 of 75: summation (on 1 … 8 symbols) not run
    ("stacks-records.sqlite", "stacks", 63, 0),  # lm, copy and reverse: 7 × 3 seeds each
    ("addition-records.sqlite", "addition", 57, 0),  # 5 encodings × 3 token layouts + 2 × 2 id layouts, 3 seeds
]


def _table_and_note_lines(markdown: str) -> list[str]:
    return [
        line
        for line in markdown.splitlines()
        if line.startswith(("| ", "Learned at L", "Tasks most", "Not recorded"))
    ]


@pytest.mark.parametrize(("records", "preset"), RECORDED, ids=[p for _, p in RECORDED])
def test_the_tables_in_the_document_are_those_of_its_records(records, preset):
    shown = (DOCS / "LAB.md").read_text()
    lines = _table_and_note_lines(comparison_markdown(DOCS / "lab" / records, preset=preset))
    assert len(lines) > 10
    assert [line for line in lines if line not in shown] == []


@pytest.mark.parametrize(("records", "preset", "count", "overridden"), SWEEPS, ids=[s[1] for s in SWEEPS])
def test_the_recorded_runs_are_runs_of_the_preset_as_committed(records, preset, count, overridden):
    with Records(DOCS / "lab" / records, readonly=True) as stored:
        rows = [row for row in stored.rows(status="done") if row["preset"] == preset]
    assert len(rows) == count
    budgets = [(row["config"]["train"]["lr"], row["config"]["train"]["warmup"]) for row in rows]
    presets = [
        (PRESETS[preset].tasks[row["task"]].train.lr, PRESETS[preset].tasks[row["task"]].train.warmup)
        for row in rows
    ]
    assert sum(budget != own for budget, own in zip(budgets, presets, strict=True)) == overridden
    for row in rows:
        config = row["config"]
        expected = run_config(
            PRESETS[preset],
            row["task"],
            row["encoding"],
            row["seed"],
            corpus_sha256=config["corpus_sha256"],
            overrides=Overrides(
                random_positions=config["random_positions"],
                embedding_scale=config["model"]["embedding_scale"],
                lr=config["train"]["lr"],
                warmup=config["train"]["warmup"],
            ),
        )
        assert row["config_hash"] == expected.config_hash, (row["task"], row["encoding"], row["seed"])


def test_the_recorded_extension_study_is_the_study_the_preset_plans():
    preset = PRESETS["extension"]
    with Records(DOCS / "lab" / "extension-records.sqlite", readonly=True) as stored:
        rows = stored.rows(status="done")
    [corpus] = {row["config"]["corpus_sha256"] for row in rows}
    runs, _ = plan_runs(preset, list(preset.seeds), corpus)
    # every planned run is recorded, the position remaps included (Self-Extend, ReRoPE, PoSE,
    # continuous: 18 per seed, added after the 138 others)
    assert sorted(row["config_hash"] for row in rows) == sorted(run.config_hash for run in runs)
    assert len(runs) == 192 and sum(run.position_remap is not None for run in runs) == 54


def test_the_cpu_runs_hold_the_accuracy_at_each_answer_position_that_the_document_reads():
    # docs/LAB.md, "Where the misses are": the 45 runs of the cpu preset's copy, reverse and sort, and
    # the 36 with randomized positions
    with Records(DOCS / "lab" / "cpu-records.sqlite", readonly=True) as stored:
        rows = [
            row
            for row in stored.rows(status="done")
            if "position_accuracy" in row["metrics"]["eval"].get("20", {})
        ]
    cpu = PRESETS["cpu"].tasks
    plain = [row for row in rows if row["config"]["random_positions"] is None]
    randomized = [row for row in rows if row["config"]["random_positions"] == 128]
    assert len(plain) == 45 and len(randomized) == 36 and len(rows) == 81
    assert {(row["task"], row["encoding"]) for row in plain} == {
        (task, encoding) for task in ("copy", "reverse", "sort") for encoding in cpu[task].encodings
    }
    for row in rows:
        assert row["config"]["train"]["lr"] == cpu[row["task"]].train.lr
        assert row["config"]["model"]["embedding_scale"] == 1.0
        for n, entry in row["metrics"]["eval"].items():
            accuracy = entry["position_accuracy"]
            assert len(accuracy) == int(n) + 1  # the symbols and EOS
            assert sum(accuracy) / len(accuracy) == pytest.approx(entry["token_accuracy"])
