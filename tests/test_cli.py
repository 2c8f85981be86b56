"""The posenc command, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from posenc.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_shows_each_encoding_its_kind_and_parameter_formula(capsys):
    code, out, _ = run(capsys, "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0
    assert rows["learned"]["kind"] == "additive" and rows["learned"]["parameters"] == "L·d"
    assert rows["sinusoidal"]["parameters"] == "0" and rows["nope"]["kind"] == "none"
    code, out, _ = run(capsys, "list")
    assert code == 0 and "learned" in out and "L·d" in out and "[max_len," in out  # markup escaped


def test_verify_prints_each_pair_as_seed_002_does(capsys):
    code, out, _ = run(capsys, "verify")
    assert code == 0
    assert "Distance 1 (14 pairs):" in out and "Distance 13 (2 pairs):" in out
    assert "  (0, 1) -> 3.5353" in out and "  (13, 14) -> 3.5353" in out
    assert "Distance 2 " not in out  # default distances are the odd ones
    assert "closed form Σ_k cos(13·ω_k) = 3.166423004980" in out
    assert "holds" in out


def test_verify_json_reports_the_closed_form_and_deviation(capsys):
    code, out, _ = run(
        capsys, "verify", "--json", "--d-model", "16", "--seq-len", "40", "--distances", "2,30"
    )
    result = json.loads(out)
    assert code == 0 and result["holds"] and result["max_deviation"] <= 1e-12
    assert [row["distance"] for row in result["distances"]] == [2, 30]
    assert [row["pairs"] for row in result["distances"]] == [38, 10]
    assert len(result["distances"][1]["values"]) == 10


def test_verify_float32_agrees_to_1e_5(capsys):
    code, out, _ = run(
        capsys,
        "verify",
        "--json",
        "--dtype",
        "float32",
        "--d-model",
        "512",
        "--seq-len",
        "4096",
        "--distances",
        "1,64,1024",
    )
    result = json.loads(out)
    assert code == 0 and result["tolerance"] == 1e-5 and result["max_deviation"] <= 1e-5


def test_verify_exits_1_when_the_deviation_exceeds_the_tolerance(capsys):
    code, out, _ = run(capsys, "verify", "--dtype", "float32", "--tolerance", "1e-12", "--no-pairs")
    assert code == 1 and "fails" in out


def test_verify_writes_the_flat_line_png(capsys, tmp_path):
    out_file = tmp_path / "figures" / "flat.png"
    code, out, _ = run(capsys, "verify", "--out", str(out_file))
    assert code == 0 and f"written to {out_file}" in out.replace("\n", "")
    assert out_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "--d-model", "7"], "d_model must be even, got 7"),
        (["verify", "--seq-len", "0"], "seq_len must be at least 2 to have a distance, got 0"),
        (["verify", "--seq-len", "1"], "seq_len must be at least 2 to have a distance, got 1"),
        (["verify", "--base", "-2"], "base must be positive and finite, got -2.0"),
        (["verify", "--distances", "1,40"], "distance must be in 0 … 14 for a table of 15 positions, got 40"),
    ],
)
def test_bad_input_exits_2_naming_the_value(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_malformed_distances_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", "--distances", "1,x"])
    assert exit_info.value.code == 2
    assert "distances must be comma-separated integers, got '1,x'" in capsys.readouterr().err


def test_the_installed_command_verifies_d_model_512_over_4096_positions():
    start = time.perf_counter()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "posenc",
            "verify",
            "--d-model",
            "512",
            "--seq-len",
            "4096",
            "--distances",
            "1,64,1024",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    assert completed.returncode == 0, completed.stderr
    assert "Distance 1024 (3072 pairs):" in completed.stdout and "holds" in completed.stdout
    assert elapsed < 20  # sanity bound only; the measured time is recorded in docs/BENCHMARKS.md


def test_verify_all_prints_the_encoding_by_property_table(capsys):
    code, out, _ = run(capsys, "verify", "--all", "--json")
    result = json.loads(out)
    assert code == 0
    assert result["rope"]["relative"]["holds"] is True
    assert result["sinusoidal"]["relative"]["category"] == "implicit"
    assert result["learned"]["translation_invariant"]["holds"] is False
    code, out, _ = run(capsys, "verify", "--all")
    assert code == 0
    assert "shift-invariant logits" in out and "explicit" in out and "fails 0.613" in out


def test_plot_writes_every_figure_of_an_encoding(capsys, tmp_path):
    from posenc.plots import gallery

    code, out, _ = run(capsys, "plot", "alibi", "--out", str(tmp_path))
    expected = {f"{spec.name}.png" for spec in gallery.figures("alibi")}
    assert code == 0
    assert {path.name for path in tmp_path.iterdir()} == expected
    assert len(out.splitlines()) == len(expected)


def test_plot_of_an_unknown_name_lists_the_valid_ones(capsys, tmp_path):
    code, _, err = run(capsys, "plot", "sinus", "--out", str(tmp_path))
    assert code == 2
    assert "unknown figure set 'sinus'; valid: all, alibi" in err
