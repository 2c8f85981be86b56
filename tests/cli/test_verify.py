"""`posenc verify`: seed 002's printout, its JSON, the flat-line plot, and refusals of bad options."""

from __future__ import annotations

import json
import re

import pytest

import posenc


def test_verify_prints_each_pair_as_seed_002_does(cli):
    run = cli("verify")
    assert run.code == 0
    assert "Distance 1 (14 pairs):" in run.out and "Distance 13 (2 pairs):" in run.out
    assert "  (0, 1) -> 3.5353" in run.out and "  (13, 14) -> 3.5353" in run.out
    assert "Distance 2 " not in run.out  # default distances are the odd ones
    assert "closed form Σ_k cos(13·ω_k) = 3.166423004980" in run.out
    assert "holds" in run.out


def test_verify_output_keeps_the_lines_the_readme_shows(cli):
    lines = cli("verify").out.splitlines()
    assert lines[1:3] == ["Distance 1 (14 pairs):", "  (0, 1) -> 3.5353"]
    closed_form = r"  closed form Σ_k cos\(1·ω_k\) = 3\.5352559715\d\d   max deviation \d\.\d{3}e-\d\d"
    assert any(re.fullmatch(closed_form, line) for line in lines)
    assert lines[-1].startswith("holds: max deviation ") and lines[-1].endswith("(tolerance 1e-12, float64)")


def test_verify_json_reports_the_closed_form_and_deviation(cli):
    run = cli("verify", "--json", "--d-model", "16", "--seq-len", "40", "--distances", "2,30")
    result = json.loads(run.out)
    assert run.code == 0 and result["holds"] and result["max_deviation"] <= 1e-12
    assert [row["distance"] for row in result["distances"]] == [2, 30]
    assert [row["pairs"] for row in result["distances"]] == [38, 10]
    assert len(result["distances"][1]["values"]) == 10


def test_verify_float32_agrees_to_1e_5(cli):
    run = cli(
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
    result = json.loads(run.out)
    assert run.code == 0 and result["tolerance"] == 1e-5 and result["max_deviation"] <= 1e-5


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_verify_judges_the_deviation_relative_to_the_norm_so_a_wide_correct_table_holds(cli, dtype):
    # an absolute 1e-12 failed a correct float64 table at d_model 16384: PE·PE ≈ 8192, one ulp 1.8e-12
    run = cli("verify", "--json", "--d-model", "16384", "--seq-len", "64", "--dtype", dtype)
    result = json.loads(run.out)
    assert result["scale"] == pytest.approx(8192)  # ‖PE‖² = d_model/2
    assert result["relative_deviation"] == pytest.approx(result["max_deviation"] / 8192)
    assert run.code == 0 and result["holds"] is True, result["relative_deviation"]


def test_verify_exits_1_when_the_deviation_exceeds_the_tolerance(cli):
    run = cli("verify", "--dtype", "float32", "--tolerance", "1e-12", "--no-pairs")
    assert run.code == 1 and "fails" in run.out


def test_verify_accepts_a_zero_tolerance(cli):
    run = cli("verify", "--json", "--tolerance", "0")
    assert run.code in (0, 1) and json.loads(run.out)["tolerance"] == 0.0


def test_verify_writes_the_flat_line_png(cli, tmp_path):
    out_file = tmp_path / "figures" / "flat.png"
    run = cli("verify", "--out", str(out_file))
    assert run.code == 0 and f"written to {out_file}" in run.out.replace("\n", "")
    assert out_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verify_out_without_a_suffix_writes_png_and_prints_the_real_path(cli, tmp_path):
    run = cli("verify", "--no-pairs", "--out", str(tmp_path / "myplot"))
    written = tmp_path / "myplot.png"
    assert run.code == 0
    assert run.out.splitlines()[-1] == f"flat-line plot written to {written}"
    assert [path.name for path in tmp_path.iterdir()] == ["myplot.png"]
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verify_out_writes_svg_when_asked(cli, tmp_path):
    run = cli("verify", "--no-pairs", "--out", str(tmp_path / "flat.svg"))
    assert run.code == 0 and (tmp_path / "flat.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "--d-model", "7"], "d_model must be even, got 7"),
        (["verify", "--d-model", "-2"], "d_model must be positive, got -2"),
        (["verify", "--d-model", "0"], "d_model must be positive, got 0"),
        (["verify", "--seq-len", "0"], "seq_len must be at least 2 to have a distance, got 0"),
        (["verify", "--seq-len", "1"], "seq_len must be at least 2 to have a distance, got 1"),
        (["verify", "--seq-len", "-3"], "seq_len must be at least 2 to have a distance, got -3"),
        (["verify", "--base", "-2"], "base must be positive and finite, got -2.0"),
        (["verify", "--distances", "1,40"], "distance must be in 0 … 14 for a table of 15 positions, got 40"),
        (["verify", "--all", "--length", "0"], "--length: must be a positive integer, got 0"),
        (["verify", "--all", "--length", "-1"], "--length: must be a positive integer, got -1"),
        (["verify", "--d-model", "eight"], "--d-model: invalid int value: 'eight'"),
    ],
)
def test_bad_input_exits_2_naming_the_value(cli, argv, message):
    cli(*argv).assert_refused(message)


