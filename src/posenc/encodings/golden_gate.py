"""Golden Gate RoPE: every pair of every head turns along its own direction of coordinate space, the
directions spread evenly by the generalised golden ratio, the frequencies log-spaced; no parameters."""

from __future__ import annotations

import torch

from posenc._validation import check_choice, check_positive_float
from posenc.encodings.coordinate_rotation import GRID_FIGURES, GRID_ONLY, CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.rope import LAYOUTS, apply_rope
from posenc.functional.rotations import directional_angles, golden_directions, log_spaced


def golden_gate_frequencies(
    n_heads: int, d_head: int, axes: int, *, min_freq: float, max_freq: float
) -> torch.Tensor:
    """Golden Gate RoPE's frequency vectors, float64 ``[h, d/2, n]``: pair k of head h turns by
    x·ω_k·u_{h,k} at coordinates x, with ω_k log-spaced from ``max_freq`` (k = 0) down to ``min_freq``
    and u the (h·d/2 + k + 1)-th direction of :func:`~posenc.functional.rotations.golden_directions`
    (each head its own directions, none repeated)."""
    pairs = d_head // 2
    omega = log_spaced(pairs, min_freq, max_freq).flip(0)  # [d/2]: fastest first, as RoPE
    directions = golden_directions(n_heads * pairs, axes).reshape(n_heads, pairs, axes)  # [h, d/2, n]
    return directions * omega[None, :, None]


class GoldenGateRoPE(CoordinateRotation):
    """Golden Gate RoPE (Xiong, 2025, "On N-dimensional rotary positional embeddings",
    https://jerryxio.ng/posts/nd-rope): RoPE on n-D coordinates whose pairs turn along directions spread
    evenly over the sphere by the generalised golden ratio, with log-spaced frequencies; no parameters.

    Pair k of head h turns by x·ω_k·u_{h,k} (:func:`golden_gate_frequencies`): the angle of a query at x
    and a key at y differs by (x − y)·ω_k·u_{h,k}, so q·k depends on the offset x − y alone, and no axis
    is preferred (axial RoPE turns each pair along one axis only).

    Args:
        d_head: head width (even).
        n_heads: heads, each with its own directions; None: one set shared by every head.
        axes: coordinate axes n (2 for image patches, 3 for video).
        min_freq, max_freq: the slowest and fastest angular frequency, radians per unit of coordinate.
        layout: ``"half"`` pairs channel k with k + d/2; ``"interleaved"`` 2k with 2k + 1.
    """

    def __init__(
        self,
        d_head: int,
        n_heads: int | None = None,
        *,
        axes: int = 2,
        min_freq: float = 0.01,
        max_freq: float = 1.0,
        layout: str = "half",
    ) -> None:
        super().__init__(d_head, axes=axes, n_heads=n_heads)
        if self.d_head % 2:
            raise ValueError(f"Golden Gate RoPE turns pairs of channels: d_head must be even, got {d_head}")
        self.min_freq = check_positive_float("min_freq", min_freq)
        self.max_freq = check_positive_float("max_freq", max_freq)
        if self.min_freq > self.max_freq:
            raise ValueError(f"min_freq must not exceed max_freq, got {min_freq} > {max_freq}")
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.per_head = n_heads is not None
        self.register_buffer("frequency_vectors", self._frequencies(), persistent=False)  # [h, d/2, n] f64

    def _frequencies(self) -> torch.Tensor:
        return golden_gate_frequencies(
            self.n_heads or 1, self.d_head, self.axes, min_freq=self.min_freq, max_freq=self.max_freq
        )

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.frequency_vectors.dtype != torch.float64:  # rebuilt exactly, never rounded
            self.frequency_vectors = self._frequencies().to(self.frequency_vectors.device)
        return self

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        angle = directional_angles(positions, self.frequency_vectors)  # [b or 1, h or 1, s, d/2] f64
        return apply_rope(x, torch.cos(angle), torch.sin(angle), layout=self.layout)

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, n_heads={self.n_heads}, axes={self.axes}, min_freq={self.min_freq}, "
            f"max_freq={self.max_freq}, layout={self.layout!r}"
        )


#: What posenc says about :class:`GoldenGateRoPE` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Golden Gate RoPE",
    where_it_acts="rotates q and k, each pair along its own golden-ratio direction of n-D coordinates",
    used_by="Golden Gate RoPE (N-D RoPE)",
    parameter_formula="0",
    specimen_kwargs={"d_head": 64, "n_heads": 8, "axes": 2},
    figures=GRID_FIGURES,
    lab_not_applicable=GRID_ONLY,
)
