"""The flash-path and one-layer benchmark runs end to end at small sizes and reports ratios to its floors."""

from __future__ import annotations

import pytest

from posenc.bench import layer


def test_flash_path_reports_each_candidate_against_is_causal_sdpa():
    (case,) = layer.flash_path([32], rounds=1)
    names = {(row["name"], row["mode"]) for row in case["timings"]}
    assert ("posenc nope attend", "forward + backward") in names
    assert ("SDPA + float causal mask (posenc before)", "inference") in names
    floors = [row for row in case["timings"] if row["name"] == "SDPA is_causal"]
    assert [row["ratio"] for row in floors] == [1.0, 1.0]


def test_layer_costs_time_every_encoding_against_nope_and_a_plain_layer(monkeypatch):
    monkeypatch.setattr(layer, "LAYER", {"batch": 1, "seq_len": 16, "d_model": 32, "heads": 4})
    monkeypatch.setattr(layer, "SWIN_GRID", (4, 4))
    rows = layer.layer_costs(rounds=1)
    assert {row["name"] for row in rows} == {layer.PLAIN, *layer.LAYER_ENCODINGS}
    nope = [row for row in rows if row["name"] == "nope"]
    assert [row["of_nope"] for row in nope] == [1.0, 1.0]
    assert all(row["median_ms"] > 0 for row in rows)


def test_a_layer_that_disagrees_with_eager_fails_the_run(monkeypatch):
    from posenc.attention import MultiHeadAttention

    original = MultiHeadAttention._unbiased
    monkeypatch.setattr(MultiHeadAttention, "_unbiased", lambda self, q, *a: original(self, q, *a) + 1)
    monkeypatch.setattr(layer, "LAYER", {"batch": 1, "seq_len": 16, "d_model": 32, "heads": 4})
    with pytest.raises(AssertionError, match="nope: sdpa is"):
        layer.layer_costs(["nope"], rounds=1)
