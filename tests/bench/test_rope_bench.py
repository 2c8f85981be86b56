"""`posenc bench rope` times every candidate after checking it against apply_rope (a smoke test)."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.bench import rope
from posenc.cli import main
from posenc.kernels import native_available

TINY = ((1, 2, 16, 8),)


@pytest.fixture(scope="module")
def result():
    return rope.run(shapes=TINY, rounds=1, compile=False, reuse_memory=False)


def test_bench_times_every_candidate_for_every_dtype_and_layout(result):
    cases = {(c["dtype"], c["layout"], c["cache"]): c for c in result["cases"]}
    assert set(cases) == {
        (d, layout, cache)
        for d in ("float32", "bfloat16")
        for layout in ("half", "interleaved")
        for cache in ("cold", "warm")
    }
    for (_, layout, _), case in cases.items():
        names = [t["name"] for t in case["timings"]]
        assert names[:6] == [
            rope.CLONE,
            "posenc apply_rope",
            "posenc apply_rope_qk",
            "posenc apply_rope_qk, in place",
            "posenc apply_rope_qk, eager fallback",
            "HF-style eager",
        ]
        assert ("complex multiply (Meta LLaMA)" in names) == (layout == "interleaved")
        assert case["not_timed"]["torch.compile(HF-style)"] == "not requested"
        assert all(t["min_ms"] <= t["median_ms"] <= t["max_ms"] for t in case["timings"])
        assert next(t for t in case["timings"] if t["name"] == rope.CLONE)["vs_clone"] == 1.0


def test_every_candidate_agrees_with_apply_rope_within_its_dtype(result):
    for case in result["cases"]:
        bound = rope.AGREEMENT[getattr(torch, case["dtype"])] * 8  # |values| stay below 8 here
        for t in case["timings"][1:]:  # the clone does not rotate
            assert t["max_abs_diff_vs_apply_rope"] <= bound, (case["dtype"], case["layout"], t["name"])
        if case["dtype"] == "float32" and native_available():  # bit-identical to apply_rope in float32
            kernel = next(t for t in case["timings"] if t["name"] == "posenc apply_rope_qk")
            assert kernel["max_abs_diff_vs_apply_rope"] == 0.0


def test_a_fast_wrong_recipe_fails_the_agreement_check():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 8, 8, generator=generator)
    cos, sin = rope.rope_cos_sin(8, rope.rope_inv_freq(8)[0])
    right = rope.apply_rope(x, cos, sin)
    wrong = rope.apply_rope(x, cos, -sin)  # rotates the wrong way
    assert rope.check_agreement("right", [right], [right], "case") == 0.0
    with pytest.raises(AssertionError, match="wrong disagrees with posenc apply_rope"):
        rope.check_agreement("wrong", [wrong], [right], "case")


def test_complex_recipe_upcasts_bfloat16_and_casts_back():
    q = torch.randn(1, 1, 4, 8).to(torch.bfloat16)
    cos, sin = rope.rope_cos_sin(4, rope.rope_inv_freq(8)[0])
    got, _ = rope.complex_multiply(q, q, torch.complex(cos, sin))
    assert got.dtype == torch.bfloat16
    expected = rope.apply_rope(q.float(), cos, sin, layout="interleaved").to(torch.bfloat16)
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


def test_bench_rope_command_writes_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rope, "SHAPES", TINY)
    monkeypatch.setattr(rope, "steady_malloc", lambda: False)  # leave this process's malloc alone
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    out = tmp_path / "rope.json"
    assert main(["bench", "rope", "--rounds", "1", "--no-compile", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["rounds"] == 1 and len(written["cases"]) == 8
    assert set(written["goal"]) == {
        f"(1, 2, 16, 8) {d} {layout}, {cache} cache"
        for d in ("float32", "bfloat16")
        for layout in ("half", "interleaved")
        for cache in ("cold", "warm")
    }
    printed = capsys.readouterr().out
    assert "clone of q and k (memory floor)" in printed and "goal ≤ 1.3× clone" in printed


def test_bench_refuses_an_unknown_dtype_or_cache_state():
    with pytest.raises(ValueError, match="dtype must be one of float32, bfloat16; got 'float16'"):
        rope.run(shapes=TINY, dtypes=("float16",), rounds=1, compile=False, reuse_memory=False)
    with pytest.raises(ValueError, match="cache must be one of cold, warm; got 'hot'"):
        rope.run(shapes=TINY, caches=("hot",), rounds=1, compile=False, reuse_memory=False)
