"""`posenc lab`: the lab's own parser and commands behind the top-level command."""

from __future__ import annotations


def test_lab_presets_runs_through_the_top_level_command(cli):
    run = cli("lab", "presets")
    assert run.code == 0 and "smoke:" in run.out


def test_lab_without_a_subcommand_is_refused_in_one_line(cli):
    cli("lab").assert_refused("posenc lab: error:", "LAB_COMMAND")


def test_an_interrupt_inside_the_lab_ends_in_one_line_and_status_130(cli, monkeypatch):
    import posenc.lab.cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.lab.cli, "_presets", interrupted)
    cli("lab", "presets").assert_refused("posenc lab presets: interrupted", code=130)