@pytest.mark.parametrize(
    "argv",
    [["verify", "--seq-len", "99999999999"], ["verify", "--all", "--length", "99999999999"]],
)
def test_more_positions_than_have_exact_angles_are_refused_before_anything_is_measured(
    cli, monkeypatch, argv
):
    import posenc.analysis

    def measured(*args, **kwargs):
        raise AssertionError("measured before the length was checked")

    monkeypatch.setattr(posenc.analysis, "dot_by_distance", measured)
    monkeypatch.setattr(posenc.analysis, "properties", measured)
    cli(*argv).assert_refused(f"argument {argv[-2]}", "at most 2^27 = 134217728", "got 99999999999")


def test_verify_all_refuses_out_naming_both_options(cli, monkeypatch, tmp_path):
    # --out is the seed 002 check's flat-line plot; --all draws none, so --out would be ignored silently
    import posenc.analysis

    def measured(*args, **kwargs):
        raise AssertionError("measured before the options were checked")

    monkeypatch.setattr(posenc.analysis, "properties", measured)
    cli("verify", "--all", "--out", "/proc/x.png").assert_refused("--out", "--all")
    cli("verify", "--all", "--out", str(tmp_path / "flat.png")).assert_refused("--out", "--all")
    assert list(tmp_path.iterdir()) == []


def test_verify_json_with_out_says_where_it_wrote_on_stderr_and_keeps_stdout_json(cli, tmp_path):
    run = cli("verify", "--json", "--out", str(tmp_path / "jp"))
    written = tmp_path / "jp.png"
    assert run.code == 0 and json.loads(run.out)["holds"] is True
    assert run.err.splitlines() == [f"flat-line plot written to {written}"]
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "tight"])
def test_a_tolerance_that_is_not_a_finite_number_at_least_0_is_refused_not_a_failed_claim(cli, value):
    # exit 1 means "the claim fails"; a tolerance that cannot be met (or compared) is a usage error
    cli("verify", f"--tolerance={value}").assert_refused("--tolerance", repr(value))


def test_malformed_distances_are_refused_by_the_parser(cli):
    cli("verify", "--distances", "1,x").assert_refused(
        "distances must be comma-separated integers, got '1,x'"
    )


def test_out_under_a_file_is_refused_before_anything_is_measured(cli, tmp_path, monkeypatch):
    import posenc.analysis

    def measured(*args, **kwargs):
        raise AssertionError("measured before the output path was checked")

    monkeypatch.setattr(posenc.analysis, "dot_by_distance", measured)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    run = cli("verify", "--out", str(blocker / "flat.png"))
    run.assert_refused("--out", str(blocker / "flat.png"), "is a file, not a folder")


def test_out_whose_folder_cannot_be_made_is_refused(cli):
    cli("verify", "--out", "/proc/posenc-no-such-folder/flat.png").assert_refused(
        "--out", "/proc/posenc-no-such-folder/flat.png", "cannot make folder"
    )


def test_out_that_is_a_folder_or_an_unknown_format_is_refused(cli, tmp_path):
    cli("verify", "--out", str(tmp_path)).assert_refused("--out", str(tmp_path), "is a folder")
    cli("verify", "--out", str(tmp_path / "flat.jpg")).assert_refused(
        "--out", "flat.jpg", "'.jpg'", ".png, .svg, .pdf"
    )
    assert list(tmp_path.iterdir()) == []


