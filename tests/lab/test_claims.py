"""A run is claimed in the records before it is trained: two sweeps sharing a database never train one
run twice, and a claim left by a process that has ended does not block the run."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from posenc.lab.presets import PRESETS, run_config
from posenc.lab.records import RECORDED, Records, _started
from tests.lab.helpers import exit_code, record_algorithmic_run

RUN = ("run", "--preset", "smoke", "--task", "copy", "--encodings", "nope", "--threads", "1", "--no-progress")
CONFIG = run_config(PRESETS["smoke"], "copy", "nope", 0)


def _fake_execute(config, preset, records, *args, **kwargs):
    """Record ``config`` as trained without training it (the sweep's ``execute``), after a pause that
    holds its claim while the other process asks for it."""
    with open(records.path.parent / "trained", "a") as log:
        log.write(f"{config.label}\n")
    time.sleep(1.0)
    record_algorithmic_run(records, preset, config, dict.fromkeys(config.eval_lengths, 1.0))


def _claim_row(db, pid: int, host: str, started: str) -> None:
    """Leave a claim on CONFIG as process ``pid`` of ``host`` would."""
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO claims VALUES (?, ?, ?, ?, ?)", (CONFIG.config_hash, pid, host, started, "then")
        )
    connection.close()


def _sweep(db, barrier, out) -> None:
    """One ``posenc lab run`` of CONFIG, started with the other at the barrier; its output to ``out``."""
    barrier.wait(timeout=30)
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        code = exit_code(*RUN, "--db", str(db))
    out.put(stream.getvalue())
    sys.exit(code)


@pytest.mark.skipif(sys.platform != "linux", reason="forks this process")
def test_two_concurrent_sweeps_of_one_run_train_it_once(tmp_path, monkeypatch):
    # both found it unrecorded and both trained it
    import posenc.lab.sweep

    monkeypatch.setattr(posenc.lab.sweep, "execute", _fake_execute)
    db = tmp_path / "r.sqlite"
    fork = multiprocessing.get_context("fork")  # the children inherit the patched trainer
    barrier, out = fork.Barrier(2), fork.Queue()
    processes = [fork.Process(target=_sweep, args=(db, barrier, out)) for _ in range(2)]
    for process in processes:
        process.start()
    outputs = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert (tmp_path / "trained").read_text() == "copy nope seed 0\n"
    trained = [text for text in outputs if "1 run(s) trained" in text]
    skipped = [text for text in outputs if "0 run(s) trained" in text]
    assert len(trained) == len(skipped) == 1, outputs
    [text] = skipped  # said so: it was skipped, or found recorded once the other finished
    assert "copy nope seed 0: skipped, being trained by pid " in text or "1 already recorded" in text
    with Records(db, readonly=True) as records:
        assert len(records.rows(status="done")) == 1


def test_a_run_claimed_by_a_live_process_is_skipped_saying_so_and_taken_once_it_has_ended(
    tmp_path, capsys, monkeypatch
):
    import posenc.lab.sweep

    monkeypatch.setattr(posenc.lab.sweep, "execute", _fake_execute)
    db = tmp_path / "r.sqlite"
    Records(db).close()
    other = subprocess.Popen(["sleep", "30"])
    try:
        _claim_row(db, other.pid, socket.gethostname(), _started(other.pid))
        assert exit_code(*RUN, "--db", str(db)) == 0
        captured = capsys.readouterr()
        assert f"copy nope seed 0: skipped, being trained by pid {other.pid} on " in captured.err
        assert "0 run(s) trained, 0 already recorded, 1 skipped (being trained by another process)" in (
            captured.out
        )
        assert not (tmp_path / "trained").exists()
    finally:
        other.kill()
        other.wait()
    assert exit_code(*RUN, "--db", str(db)) == 0  # its process has ended (a crash): the claim is stale
    assert "1 run(s) trained" in capsys.readouterr().out
    assert (tmp_path / "trained").read_text() == "copy nope seed 0\n"


def test_a_claim_is_refused_to_another_process_while_its_holder_lives_until_released(tmp_path):
    db = tmp_path / "r.sqlite"
    with Records(db) as records:
        assert records.claim(CONFIG.config_hash) is None
        assert records.claim(CONFIG.config_hash) is None  # this process holds it already
    ask = f"from posenc.lab.records import Records; print(Records({str(db)!r}).claim({CONFIG.config_hash!r}))"
    asked = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, check=True)
    assert asked.stdout.startswith(f"being trained by pid {os.getpid()} on {socket.gethostname()} since ")
    with Records(db) as records:
        records.release(CONFIG.config_hash)
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)
    connection.close()


def test_a_claim_of_an_ended_process_is_stale_and_one_of_another_host_is_kept(tmp_path):
    db = tmp_path / "r.sqlite"
    Records(db).close()
    ended = subprocess.Popen(["true"])
    ended.wait()
    _claim_row(db, ended.pid, socket.gethostname(), "1")
    with Records(db) as records:
        assert records.claim(CONFIG.config_hash) is None
        records.release(CONFIG.config_hash)
    _claim_row(db, 1, "another-host", "")
    with Records(db) as records:
        assert records.claim(CONFIG.config_hash) == "being trained by pid 1 on another-host since then"


def test_a_recorded_run_is_not_claimed_and_its_record_ends_the_claim(tmp_path):
    db = tmp_path / "r.sqlite"
    with Records(db) as records:
        assert records.claim(CONFIG.config_hash) is None
        record_algorithmic_run(records, "smoke", CONFIG, dict.fromkeys(CONFIG.eval_lengths, 1.0))
        assert records.claim(CONFIG.config_hash) == RECORDED
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)
    connection.close()
