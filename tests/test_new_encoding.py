"""Adding an encoding is one class and one ``posenc.register`` line: the proof.

The encodings below are defined here, outside ``src/``, one of each kind that acts: a bias
(``ClippedDistanceBias``: its constructor, ``bias`` and a parameter count), a rotation (``PairTurn``:
``rotate`` only) and an additive code (``SineRamp``: ``embed`` only). Each implements only its own
hook and is taken through every part of posenc: build, attention on every backend with KV-cache
decoding, the model, the property analysis, and the ``verify``, ``plot`` and ``report`` commands (the
bias also through the ``lab``). Nothing under ``src/`` knows them.
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
from posenc.backends import ATTENTION
from posenc.cli import main
from posenc.encodings import ENCODINGS, resolve_positions
from posenc.lab.presets import PRESETS
from posenc.model import TransformerEncoder, TransformerLM

NAME = "clipped_distance"
ROTARY = "pair_turn"
ADDITIVE = "sine_ramp"


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


class PairTurn(posenc.PositionalEncoding):
    """Turns channel pair (2k, 2k+1) of every query and key by position / (k + 1) radians, at any width."""

    kind = "rotary"

    def rotate(self, q, k, q_positions=None, k_positions=None):
        return _turn(q, q_positions), _turn(k, k_positions)


def _turn(x: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """Heads ``[b, h, s, d]`` with pair k turned by position / (k + 1)."""
    positions = resolve_positions(positions, x, seq_dim=2).to(torch.float64)  # [s] or [b, s]
    angles = positions.unsqueeze(-1) / torch.arange(1, x.shape[-1] // 2 + 1, dtype=torch.float64)
    angles = angles if angles.dim() == 2 else angles.unsqueeze(1)  # [s, d/2] or [b, 1, s, d/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class SineRamp(posenc.PositionalEncoding):
    """Adds sin(position / (c + 1)) to channel c of every token embedding, at any width."""

    kind = "additive"

    def embed(self, x, positions=None):
        positions = resolve_positions(positions, x, seq_dim=1).to(torch.float64)  # [s] or [b, s]
        code = torch.sin(positions.unsqueeze(-1) / torch.arange(1, x.shape[-1] + 1, dtype=torch.float64))
        return x + code.to(x.dtype)  # [b, s, d]


#: The encodings of this module by registered name.
NEW = {NAME: ClippedDistanceBias, ROTARY: PairTurn, ADDITIVE: SineRamp}


@pytest.fixture(scope="module")
def every_new():
    """All three encodings registered for this module's tests, and unregistered after them."""
    assert not set(NEW) & set(posenc.available())
    for name, cls in NEW.items():
        posenc.register(name, cls)
    yield list(NEW)
    for name in NEW:
        del ENCODINGS[name]


@pytest.fixture(scope="module")
def registered(every_new):
    """The bias example's name (with every new encoding registered)."""
    return NAME


@pytest.fixture(params=list(NEW))
def new_name(request, every_new):
    """Each new encoding's registered name in turn."""
    return request.param


@pytest.fixture(scope="module")
def report(every_new, tmp_path_factory):
    """One `posenc report` with every new encoding registered, shared by the report tests."""
    from posenc.plots import gallery

    out = tmp_path_factory.mktemp("report")
    missing = out / "none.sqlite"
    names = gallery.names
    with pytest.MonkeyPatch.context() as patch:  # the registered encodings' figures are the report tests'
        patch.setattr(gallery, "names", lambda: [name for name in names() if name in NEW])
        assert main(["report", "--out", str(out), "--no-progress", "--lab-db", str(missing)]) == 0
    return out


def _built(
    name: str, *, d_model: int = 32, n_heads: int = 4, causal: bool = True
) -> posenc.PositionalEncoding:
    """The encoding ``name`` built for a model of these sizes, as the model builds it."""
    arguments = ENCODINGS[name].model_arguments(d_model=d_model, n_heads=n_heads, max_len=64, causal=causal)
    return posenc.build(name, **arguments)


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
def test_attention_agrees_on_every_backend_and_decodes_from_a_cache(new_name, causal):
    torch.manual_seed(0)
    x = torch.randn(2, 11, 32)
    attention = MultiHeadAttention(
        32, 4, n_kv_heads=2, encoding=_built(new_name, causal=causal), causal=causal
    )
    outputs = {}
    for backend in ATTENTION:
        attention.backend = backend
        with torch.no_grad():
            outputs[backend] = attention(x, torch.arange(11) + 5)
        torch.testing.assert_close(outputs[backend], outputs[ATTENTION[0]], rtol=0, atol=1e-5)
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


