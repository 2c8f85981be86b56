"""Float64 loop references for positions on several axes, written from the papers and model code.

Each rotates or encodes one token at a time with Python floats: axial RoPE (Flux, RoPE-ViT axial),
M-RoPE (Qwen2-VL's contiguous sections, Qwen3-VL's interleaving), RoPE-Mixed (Heo et al., 2024) and
MAE's 2-D sin-cos table.
"""

from __future__ import annotations

import math


def _rotate(x: list[float], angles: list[float], layout: str) -> list[float]:
    """Rotate pair k of x by angles[k]: pairs (2k, 2k+1) interleaved or (k, k + r/2) half."""
    r = 2 * len(angles)
    out = list(x)
    for k, angle in enumerate(angles):
        c, s = math.cos(angle), math.sin(angle)
        a, b = (2 * k, 2 * k + 1) if layout == "interleaved" else (k, k + r // 2)
        out[a] = x[a] * c - x[b] * s
        out[b] = x[b] * c + x[a] * s
    return out


def axial_angles(coords: list[float], widths: list[int], base: float = 10000.0) -> list[float]:
    """Axis a: d_a/2 pairs turning with coords[a] at base^(−2i/d_a); axes one after another."""
    return [coords[a] * base ** (-2 * i / width) for a, width in enumerate(widths) for i in range(width // 2)]


def axial_rope_vector(x, coords, widths, base=10000.0, layout="interleaved"):
    return _rotate(x, axial_angles(coords, widths, base), layout)


def mrope_axis(k: int, sections: list[int], layout: str) -> int:
    """The axis pair k turns with. Contiguous: runs of s_a pairs. Interleaved (Qwen3-VL's
    apply_interleaved_mrope): axis a ≥ 1 at k ≡ a (mod n) for k < n·s_a, axis 0 elsewhere."""
    n = len(sections)
    if layout == "contiguous":
        end = 0
        for a, size in enumerate(sections):
            end += size
            if k < end:
                return a
        raise IndexError(k)
    for a in range(1, n):
        if k % n == a and k < n * sections[a]:
            return a
    return 0


def mrope_vector(x, coords, sections, base=10000.0, layout="contiguous", rope_layout="half"):
    r = 2 * sum(sections)
    angles = [coords[mrope_axis(k, sections, layout)] * base ** (-2 * k / r) for k in range(r // 2)]
    return _rotate(x, angles, rope_layout)


def mixed_rope_vector(x, coords, frequencies, layout="interleaved"):
    """RoPE-Mixed: pair k turns by Σ_a coords[a]·frequencies[k][a] (learned, per head)."""
    angles = [sum(c * f for c, f in zip(coords, row, strict=True)) for row in frequencies]
    return _rotate(x, angles, layout)


def mae_code(coords: list[float], d_model: int, base: float = 10000.0) -> list[float]:
    """MAE's sin-cos code: d/n channels per axis, the last axis first (MAE's meshgrid puts w before h),
    each [sin(p·ω_0) … sin(p·ω_{D/2−1}), cos(p·ω_0) …] with ω_k = base^(−2k/D), D = d/n."""
    width = d_model // len(coords)
    code = []
    for p in reversed(coords):
        omegas = [base ** (-2 * k / width) for k in range(width // 2)]
        code += [math.sin(p * w) for w in omegas] + [math.cos(p * w) for w in omegas]
    return code


def seed_code(coords: list[float], d_model: int, base: float = 10000.0) -> list[float]:
    """The seed's interleaved code per axis (sin at 2k, cos at 2k+1), axes in order, d/n channels each."""
    width = d_model // len(coords)
    code = []
    for p in coords:
        for k in range(width // 2):
            w = base ** (-2 * k / width)
            code += [math.sin(p * w), math.cos(p * w)]
    return code


def per_axis_angles(coords: list[float], frequencies: list[list[float]], pair_layout: str) -> list[float]:
    """Axis a turns its frequencies[a] with coords[a]: "axes" lays the axes' pairs one axis after another
    (axial RoPE, DINOv3, Cosmos), "frequencies" one frequency after another, the axes interleaved within
    each (LTX-Video: pair k·n + a is axis a's k-th)."""
    if pair_layout == "axes":
        return [coords[a] * theta for a, thetas in enumerate(frequencies) for theta in thetas]
    n = len(frequencies)
    return [coords[a] * frequencies[a][k] for k in range(len(frequencies[0])) for a in range(n)]


def per_axis_rope_vector(x, coords, frequencies, pair_layout="axes", layout="half", unrotated_first=0):
    """x rotated by :func:`per_axis_angles`; the first ``unrotated_first`` channels pass through (LTX's
    d mod 6), the rest of the rotated width after them."""
    angles = per_axis_angles(coords, frequencies, pair_layout)
    r = 2 * len(angles)
    head, rotated, tail = (
        x[:unrotated_first],
        x[unrotated_first : unrotated_first + r],
        x[unrotated_first + r :],
    )
    return head + _rotate(rotated, angles, layout) + tail
