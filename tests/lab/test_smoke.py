"""The smoke preset end to end: every task and encoding trained, recorded, skipped on re-run, reported."""

from __future__ import annotations

import time

from posenc.encodings import available
from posenc.lab.presets import NOT_APPLICABLE, lab_encodings
from posenc.lab.records import Records
from posenc.lab.report import bits_per_position_figure, comparison_markdown, write_report
from tests.lab.helpers import lab


def test_smoke_preset_records_every_task_and_encoding(smoke_db):
    with Records(smoke_db, readonly=True) as records:
        done = records.rows(status="done")
        skipped = records.rows(status="not applicable")
    assert {(r["task"], r["encoding"]) for r in done} == {
        (task, encoding) for task in ("lm", "copy", "reverse", "addition") for encoding in lab_encodings()
    }
    assert set(lab_encodings()) | set(NOT_APPLICABLE) == set(available())
    assert {r["encoding"] for r in skipped} == set(NOT_APPLICABLE)
    assert all(r["reason"] for r in skipped)
    for row in done:
        assert row["timings"]["seconds_per_step"] > 0
        assert row["versions"]["torch"] and row["versions"]["python"] and row["versions"]["posenc"]
        assert len(row["config_hash"]) == 64
        assert (row["corpus"] is not None) == (row["task"] == "lm")


def test_rerun_skips_finished_runs(smoke_db, capsys):
    started = time.perf_counter()
    assert lab("run", "--preset", "smoke", "--db", str(smoke_db), "--threads", "1", "--no-progress") == 0
    assert "0 run(s) trained" in capsys.readouterr().out
    with Records(smoke_db, readonly=True) as records:
        rows = records.rows()
    assert len(rows) == len({r["config_hash"] for r in rows})
    assert time.perf_counter() - started < 20


def test_learned_is_reported_as_cannot_run_past_l(smoke_db):
    with Records(smoke_db, readonly=True) as records:
        learned = [r for r in records.rows(status="done") if r["encoding"] == "learned"]
    for row in learned:
        limit = row["config"]["train_length"]
        for length, entry in row["metrics"]["eval"].items():
            expected = "ok" if int(length) <= limit else "cannot run past L"
            assert entry["status"] == expected, (row["task"], length)


def test_t5_bucket_settings_are_recorded(smoke_db):
    with Records(smoke_db, readonly=True) as records:
        t5 = [r for r in records.rows(status="done") if r["encoding"] == "t5"]
    assert t5 and all({"num_buckets", "max_distance"} <= set(r["config"]["encoding_kwargs"]) for r in t5)


def test_bias_encodings_train_through_flex(smoke_db):
    with Records(smoke_db, readonly=True) as records:
        rows = records.rows(status="done")
    for row in rows:
        expected = "flex" if row["encoding"] in ("alibi", "t5") else "sdpa"
        assert row["config"]["train_backend"] == expected
        assert row["timings"]["train_backend"] == expected


def test_report_writes_the_table_and_the_plot(smoke_db, tmp_path, capsys):
    markdown = comparison_markdown(smoke_db)
    assert markdown is not None
    for claim in ("Moderate", "Excellent", "L × d", "O(L)", "h slopes", "cannot run past L"):
        assert claim in markdown
    assert bits_per_position_figure(smoke_db) is not None
    assert (
        write_report(smoke_db, tmp_path)
        == markdown + "\n![bits per byte against position](lab_bits_per_position.png)\n"
    )
    assert (tmp_path / "lab_bits_per_position.png").stat().st_size > 0
    assert lab("report", "--db", str(smoke_db), "--out", str(tmp_path / "cli")) == 0
    assert "Seed 004's table, measured" in capsys.readouterr().out
    assert (tmp_path / "cli" / "lab.md").is_file()
