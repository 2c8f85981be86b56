"""Adding an encoding is one class and one ``posenc.register`` line: the proof.

The encoding below is defined here, outside ``src/``, implements only its own hook (``bias``) and
its constructor, and is taken through every part of posenc: build, attention on every backend with
KV-cache decoding, the model, the property analysis, and the ``verify``, ``plot``, ``report`` and
``lab`` commands. Nothing under ``src/`` knows it.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import torch
from torch import nn

import posenc
from posenc.analysis import properties
from posenc.attention import KVCache, MultiHeadAttention
from posenc.cli import main
from posenc.encodings import ENCODINGS
from posenc.model import TransformerEncoder, TransformerLM

NAME = "clipped_distance"


class ClippedDistanceBias(posenc.PositionalEncoding):
    """One learned bias per head for each distance |i − j| up to ``max_distance`` (farther ones share the last)."""

    kind = "bias"
    parameter_formula = "(K+1)·h (K = max_distance)"

    def __init__(self, n_heads: int, *, max_distance: int = 8) -> None:
        super().__init__()
        self.n_heads, self.max_distance = n_heads, max_distance
        self.table = nn.Parameter(torch.linspace(0.0, -1.0, max_distance + 1).repeat(n_heads, 1))  # [h, K+1]

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return (self.max_distance + 1) * n_heads

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).abs().clamp_max(self.max_distance)
        values = self.table[:, distance]  # [h, (b,) i, j]
        return values if distance.dim() == 2 else values.movedim(0, 1)  # [(b,) h, i, j]


@pytest.fixture(scope="module")
def registered():
    """The encoding registered for this module's tests, and unregistered after them."""
    assert NAME not in posenc.available()
    posenc.register(NAME, ClippedDistanceBias)
    yield NAME
    del ENCODINGS[NAME]


def test_build_and_available_know_it(registered):
    encoding = posenc.build(registered, n_heads=4, max_distance=5)
    assert registered in posenc.available() and isinstance(encoding, ClippedDistanceBias)
    with pytest.raises(ValueError, match="does not take window"):
        posenc.build(registered, n_heads=4, window=3)


def test_register_refuses_a_taken_name_and_a_non_encoding(registered):
    with pytest.raises(ValueError, match="'rope' is taken by RotaryEncoding"):
        posenc.register("rope", ClippedDistanceBias)
    with pytest.raises(TypeError, match="PositionalEncoding subclass"):
        posenc.register("plain", nn.Linear)
    with pytest.raises(ValueError, match="lower-case letters"):
        posenc.register("Clipped Distance", ClippedDistanceBias)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_agrees_on_every_backend_and_decodes_from_a_cache(registered, causal):
    torch.manual_seed(0)
    x = torch.randn(2, 11, 32)
    attention = MultiHeadAttention(
        32, 4, n_kv_heads=2, encoding=posenc.build(registered, n_heads=4), causal=causal
    )
    outputs = {}
    for backend in ("eager", "sdpa", "flex"):
        attention.backend = backend
        with torch.no_grad():
            outputs[backend] = attention(x, torch.arange(11) + 5)
        torch.testing.assert_close(outputs[backend], outputs["eager"], rtol=0, atol=1e-5)
        if causal:
            cache = KVCache()
            with torch.no_grad():
                steps = [attention(x[:, :4], torch.arange(4) + 5, cache)]
                steps += [attention(x[:, i : i + 1], torch.arange(i, i + 1) + 5, cache) for i in range(4, 11)]
            torch.testing.assert_close(torch.cat(steps, dim=1), outputs[backend], rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_class", [TransformerLM, TransformerEncoder])
def test_the_model_builds_it_by_name_and_trains_its_table(registered, model_class):
    model = model_class(50, d_model=32, n_layers=2, n_heads=4, encoding=registered)
    logits = model(torch.randint(0, 50, (2, 10)))
    logits.square().mean().backward()
    assert logits.shape == (2, 10, 50) and model.encoding.table.grad.abs().sum() > 0


def test_properties_measures_it(registered):
    result = properties(posenc.build(registered, n_heads=4), length=64)
    assert result["relative"].category == "explicit"  # a bias of the distance alone
    assert result["parameters"].value == 9 * 4 and result["parameters"].holds
    assert result["bounded"].holds is True  # farther distances share the last value
    assert result["closed_form"].holds is None


def test_verify_all_shows_it(registered, capsys):
    assert main(["verify", "--all", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table[registered]["relative"]["category"] == "explicit"


def test_plot_draws_its_figures(registered, tmp_path, capsys):
    assert main(["plot", registered, "--out", str(tmp_path)]) == 0
    drawn = sorted(path.name for path in tmp_path.iterdir())
    assert drawn and all(name.startswith(f"{registered}-") and name.endswith(".png") for name in drawn)


def test_report_includes_it(registered, tmp_path):
    out = tmp_path / "report"
    assert (
        main(["report", "--out", str(out), "--no-progress", "--lab-db", str(tmp_path / "none.sqlite")]) == 0
    )
    page = (out / "index.html").read_text()
    assert f"{registered}-bias-heads.png" in page and registered in (out / "report.md").read_text()


def test_the_lab_trains_and_reports_it(registered, tmp_path, capsys):
    db = tmp_path / "records.sqlite"
    assert (
        main(["lab", "run", "--preset", "smoke", "--encodings", registered, "--db", str(db), "--no-progress"])
        == 0
    )
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT task, status FROM runs WHERE encoding = ?", (registered,)
        ).fetchall()
    assert sorted(rows) == sorted((task, "done") for task in ("lm", "copy", "reverse", "addition"))
    assert main(["lab", "report", "--db", str(db), "--out", str(tmp_path / "lab")]) == 0
    assert f"`{registered}`" in capsys.readouterr().out
