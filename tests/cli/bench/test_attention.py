"""`posenc bench attention`: its own options, and tables of measured times and ratios (no verdicts)."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.bench import attention, attention_cuda

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
    argv = ["bench", "attention", "--seq-lens", "64", "--rounds", "1", "--no-memory"]
    run = cli(*argv, "--sweep", "none", "--json", str(out))
    assert run.code == 0
    assert seen == {
        "seq_lens": (64,),
        "rounds": 1,
        "memory": False,
        "sweep_sizes": (),
        "only": None,
    }
    assert json.loads(out.read_text())["cases"][0]["seq_len"] == 64
    assert "SDPA, no bias (is_causal)" in run.out and "posenc alibi_attention" in run.out
    assert "alibi on flex" in run.out and "fwd+bwd ms" in run.out and "× SDPA" in run.out
    assert "ALiBi windows per head" in run.out
    assert "goal" not in run.out and " met" not in run.out


def test_bad_lengths_rounds_and_json_are_refused_before_any_timing(cli, monkeypatch):
    def timed(**kwargs):
        raise AssertionError("timed before the options were checked")

    monkeypatch.setattr(attention, "run", timed)
    cli("bench", "attention", "--seq-lens", "64,0").assert_refused("--seq-lens", "lengths must be positive")
    cli("bench", "attention", "--rounds", "-1").assert_refused("--rounds", "got -1")
    cli("bench", "attention", "--json", "/proc/a.json").assert_refused("--json", "/proc/a.json")
    cli("bench", "attention", "--only", "(").assert_refused("--only", "not a regular expression")
    cli("bench", "attention", "--only", "nosuch").assert_refused("--only", "matches no row")
    cli("bench", "attention", "--no-compile").assert_refused("--no-compile applies to --device cuda")


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
    monkeypatch.setattr(attention_cuda, "run_cuda", fake_run_cuda)
    out = tmp_path / "attention_cuda.json"
    run = cli("bench", "attention", "--device", "cuda", "--seq-lens", "32,64", "--json", str(out))
    assert run.code == 0 and seen == {"seq_lens": (32, 64), "rounds": 10, "compile": True}
    assert json.loads(out.read_text())["config"]["heads"] == 2
    assert "flex_attention + ALiBi score_mod" in run.out and "checked against float64 at s=64" in run.out
    assert "of unbiased flex" in run.out and "s = 32" in run.out
    assert "goal" not in run.out and " met" not in run.out


PLUGIN = """
import torch
from torch import nn

from posenc.encodings import PositionalEncoding, register


class SymmetricDecay(PositionalEncoding):
    \"\"\"A test's bias: −m_h·|i − j|, m_h learned.\"\"\"

    kind = "bias"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.slopes = nn.Parameter(torch.linspace(0.25, 1.0, n_heads))

    def bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).abs()  # [i, j]
        return -self.slopes[:, None, None] * distance.to(self.slopes.dtype)  # [h, i, j]


register("bench_plugin_decay", SymmetricDecay)
"""


def test_a_plugin_encoding_gets_its_rows_and_its_oracle_check(tmp_path, monkeypatch, capsys, wide):
    import posenc.cli
    from posenc import encodings

    monkeypatch.setattr(encodings, "ENCODINGS", dict(encodings.ENCODINGS))  # registered for this test only
    (tmp_path / "bench_plugin_decay_module.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "attention.json"
    argv = [
        "--plugin",
        "bench_plugin_decay_module",
        "bench",
        "attention",
        "--seq-lens",
        "64",
        "--rounds",
        "1",
    ]
    argv += ["--no-memory", "--sweep", "none", "--only", "bench_plugin", "--json", str(out)]
    assert posenc.cli.main(argv) == 0
    printed = capsys.readouterr().out
    (case,) = json.loads(out.read_text())["cases"]
    rows = {t["name"]: t for t in case["timings"]}
    assert set(rows) == {
        attention.UNBIASED,
        *(f"bench_plugin_decay on {b}" for b in ("eager", "sdpa", "flex")),
    }
    for name, row in rows.items():
        assert 0 <= row["max_abs_error_vs_float64"] <= attention.TOLERANCE, name
        assert name in printed
