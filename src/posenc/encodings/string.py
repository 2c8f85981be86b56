"""STRING: RoPE after one learned orthogonal map shared by queries and keys (Cayley-STRING), or the
exponential of commuting learned generators (Circulant-STRING); exactly relative on n-D coordinates."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validation import check_choice, check_positive_float
from posenc.encodings.coordinate_rotation import GRID_FIGURES, GRID_ONLY, CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.rope import apply_rope
from posenc.functional.rotations import cayley, directional_angles, skew_symmetric

FORMS = ("cayley", "circulant")
#: Standard deviation of the entries of S at initialisation (P starts near the identity).
INITIAL_SKEW = 0.02


def initial_frequency_vectors(d_head: int, axes: int, base: float) -> torch.Tensor:
    """Frequency vectors ``[d/2, n]`` to start learning from: pair k turns at RoPE's base^(−2k/d) along a
    random unit direction of the n axes (drawn from torch's generator, as RoPE-Mixed's directions are)."""
    pairs = d_head // 2
    magnitude = base ** (-2 * torch.arange(pairs, dtype=torch.float64) / d_head)  # [d/2]
    direction = torch.randn(pairs, axes, dtype=torch.float64)
    return magnitude[:, None] * direction / direction.norm(dim=-1, keepdim=True)


def circulant(first_row: torch.Tensor) -> torch.Tensor:
    """The circulant matrix ``[..., d, d]`` whose row i is ``first_row`` ``[..., d]`` shifted right by i."""
    d = first_row.shape[-1]
    index = (torch.arange(d)[None, :] - torch.arange(d)[:, None]) % d  # [d, d]: C[i, j] = c[(j − i) mod d]
    return first_row[..., index.to(first_row.device)]


class STRING(CoordinateRotation):
    """STRING (Schenck et al., 2025, https://arxiv.org/abs/2502.02562): separable translation-invariant
    rotations R(x) = exp(Σ_a x_a·L_a) with commuting skew-symmetric L_a, learned, so that
    R(x)ᵀR(y) = R(y − x) and q·k depends on the offset y − x alone, on any number of axes.

    ``form="cayley"`` (Cayley-STRING, the paper's best): L_a = Pᵀ·D_a·P with P = (I − S)(I + S)⁻¹ the
    Cayley transform of a learned skew-symmetric S ``[d, d]`` and D_a RoPE's generators with learned
    frequencies: q ↦ Pᵀ·RoPE_W(x)·P·q, the same P for queries and keys (Pᵀ cancels in q·k; it is kept
    so that R is exp(Σ_a x_a·L_a) itself, with R(x)·R(y) = R(x + y)). S starts near 0 (entries drawn with
    standard deviation :data:`INITIAL_SKEW`: P near I), W at RoPE's magnitudes along random directions.
    ``form="circulant"`` (Circulant-STRING): L_a = C_a − C_aᵀ with C_a the circulant matrix of a learned
    vector (circulant matrices commute); R(x) is their matrix exponential, ``[s, d, d]`` per call.

    Args:
        d_head: head width (even).
        axes: coordinate axes n.
        form: ``"cayley"`` or ``"circulant"``.
        base: the starting frequencies' base (:func:`initial_frequency_vectors`) for ``"cayley"``; the scale 1/d of the circulant vectors' start for ``"circulant"``.

    One map per layer, shared by the heads (grouped keys too). Float64 inside, cast once.
    """

    def __init__(self, d_head: int, *, axes: int = 2, form: str = "cayley", base: float = 100.0) -> None:
        super().__init__(d_head, axes=axes)
        self.form = check_choice("form", form, FORMS)
        self.base = check_positive_float("base", base)
        if form == "cayley":
            if self.d_head % 2:
                raise ValueError(f"Cayley-STRING turns pairs of channels: d_head must be even, got {d_head}")
            upper = torch.randn(d_head * (d_head - 1) // 2) * INITIAL_SKEW
            self.skew = nn.Parameter(upper)  # S's upper triangle, [d·(d − 1)/2]
            vectors = initial_frequency_vectors(d_head, self.axes, self.base)
            self.frequency_vectors = nn.Parameter(vectors.to(torch.get_default_dtype()))  # [d/2, n]
        else:
            generator = torch.randn(self.axes, d_head, dtype=torch.float64) / (d_head * math.sqrt(self.base))
            self.circulant_rows = nn.Parameter(generator.to(torch.get_default_dtype()))  # [n, d]

    def orthogonal_map(self) -> torch.Tensor:
        """Cayley-STRING's P, float64 ``[d, d]`` (orthogonal, determinant 1)."""
        return cayley(skew_symmetric(self.skew.to(torch.float64), self.d_head))

    def generators(self) -> torch.Tensor:
        """The commuting skew-symmetric generators L_a, float64 ``[n, d, d]`` (Circulant-STRING)."""
        c = circulant(self.circulant_rows.to(torch.float64))  # [n, d, d]
        return c - c.transpose(-1, -2)

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        if self.form == "cayley":
            p = self.orthogonal_map().to(x.dtype)  # [d, d]
            angle = directional_angles(positions, self.frequency_vectors[None])  # [b or 1, 1, s, d/2] f64
            turned = apply_rope(x @ p.T, torch.cos(angle), torch.sin(angle))  # RoPE_W(x)·P·q per token
            return turned @ p  # Pᵀ·RoPE_W(x)·P·q: Pᵀ cancels in q·k, and makes R(x)·R(y) = R(x + y)
        coordinates = positions.to(torch.float64)  # [(b,) s, n]
        if coordinates.dim() == 2:
            coordinates = coordinates[None]
        generator = torch.einsum("bsn,nij->bsij", coordinates, self.generators())  # [b or 1, s, d, d]
        rotation = torch.linalg.matrix_exp(generator)  # [b or 1, s, d, d]
        return torch.einsum("bsij,bhsj->bhsi", rotation.to(x.dtype), x)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, axes={self.axes}, form={self.form!r}, base={self.base}"


#: What posenc says about :class:`STRING` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Cayley-STRING",
    where_it_acts="rotates q and k by RoPE after one learned orthogonal map (Cayley), shared by q and k",
    used_by="STRING (robotics and vision transformers)",
    parameter_formula="d·(d − 1)/2 + n·d/2 with d = d_head, n axes (Cayley: S and the frequencies)",
    specimen_kwargs={"d_head": 32, "axes": 2},
    figures=GRID_FIGURES,
    lab_not_applicable=GRID_ONLY,
)
