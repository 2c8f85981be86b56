"""The fixed sinusoidal encoding of "Attention Is All You Need" as a module."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from posenc._validation import check_choice, check_even_positive_int, check_positive_float, check_positive_int
from posenc.encodings.additive import AdditiveEncoding
from posenc.encodings.base import PositionSpace
from posenc.encodings.description import Description, SeedRow
from posenc.functional.angles import exact_cos_sin, reduced_angles, reduced_angles_unchecked
from posenc.functional.normalized import sincos_grid_scale
from posenc.functional.sinusoidal import (
    AXIS_LAYOUTS,
    axis_codes,
    sinusoidal_frequency_pieces,
    sinusoidal_table,
)

#: Positions below this are served from a float64 table grown on demand; others computed directly.
CACHE_POSITIONS = 1 << 16


class SinusoidalEncoding(AdditiveEncoding):
    """Sinusoidal position codes (Vaswani et al., 2017, https://arxiv.org/abs/1706.03762).

    No learned parameters. The table for positions 0 … n−1 is cached in float64 as a
    non-persistent buffer, grown on demand, and cast to the input's dtype once per call;
    ``module.to(torch.bfloat16)`` moves it but never rounds it (the buffer is rebuilt
    exactly after a dtype conversion touches it). Negative positions, or positions
    past the cache, are computed directly.

    Args:
        d_model: width of each code (even).
        base: wavelength base, 10000 in the paper.
        mode: ``"add"`` or ``"concat"``.
        axes: positions on this many coordinate axes (``[s, n]`` or ``[b, s, n]``; 2 for image patches,
            3 for video), each coded with d_model/n channels (integer coordinates exact, float ones in
            float64).
        layout: on several axes, ``"mae"`` (MAE's and diffusers' 2-D sin-cos, the default) or
            ``"axes"`` (the seed's code per axis); see :func:`posenc.functional.sinusoidal_table`.
        prefix_tokens: the first this many tokens of a call get a zero code (MAE's CLS token; diffusers'
            ``cls_token=True``), e.g. with ``grid_positions(sizes, prefix_tokens=1)``.
    """

    _exact_buffers = ("table",)

    def __init__(
        self,
        d_model: int,
        *,
        base: float = 10000.0,
        mode: str = "add",
        axes: int = 1,
        layout: str | None = None,
        prefix_tokens: int = 0,
    ) -> None:
        super().__init__(check_even_positive_int("d_model", d_model), mode=mode, prefix_tokens=prefix_tokens)
        self.base = check_positive_float("base", base)
        self.axes = check_positive_int("axes", axes)
        if self.axes == 1 and layout is not None:
            raise ValueError(f"layout {layout!r} codes positions on several axes; axes=1 has one")
        self.layout = None if self.axes == 1 else check_choice("layout", layout or "mae", AXIS_LAYOUTS)
        if self.d_model % (2 * self.axes):
            raise ValueError(
                f"d_model={self.d_model} does not split into an even width for each of {self.axes} axes"
            )
        self.register_buffer("table", torch.empty(0, self.d_model, dtype=torch.float64), persistent=False)
        # a plain attribute, not a buffer: module.to(dtype) cannot round it
        self._frequency_pieces = sinusoidal_frequency_pieces(self.d_model, self.base)  # [d/2, 4] float64
        self._axis_pieces = sinusoidal_frequency_pieces(self.d_model // self.axes, self.base)  # [D/2, 4]

    def _grow(self, length: int) -> None:
        if length > self.table.shape[0]:
            length = max(length, 2 * self.table.shape[0])
            table = sinusoidal_table(length, self.d_model, base=self.base, dtype=torch.float64)
            self.table = table.to(self.table.device)

    @property
    def position_space(self) -> PositionSpace:
        """``[s]`` on one axis, coordinates ``[s, n]`` on n."""
        return PositionSpace(columns=self.axes, axes=self.axes)

    def codes(self, positions: torch.Tensor) -> torch.Tensor:
        if self.axes > 1:  # coordinates [..., s, n]
            if torch.compiler.is_compiling():
                return axis_codes(
                    positions, self.d_model, base=self.base, layout=self.layout, pieces=self._axis_pieces
                )
            return sinusoidal_table(
                positions, self.d_model, base=self.base, dtype=torch.float64, layout=self.layout
            )
        if torch.compiler.is_compiling():  # tensor ops only: no cache growth (a host sync) in a graph
            angle = reduced_angles_unchecked(positions, self._frequency_pieces)  # [..., d/2]
            return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)  # [..., d]
        # The cache covers 0 … max position; far positions (a decoder at offset 10^6) are computed
        # directly rather than growing a table of every position before them.
        if positions.numel() and 0 <= int(positions.min()) and int(positions.max()) < CACHE_POSITIONS:
            self._grow(int(positions.max()) + 1)
            return self.table[positions]  # [..., d_model]
        return sinusoidal_table(positions, self.d_model, base=self.base, dtype=torch.float64)

    @property
    def views(self) -> frozenset[str]:
        """Its codes, and on one axis their frequencies, the closed form of their dot products and the
        fixed map that shifts them."""
        one_axis = {"codes", "frequencies", "closed_form_dot", "shift_map"}
        return frozenset(one_axis if self.axes == 1 else {"codes"})

    def frequency_pieces(self) -> torch.Tensor | None:
        """ω_k = base^(−2k/d_model) to 60 digits, as float64 pieces ``[d_model/2, 4]`` (one axis only)."""
        return self._frequency_pieces if self.axes == 1 else None

    def closed_form_dot(self, distances: torch.Tensor) -> torch.Tensor | None:
        """PE[i]·PE[i + d] = Σ_k cos(d·ω_k) (seeds 000 and 002), float64, shaped like ``distances``."""
        if self.axes > 1:
            return None
        cos, _ = exact_cos_sin(distances, self._frequency_pieces)  # [..., d/2]
        return cos.sum(dim=-1)

    def shift_map(self, offset: int) -> torch.Tensor | None:
        """M_k with PE(pos + k) = M_k·PE(pos) (seed 004 §2.2, property 3), float64 ``[d, d]``.

        [sin(a+b), cos(a+b)] = [[cos b, sin b], [−sin b, cos b]]·[sin a, cos a], b = k·ω_i.
        """
        if self.axes > 1:
            return None
        angle = reduced_angles(torch.tensor(offset), self._frequency_pieces)  # [d/2]
        cos, sin = angle.cos(), angle.sin()
        matrix = torch.zeros(self.d_model, self.d_model, dtype=torch.float64)
        even, odd = torch.arange(0, self.d_model, 2), torch.arange(1, self.d_model, 2)
        matrix[even, even], matrix[even, odd] = cos, sin
        matrix[odd, even], matrix[odd, odd] = -sin, cos
        return matrix

    def extra_repr(self) -> str:
        axes = f", axes={self.axes}, layout={self.layout!r}" if self.axes > 1 else ""
        return f"{super().extra_repr()}, base={self.base}{axes}"


#: What posenc says about :class:`SinusoidalEncoding` (``register`` takes it with the class).
SINUSOIDAL_DESCRIPTION = Description(
    label="Sinusoidal",
    where_it_acts="added to (or concatenated with) the token embeddings",
    used_by="the original Transformer",
    parameter_formula="0",
    seed_row=SeedRow(1, "Sinusoidal", "0", "Moderate", "Implicit"),
    figures={
        "flat-lines": "One flat line per distance: the dot product of two codes is the same wherever the pair "
        "sits, and equals the closed form Σ_k cos(d·ω_k) (dashed).",
        "matrix-rows": "Each row is one position's code: the first dimensions oscillate fast down the rows, "
        "later ones ever more slowly, until the last columns hold sin ≈ 0 and cos ≈ 1 for every position shown.",
        "matrix-columns": "The same numbers as the matrix P of seed 000: each column is one position, each row "
        "one dimension, with sin in the even rows and cos in the odd ones.",
        "gram": "Stripes parallel to the diagonal: PE_i·PE_j depends only on i − j (a Toeplitz matrix), "
        "largest (d/2) on the diagonal where i = j.",
        "wavelengths": "A straight line on a log axis: the wavelengths grow geometrically from 2π positions "
        "for the first pair to 2π·base^((d − 2)/d) for the last.",
    },
)


class SinusoidalGridEncoding(SinusoidalEncoding):
    """2-D sin-cos codes of image patches (MAE, He et al., 2022, https://arxiv.org/abs/2111.06377; diffusers).

    :class:`SinusoidalEncoding` with ``axes=2, layout="mae"``: half the width codes the patch's column,
    half its row, sines then cosines. Positions ``[s, 2]`` or ``[b, s, 2]`` (row, column), e.g.
    :func:`posenc.functional.grid_positions`; integer or fractional (diffusers' interpolation scale).

    PixArt's and SD3's codes (diffusers' ``PatchEmbed``; Chen et al., 2023, https://arxiv.org/abs/2310.00426;
    Esser et al., 2024, https://arxiv.org/abs/2403.03206): with ``base_size`` (the training latent's side in
    patches), ``interpolation_scale`` and, for SD3, ``max_size`` (``pos_embed_max_size``: a centre crop of
    its table), integer patch indices of the ``grid`` (h, w) are placed as
    :func:`~posenc.functional.normalized.sincos_grid_scale` says; ``for_grid`` gives the encoding of
    another resolution.
    """

    def __init__(
        self,
        d_model: int,
        *,
        axes: int = 2,
        layout: str = "mae",
        base_size: float | None = None,
        interpolation_scale: float = 1.0,
        max_size: int | None = None,
        grid: Sequence[int] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(d_model, axes=axes, layout=layout, **kwargs)
        self.base_size, self.interpolation_scale, self.max_size = base_size, interpolation_scale, max_size
        self.grid = None if grid is None else tuple(grid)
        self.grid_scale = None  # (offset, factor) per axis, or None: positions are used as given
        if base_size is None:
            given = {"interpolation_scale": interpolation_scale != 1.0, "max_size": max_size, "grid": grid}
            named = [name for name, value in given.items() if value not in (None, False)]
            if named:
                raise ValueError(f"{', '.join(named)} place patches for base_size=…; give base_size too")
            return
        if self.axes != 2 or self.grid is None:
            raise ValueError(
                f"base_size places the patches of a 2-D grid: give grid=(height, width), got axes={self.axes}, "
                f"grid={grid!r}"
            )
        self.grid_scale = sincos_grid_scale(
            self.grid, base_size=base_size, interpolation_scale=interpolation_scale, max_size=max_size
        )

    def codes(self, positions: torch.Tensor) -> torch.Tensor:
        if self.grid_scale is None:
            return super().codes(positions)
        if positions.is_floating_point():
            raise ValueError(
                "with base_size, positions are integer patch indices (row, column) of the grid, which the "
                f"encoding places itself; got {positions.dtype} coordinates"
            )
        offset, factor = (
            torch.tensor(v, dtype=torch.float64, device=positions.device) for v in self.grid_scale
        )
        return super().codes((positions.to(torch.float64) + offset) * factor)  # [..., s, d]

    def for_grid(self, trained: tuple[int, ...], grid: tuple[int, ...]) -> SinusoidalGridEncoding:
        """With ``base_size``: the same codes placed for patches of ``grid`` (PixArt's and SD3's other
        resolutions); otherwise itself."""
        if self.grid_scale is None:
            return self
        moved = copy.deepcopy(self)
        moved.grid = tuple(grid)
        moved.grid_scale = sincos_grid_scale(
            moved.grid,
            base_size=self.base_size,
            interpolation_scale=self.interpolation_scale,
            max_size=self.max_size,
        )
        return moved


#: What posenc says about :class:`SinusoidalGridEncoding` (``register`` takes it with the class).
SINUSOIDAL_GRID_DESCRIPTION = Description(
    label="2-D sin-cos (MAE)",
    where_it_acts="2-D sin-cos codes of image patches, added to their embeddings",
    used_by="MAE, DiT, PixArt and SD3 (diffusers; base_size, interpolation_scale, max_size)",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_model": 64},
    figures={
        "patch-similarity": "The cosine similarity of one patch's code to every patch's: highest at the patch, "
        "falling off along its row and its column (each half of the code sees one axis).",
        "logit-shift": "An absolute code: moving the grid moves the logits.",
    },
    lab_not_applicable="its positions are coordinates on two axes (image patches); the lab's tasks are 1-D sequences",
)
