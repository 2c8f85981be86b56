"""Parameters counted from the modules and the relative-position shift test, against seed 004's claims."""

from __future__ import annotations

import pytest
import torch

from posenc import build
from posenc.lab.properties import count_fixed, count_parameters, parameters_at, relative_position


@pytest.mark.parametrize(
    ("name", "arguments", "verdict"),
    [
        ("rope", {"d_head": 16}, "explicit"),
        ("alibi", {"n_heads": 4}, "explicit"),
        ("t5", {"n_heads": 4, "bidirectional": False, "max_distance": 32}, "explicit"),
        ("sinusoidal", {"d_model": 64}, "implicit"),
        ("learned", {"max_len": 64, "d_model": 64}, "no"),
        ("nope", {}, "none"),
    ],
)
def test_shift_test_verdicts(name, arguments, verdict):
    encoding = build(name, **arguments)
    limit = arguments.get("max_len")
    assert relative_position(encoding, max_positions=limit)["verdict"] == verdict


def test_t5_table_does_not_grow_with_length_and_learned_does():
    t5 = build("t5", n_heads=4, num_buckets=16, max_distance=64)
    assert parameters_at(t5, 64, 32) == 16 * 4 == parameters_at(t5, 128, 32) == count_parameters(t5)
    learned = build("learned", max_len=64, d_model=16)
    assert (
        parameters_at(learned, 128, 16) == 2 * parameters_at(learned, 64, 16) == 2 * count_parameters(learned)
    )


def test_alibi_slopes_are_fixed_not_learned():
    alibi = build("alibi", n_heads=8)
    assert count_parameters(alibi) == 0 and count_fixed(alibi) == 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["sinusoidal", "rope", "t5", "alibi"])
def test_shift_test_of_an_encoding_on_the_gpu_runs_on_a_cpu_copy(name):
    arguments = {"sinusoidal": {"d_model": 64}, "rope": {"d_head": 16}}.get(name, {"n_heads": 4})
    on_cpu = build(name, **arguments)
    on_gpu = build(name, **arguments).cuda()
    assert relative_position(on_gpu) == relative_position(on_cpu)
    assert all(t.is_cuda for t in [*on_gpu.parameters(), *on_gpu.buffers()])  # the trained model stays
