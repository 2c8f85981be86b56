"""`posenc plot`: every figure of a set into a folder checked before any figure is drawn."""

from __future__ import annotations

import pytest


def test_plot_writes_every_figure_of_an_encoding(cli, tmp_path):
    from posenc.plots import gallery

    run = cli("plot", "alibi", "--out", str(tmp_path))
    expected = {f"{spec.name}.png" for spec in gallery.figures("alibi")}
    assert run.code == 0
    assert {path.name for path in tmp_path.iterdir()} == expected
    assert len(run.out.splitlines()) == len(expected)


def test_plot_writes_every_figure_when_stdout_is_closed_and_ends_with_141(monkeypatch, tmp_path):
    # `posenc plot t5 | head -1`: the figures are the results, the printed paths only name them
    import sys

    from posenc.cli import main
    from posenc.plots import gallery
    from tests.cli.test_main import ClosedPipe

    expected = {f"{spec.name}.png" for spec in gallery.figures("t5")}
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["plot", "t5", "--out", str(tmp_path)]) == 141
    assert {path.name for path in tmp_path.iterdir()} == expected


def test_plot_of_an_unknown_name_lists_the_valid_ones(cli, tmp_path):
    cli("plot", "sinus", "--out", str(tmp_path)).assert_refused(
        "unknown figure set 'sinus'; valid: all, alibi"
    )


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_plot_out_that_is_or_lies_under_a_file_is_refused_before_drawing(cli, tmp_path, monkeypatch, where):
    from posenc.plots import gallery

    def drawn(name):
        raise AssertionError("figures built before --out was checked")

    monkeypatch.setattr(gallery, "figures", drawn)
    blocker = tmp_path / "figs"
    blocker.write_text("")
    out = blocker if where == "file" else blocker / "inner"
    cli("plot", "alibi", "--out", str(out)).assert_refused("--out", str(out), f"{str(blocker)!r} is a file")


def test_plot_out_folder_that_cannot_be_made_is_refused(cli):
    cli("plot", "alibi", "--out", "/proc/posenc-figures").assert_refused("--out", "/proc/posenc-figures")
