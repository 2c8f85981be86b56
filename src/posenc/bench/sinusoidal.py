"""`posenc bench sinusoidal`: time and precision of sinusoidal_table against the usual recipes."""

from __future__ import annotations

import torch

from posenc.bench.harness import time_alternating
from posenc.functional.sinusoidal import sinusoidal_table


def float32_recipe(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The common recipe: float32 positions times float32 frequencies, sin/cos in float32."""
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # [d/2]
    angles = positions.to(torch.float32)[:, None] * inv_freq  # [T, d/2]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # [T, d]


def float64_recipe(positions: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The same recipe in float64 (no range reduction), float64 output."""
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = positions.to(torch.float64)[:, None] * inv_freq
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


def _exact_rows(positions: list[int], d_model: int, base: float) -> torch.Tensor:
    import mpmath  # installed with torch (through sympy)

    with mpmath.workdps(40):
        omegas = [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * k) / d_model) for k in range(d_model // 2)]
        rows = [[float(f(p * w)) for w in omegas for f in (mpmath.sin, mpmath.cos)] for p in positions]
    return torch.tensor(rows, dtype=torch.float64)


def precision(d_model: int = 512, base: float = 10000.0, samples: int = 64, largest: int = 2**21) -> dict:
    """Max |value − exact| of each recipe at sampled positions ≤ `largest` (40-digit mpmath reference)."""
    generator = torch.Generator().manual_seed(0)
    positions = torch.cat(
        (
            torch.tensor([largest - 1, largest]),
            torch.randint(0, largest + 1, (samples - 2,), generator=generator),
        )
    )
    exact = _exact_rows(positions.tolist(), d_model, base)
    recipes = {
        "posenc (float32 output)": sinusoidal_table(positions, d_model, base=base),
        "posenc (float64 output)": sinusoidal_table(positions, d_model, base=base, dtype=torch.float64),
        "float32 recipe": float32_recipe(positions, d_model, base),
        "float64 recipe, cast to float32": float64_recipe(positions, d_model, base).to(torch.float32),
        "float64 recipe (float64 output)": float64_recipe(positions, d_model, base),
    }
    return {name: float((table.to(torch.float64) - exact).abs().max()) for name, table in recipes.items()}


def run(length: int = 4096, d_model: int = 512, rounds: int = 15) -> dict:
    """Timings (float32 output) and precision; JSON-ready.

    Raises:
        ValueError: ``length`` or ``rounds`` below 1, ``d_model`` not a positive even number (before
            anything is timed).
    """
    for name, value in (("length", length), ("d_model", d_model), ("rounds", rounds)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    positions = torch.arange(length)
    output = sinusoidal_table(length, d_model)
    timings = time_alternating(
        {
            "posenc (exact)": lambda: sinusoidal_table(length, d_model),
            "float32 recipe": lambda: float32_recipe(positions, d_model),
            "float64 recipe": lambda: float64_recipe(positions, d_model).to(torch.float32),
            "clone (memory floor)": output.clone,
        },
        rounds=rounds,
    )
    floor = timings["clone (memory floor)"].median_ms
    recipe = timings["float32 recipe"].median_ms
    return {
        "length": length,
        "d_model": d_model,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "timings": [
            {**t.as_dict(), "vs_float32_recipe": t.median_ms / recipe, "vs_clone": t.median_ms / floor}
            for t in timings.values()
        ],
        "max_abs_error_at_positions_up_to_2^21": precision(d_model),
    }