def test_verify_all_prints_the_encoding_by_property_table(cli):
    run = cli("verify", "--all", "--json")
    result = json.loads(run.out)
    assert run.code == 0
    assert result["rope"]["relative"]["holds"] is True
    assert result["sinusoidal"]["relative"]["category"] == "implicit"
    assert result["learned"]["translation_invariant"]["holds"] is False
    run = cli("verify", "--all")
    assert run.code == 0
    assert "shift-invariant" in run.out and "explicit" in run.out and "fails 0.613" in run.out
    assert all(name in run.out for name in posenc.available())  # one row per encoding, none cut short
    assert "holds / fails: the measured number" in run.out


def test_verify_all_measures_every_other_encoding_when_one_cannot_be_built(cli, monkeypatch):
    # an encoding whose specimen raised used to stop `verify --all` with a traceback for all of them
    import posenc
    from posenc.encodings import ENCODINGS

    class Unbuildable(posenc.PositionalEncoding):
        kind = "bias"

        def __init__(self) -> None:
            raise ValueError("this encoding cannot be built")

    monkeypatch.setitem(ENCODINGS, "unbuildable", Unbuildable)
    run = cli("verify", "--all", "--json")
    result = json.loads(run.out)
    assert run.code == 1
    assert "claim(s) could not be measured: unbuildable bounded" in run.err
    assert result["unbuildable"]["relative"]["error"] == "ValueError: this encoding cannot be built"
    assert result["rope"]["relative"]["holds"] is True


def test_verify_names_measure_only_those_encodings_in_the_order_given(cli):
    result = json.loads(cli("verify", "nope", "alibi", "--json").out)
    assert list(result) == ["nope", "alibi"] and result["alibi"]["relative"]["holds"] is True
    run = cli("verify", "alibi", "nope")
    assert run.code == 0 and "alibi" in run.out and "nope" in run.out and "sinusoidal" not in run.out
    assert "Every claim on alibi, nope" in run.out


def test_verify_an_unknown_name_is_refused_with_the_valid_names_before_anything_is_measured(cli, monkeypatch):
    import posenc.analysis

    def measured(*args, **kwargs):
        raise AssertionError("measured before the names were checked")

    monkeypatch.setattr(posenc.analysis, "properties", measured)
    cli("verify", "alibi", "ropee").assert_refused(
        "unknown encoding 'ropee'", f"valid: {', '.join(posenc.available())}"
    )


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["verify", "rope", "--all"], ["'rope'", "--all"]),
        (["verify", "rope", "--out", "flat.png"], ["--out 'flat.png'", "rope"]),
        (["verify", "rope", "--d-model", "16"], ["--d-model", "rope"]),
    ],
)
def test_verify_names_refuse_the_options_they_would_ignore(cli, argv, fragments):
    cli(*argv).assert_refused(*fragments)


def test_verify_d_model_wider_than_any_model_is_refused_at_once_naming_it(cli, monkeypatch):
    # it used to build a 15 × 10^8 table for minutes; --seq-len and --length were capped already
    import posenc.analysis
    import posenc.functional

    def measured(*args, **kwargs):
        raise AssertionError("measured before --d-model was checked")

    monkeypatch.setattr(posenc.analysis, "dot_by_distance", measured)
    monkeypatch.setattr(posenc.functional, "sinusoidal_table", measured)
    cli("verify", "--d-model", "100000000").assert_refused("--d-model", "at most 65536", "got 100000000")


def test_verify_out_empty_is_refused_naming_the_empty_value_not_the_current_folder(cli):
    run = cli("verify", "--out", "")
    run.assert_refused("--out", "must name a file, got ''")
    assert "'.'" not in run.err


def test_verify_distances_with_an_empty_item_are_refused_not_read_as_fewer(cli):
    cli("verify", "--distances", "1,,3").assert_refused("--distances", "got '1,,3'")


def test_verify_help_says_what_seed_002_is(cli):
    out = cli("verify", "--help").out
    assert "seed 002" in out and "Dot Products & Translation Invariance" in " ".join(out.split())