@pytest.mark.parametrize("model_class", [TransformerLM, TransformerEncoder])
def test_the_model_runs_an_encoding_that_implements_one_hook(every_new, model_class):
    for name in (ROTARY, ADDITIVE):
        model = model_class(50, d_model=32, n_layers=2, n_heads=4, encoding=name)
        tokens = torch.randint(0, 50, (2, 10))
        logits = model(tokens)
        assert isinstance(model.encoding, NEW[name]) and logits.shape == (2, 10, 50)
        assert not torch.equal(logits, model(tokens, positions=torch.arange(10) + 3))  # it sees position


def test_properties_measures_it(registered):
    result = properties(posenc.build(registered, n_heads=4), length=64)
    assert result["relative"].category == "explicit"  # a bias of the distance alone
    assert result["parameters"].value == 9 * 4 and result["parameters"].holds
    assert result["bounded"].holds is True  # farther distances share the last value
    assert result["closed_form"].holds is None


def test_properties_measures_a_rotation_through_rotate_alone(every_new):
    result = properties(posenc.build(ROTARY), length=64)
    assert all(prop.error is None for prop in result.values()), result
    assert result["relative"].category == "explicit"  # q·k depends on m − n only
    assert result["bounded"].holds is True and result["linear_map"].holds is True  # R(m + k) = R(k)·R(m)
    assert result["unique"].holds is None and "rotation_tables" in result["unique"].reason
    assert result["precision"].holds is None and "rotation_tables" in result["precision"].reason
    parameters = result["parameters"]
    assert parameters.holds is None and "declares no parameter_formula" in parameters.reason
    assert "0 counted" in parameters.reason


def test_properties_measures_an_embedding_code_through_embed_alone(every_new):
    result = properties(posenc.build(ADDITIVE), length=64)
    assert all(prop.error is None for prop in result.values()), result
    assert result["relative"].holds is False and result["relative"].category == "no"  # absolute
    for claim in ("bounded", "unique", "translation_invariant", "precision"):
        assert result[claim].holds is None and "codes" in result[claim].reason, result[claim]


def test_verify_all_shows_it(every_new, capsys):
    assert main(["verify", "--all", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    categories = {name: table[name]["relative"]["category"] for name in NEW}
    assert categories == {NAME: "explicit", ROTARY: "explicit", ADDITIVE: "no"}
    errors = [(name, claim) for name, row in table.items() for claim, prop in row.items() if prop["error"]]
    assert errors == []


#: The figures each new encoding gets: its kind's defaults whose views it gives.
FIGURES = {
    NAME: ["bias-heads", "logit-shift"],
    ROTARY: ["logit-shift"],  # "rotation" and "flat-lines" need rotation_tables
    ADDITIVE: ["logit-shift"],  # "matrix-rows" and "gram" need codes
}


def test_plot_draws_its_figures(new_name, tmp_path, capsys):
    assert main(["plot", new_name, "--out", str(tmp_path)]) == 0
    drawn = sorted(path.name for path in tmp_path.iterdir())
    assert drawn == [f"{new_name}-{kind}.png" for kind in FIGURES[new_name]]


def test_report_includes_it(report):
    page, markdown = (report / "index.html").read_text(), (report / "report.md").read_text()
    verification = json.loads((report / "verification.json").read_text())
    for name, kinds in FIGURES.items():
        assert all(f"{name}-{kind}.png" in page for kind in kinds) and f"| {name} |" in markdown
        assert all(prop["error"] is None for prop in verification[name].values()), name
    assert "could not be drawn" not in markdown and "| error" not in markdown


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
    assert sorted(rows) == sorted((task, "done") for task in PRESETS["smoke"].sweep_tasks)  # every one applies
    assert main(["lab", "report", "--db", str(db), "--out", str(tmp_path / "lab")]) == 0
    assert f"`{registered}`" in capsys.readouterr().out
