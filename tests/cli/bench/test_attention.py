"""`posenc bench attention`: its own options, and tables of measured times and ratios (no verdicts)."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.bench import attention

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")


def test_bench_attention_command_prints_tables_and_writes_json(
    cli, attention_result, tmp_path, monkeypatch, wide
):
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return attention_result

    monkeypatch.setattr(attention, "run", fake_run)
    out = tmp_path / "attention.json"
    argv = ["bench", "attention", "--seq-lens", "64", "--rounds", "1", "--no-compile", "--no-memory"]
    run = cli(*argv, "--sweep", "none", "--json", str(out))
    assert run.code == 0
    assert seen == {
        "seq_lens": (64,),
        "rounds": 1,
        "compile": False,
        "memory": False,
        "sweep_sizes": (),
        "only": None,
    }
    assert json.loads(out.read_text())["cases"][0]["seq_len"] == 64
    assert "SDPA, no bias (is_causal)" in run.out and "posenc alibi_attention" in run.out
    assert "× SDPA" in run.out and "ALiBi windows per head at s=64" in run.out
    assert "goal" not in run.out and " met" not in run.out


def test_bad_lengths_rounds_and_json_are_refused_before_any_timing(cli, monkeypatch):
    def timed(**kwargs):
        raise AssertionError("timed before the options were checked")

    monkeypatch.setattr(attention, "run", timed)
    cli("bench", "attention", "--seq-lens", "64,0").assert_refused("--seq-lens", "lengths must be positive")
    cli("bench", "attention", "--rounds", "-1").assert_refused("--rounds", "got -1")
    cli("bench", "attention", "--json", "/proc/a.json").assert_refused("--json", "/proc/a.json")
    cli("bench", "attention", "--only", "(").assert_refused("--only", "not a regular expression")
    cli("bench", "attention", "--only", "nosuch").assert_refused("--only", "matches no candidate")


@pytest.mark.parametrize("value", ["", ",", "none"])
def test_seq_lens_that_name_no_length_are_refused(cli, monkeypatch, value):
    # 'none' leaves out the --sweep; --seq-lens are the lengths measured, and none measures nothing
    def timed(**kwargs):
        raise AssertionError("timed with no lengths")

    monkeypatch.setattr(attention, "run", timed)
    cli("bench", "attention", "--seq-lens", value, "--sweep", "none", "--no-memory").assert_refused(
        "--seq-lens", "at least one length", repr(value)
    )


@pytest.mark.parametrize("option", [["--length", "8"], ["--d-model", "8"]])
def test_options_of_other_benchmarks_are_not_accepted(cli, option):
    cli("bench", "attention", *option).assert_refused("unrecognized arguments", option[0])


@no_cuda
def test_bench_attention_on_cuda_without_a_gpu_exits_2_with_the_reason(cli):
    cli("bench", "attention", "--device", "cuda").assert_refused(
        "posenc bench: error: --device cuda needs a CUDA GPU"
    )


def test_bench_attention_cuda_refuses_the_cpu_only_options(cli):
    cli("bench", "attention", "--device", "cuda", "--sweep", "none").assert_refused(
        "--sweep, --no-memory and --only apply to --device cpu"
    )


def test_bench_attention_cuda_command_prints_tables_and_writes_json(
    cli, attention_gpu_result, tmp_path, monkeypatch, wide
):
    seen = {}

    def fake_run_cuda(**kwargs):
        seen.update(kwargs)
        return attention_gpu_result

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(attention, "run_cuda", fake_run_cuda)
    out = tmp_path / "attention_cuda.json"
    run = cli("bench", "attention", "--device", "cuda", "--seq-lens", "32,64", "--json", str(out))
    assert run.code == 0 and seen == {"seq_lens": (32, 64), "rounds": 10, "compile": True}
    assert json.loads(out.read_text())["config"]["heads"] == 2
    assert "flex_attention + ALiBi score_mod" in run.out and "checked against float64 at s=64" in run.out
    assert "of unbiased flex" in run.out and "s = 32" in run.out
    assert "goal" not in run.out and " met" not in run.out
