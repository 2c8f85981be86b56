"""Coordinates as vision and video models make them: normalised grids, video time in seconds of a base
frame rate, and training-time augmentation of the coordinates (the 2-D counterpart of randomized
positions, :mod:`posenc.functional.randomized`).

- :func:`normalized_grid`: patch coordinates mapped into [−1, 1], centred in their cells or at their
  corners, divided per axis by the grid's side, by its shorter or longer side, or by a base grid of
  fixed size (DINOv3, Siméoni et al., 2025, https://arxiv.org/abs/2508.10104; LTX-Video, HaCohen et al.,
  2024, https://arxiv.org/abs/2501.00103).
- :func:`video_positions`: (t, h, w) of a video's patches, time rescaled to a base frame rate
  (Cosmos, NVIDIA, 2025, https://arxiv.org/abs/2501.03575: frame t at t·base_fps/fps).
- :func:`diagonal_video_positions`: VideoRoPE's diagonal layout with adjustable temporal spacing
  (Wei et al., 2025, https://arxiv.org/abs/2502.05173), also HoPE's (Li et al., 2025,
  https://arxiv.org/abs/2505.20444) with its temporal scaling.
- :func:`sincos_grid_positions`: PixArt's and SD3's coordinates for 2-D sin-cos codes (base size,
  interpolation scale, SD3's centre crop of a larger table).
- :class:`CoordinateAugmentation`: DINOv3's shift, jitter and rescale of the coordinates, drawn from a
  generator; the encodings draw once per training call and move queries and keys alike.
- :class:`NormalizedCoordinates`: an encoding's declaration that it reads a grid's patches at
  :func:`normalized_grid`'s coordinates (DINOv3's cell centres in [−1, 1]) rather than at integer indices.

Notation used for tensor shapes: s tokens (Π sizes), n axes. Coordinates are float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from posenc._validation import check_choice, check_positive_float, check_positive_ints

#: How :func:`normalized_grid` divides each axis: by its own side, by the shorter or the longer side.
NORMALIZATIONS = ("separate", "min", "max")


def _per_axis(name: str, value: float | Sequence[float], n: int) -> tuple[float, ...]:
    """One positive finite number for every axis, or one per axis."""
    values = [value] * n if isinstance(value, int | float) else list(value)
    if len(values) != n:
        raise ValueError(f"{name} must be one number or one per axis ({n}), got {value!r}")
    return tuple(check_positive_float(f"{name}[{a}]", v) for a, v in enumerate(values))


def normalized_grid(
    sizes: Sequence[int],
    *,
    by: str | Sequence[float] = "separate",
    centred: bool = True,
    step: float | Sequence[float] = 1.0,
    offset: float = 0.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Coordinates of a grid's patches in [−1, 1], row-major (the last axis fastest), float64 ``[s, n]``.

    Patch i of axis a sits at x = 2·(i + ½ + offset)·step_a / extent_a − 1 when ``centred`` (DINOv3's
    cell centres; its ``grid_offset`` is ``offset``), or x = 2·i·step_a / extent_a − 1 at the cells'
    corners (LTX-Video). ``by`` names the extent: ``"separate"`` each axis its own side (DINOv3's default),
    ``"min"``/``"max"`` the shorter/longer side for every axis (the other axis then spans less, or more,
    than [−1, 1]), or a number per axis: a base grid (LTX's ``base_num_frames, base_height, base_width``,
    with ``step`` its patch size times interpolation scale).

    Raises:
        ValueError: an empty grid (a side < 1, named), an unknown ``by``, a non-positive step or extent,
            a non-finite offset.
    """
    sizes = check_positive_ints("sizes", sizes)
    n = len(sizes)
    if isinstance(by, str):
        by = check_choice("by", by, NORMALIZATIONS)
        extent = {"separate": sizes, "min": (min(sizes),) * n, "max": (max(sizes),) * n}[by]
        extent = tuple(float(e) for e in extent)
    else:
        extent = _per_axis("by", by, n)
    step = _per_axis("step", step, n)
    if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
        raise ValueError(f"offset must be a finite number, got {offset!r}")
    shift = 0.5 + offset if centred else 0.0
    axes = [
        2.0 * (torch.arange(size, dtype=torch.float64, device=device) + shift) * step[a] / extent[a] - 1.0
        for a, size in enumerate(sizes)
    ]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, n)  # [s, n]


@dataclass(frozen=True)
class NormalizedCoordinates:
    """The coordinates an encoding reads on a grid of patches, where they are not the integer indices
    (row, column): :func:`normalized_grid` of the grid with these settings (its defaults are DINOv3's
    cell centres, each axis in [−1, 1] by its own side). An encoding declares it in its description
    (``grid_coordinates``); a task that lays out a grid asks :meth:`grid` for the coordinates.

    Raises:
        ValueError: an unknown ``by``, a non-finite offset; TypeError: a ``centred`` that is not a bool.
    """

    by: str | tuple[float, ...] = "separate"  # the extent each axis is divided by (see normalized_grid)
    centred: bool = True  # cell centres (DINOv3), else corners (LTX-Video)
    step: float | tuple[float, ...] = 1.0  # the spacing of patches, per axis or one for all
    offset: float = 0.0  # DINOv3's grid_offset

    def __post_init__(self) -> None:
        if isinstance(self.by, str):
            check_choice("by", self.by, NORMALIZATIONS)
        if not isinstance(self.centred, bool):
            raise TypeError(f"centred must be a bool, got {self.centred!r}")
        offset = self.offset
        if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
            raise ValueError(f"offset must be a finite number, got {self.offset!r}")

    def grid(self, sizes: Sequence[int], device: torch.device | str | None = None) -> torch.Tensor:
        """Coordinates of the grid ``sizes`` (row-major), float64 ``[s, n]``."""
        return normalized_grid(
            sizes, by=self.by, centred=self.centred, step=self.step, offset=self.offset, device=device
        )


def fps_time_scale(fps: float, base_fps: float) -> float:
    """The factor on frame indices that puts a video of ``fps`` frames a second on the time axis of
    ``base_fps`` (Cosmos: base_fps / fps). Raises ValueError for fps or base_fps ≤ 0, naming it."""
    return check_positive_float("base_fps", base_fps) / check_positive_float("fps", fps)


def video_positions(
    sizes: Sequence[int],
    *,
    fps: float | None = None,
    base_fps: float = 24.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(t, h, w) of a video's patches, row-major, float64 ``[t·h·w, 3]``: frame t at t·base_fps/fps
    (Cosmos's rescaling of time to its training frame rate), integer rows and columns; ``fps`` None (an
    image, or frames taken as they come) leaves t as the frame index.

    Raises:
        ValueError: sizes that are not three positive ints, fps or base_fps ≤ 0 (named).
    """
    sizes = check_positive_ints("sizes", sizes)
    if len(sizes) != 3:
        raise ValueError(f"sizes must be (frames, height, width), got {sizes}")
    scale = 1.0 if fps is None else fps_time_scale(fps, base_fps)
    axes = [torch.arange(size, dtype=torch.float64, device=device) for size in sizes]
    axes[0] = axes[0] * scale
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)  # [s, 3]


def diagonal_video_positions(
    sizes: Sequence[int],
    *,
    start: float = 0.0,
    time_spacing: float = 1.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """VideoRoPE's diagonal layout (arXiv 2502.05173, §3.3) with adjustable temporal spacing δ (§3.4):
    patch (t, h, w) of a T×H×W video after text ending at ``start`` sits at

        (start + δ·t,  start + δ·t + h − H/2,  start + δ·t + w − W/2),

    so each frame's centre lies on the text's diagonal t = h = w and frames advance along it by δ.
    HoPE's dynamic temporal scaling (arXiv 2505.20444) is δ drawn per video in training. float64 ``[s, 3]``.

    Raises:
        ValueError: sizes that are not three positive ints, a non-positive ``time_spacing``.
    """
    sizes = check_positive_ints("sizes", sizes)
    if len(sizes) != 3:
        raise ValueError(f"sizes must be (frames, height, width), got {sizes}")
    spacing = check_positive_float("time_spacing", time_spacing)
    frames, height, width = sizes
    t, h, w = torch.meshgrid(
        *(torch.arange(size, dtype=torch.float64, device=device) for size in sizes), indexing="ij"
    )
    time = start + spacing * t
    return torch.stack((time, time + h - height / 2, time + w - width / 2), dim=-1).reshape(-1, 3)


def sincos_grid_scale(
    sizes: Sequence[int],
    *,
    base_size: float,
    interpolation_scale: float = 1.0,
    max_size: int | None = None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(offset, factor)`` per axis with which PixArt's and SD3's 2-D sin-cos codes (diffusers'
    ``PatchEmbed``) place patch i of an h × w grid at (i + offset)·factor:

    - PixArt (``max_size`` None): offset 0, factor base_size/(n·interpolation_scale): every resolution
      spans the base grid's range (``base_size`` = the training latent's side in patches).
    - SD3 (``max_size`` = ``pos_embed_max_size``): the table of a max_size × max_size grid, centre-cropped
      to h × w: offset ⌊(max_size − n)/2⌋, factor base_size/(max_size·interpolation_scale).

    Raises:
        ValueError: an empty grid or one not 2-D, a non-positive base_size, scale or max_size, a side
            larger than ``max_size`` (named).
    """
    sizes = check_positive_ints("sizes", sizes)
    if len(sizes) != 2:
        raise ValueError(f"sizes must be (height, width) in patches, got {sizes}")
    base_size = check_positive_float("base_size", base_size)
    scale = check_positive_float("interpolation_scale", interpolation_scale)
    if max_size is None:
        return (0.0, 0.0), tuple(base_size / (side * scale) for side in sizes)
    max_size = check_positive_ints("max_size", (max_size,))[0]
    for name, side in zip(("height", "width"), sizes, strict=True):
        if side > max_size:
            raise ValueError(f"{name} {side} (in patches) is larger than max_size={max_size}")
    offsets = tuple(float((max_size - side) // 2) for side in sizes)
    return offsets, (base_size / (max_size * scale),) * 2


def sincos_grid_positions(
    sizes: Sequence[int],
    *,
    base_size: float,
    interpolation_scale: float = 1.0,
    max_size: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(row, column) coordinates of PixArt's and SD3's 2-D sin-cos codes (:func:`sincos_grid_scale`),
    row-major, float64 ``[h·w, 2]``, for :class:`~posenc.encodings.sinusoidal.SinusoidalGridEncoding`
    (whose ``base_size``, ``interpolation_scale`` and ``max_size`` options map integer patch indices so)."""
    offsets, factors = sincos_grid_scale(
        sizes, base_size=base_size, interpolation_scale=interpolation_scale, max_size=max_size
    )
    sizes = tuple(sizes)
    axes = [
        (torch.arange(side, dtype=torch.float64, device=device) + offset) * factor
        for side, offset, factor in zip(sizes, offsets, factors, strict=True)
    ]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 2)


def _factor(name: str, value: float | None) -> float | None:
    """A log-uniform range factor F (draws in [1/F, F]): None, or a finite F ≥ 1 (below 1 the range
    turns inside out; at or below 0 it would flip or collapse the axis)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number ≥ 1 or None, got {value!r}")
    if not math.isfinite(value) or value < 1:
        raise ValueError(
            f"{name}={value} would flip or shrink the axis's range: it is a factor F ≥ 1, the coordinates "
            f"scaled by a draw in [1/F, F]"
        )
    return float(value)


@dataclass(frozen=True)
class CoordinateAugmentation:
    """Training-time augmentation of coordinates, as DINOv3 draws it (one draw per call, every token):

    x' = (x + shift_a) · jitter_a · rescale, with shift_a uniform in [−``shift``, ``shift``] per axis,
    jitter_a log-uniform in [1/``jitter``, ``jitter``] per axis and rescale log-uniform in
    [1/``rescale``, ``rescale``], one for every axis. None leaves that part out. The draws are float32
    from the generator in DINOv3's order (shifts, jitters, rescale), so a seed gives DINOv3's draw.

    Raises:
        ValueError: a negative or non-finite shift, a jitter or rescale below 1 (the range would flip
            the axis or turn inside out), named with the value.
    """

    shift: float | None = None
    jitter: float | None = None
    rescale: float | None = None

    def __post_init__(self) -> None:
        if self.shift is not None:
            if isinstance(self.shift, bool) or not isinstance(self.shift, int | float):
                raise TypeError(f"shift must be a number ≥ 0 or None, got {self.shift!r}")
            if not math.isfinite(self.shift) or self.shift < 0:
                raise ValueError(f"shift must be finite and ≥ 0 (a range [−shift, shift]), got {self.shift}")
        object.__setattr__(self, "jitter", _factor("jitter", self.jitter))
        object.__setattr__(self, "rescale", _factor("rescale", self.rescale))

    @property
    def active(self) -> bool:
        return any(value is not None for value in (self.shift, self.jitter, self.rescale))

    def draw(self, axes: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(offset, factor)``, float64 ``[n]`` each: x' = (x + offset)·factor."""
        offset = torch.zeros(axes, dtype=torch.float64)
        factor = torch.ones(axes, dtype=torch.float64)
        if self.shift is not None:
            offset = torch.empty(axes).uniform_(-self.shift, self.shift, generator=generator).double()
        if self.jitter is not None:
            limit = math.log(self.jitter)
            factor = factor * torch.empty(axes).uniform_(-limit, limit, generator=generator).double().exp()
        if self.rescale is not None:
            limit = math.log(self.rescale)
            factor = factor * torch.empty(1).uniform_(-limit, limit, generator=generator).double().exp()
        return offset, factor


def augment_coordinates(
    coordinates: torch.Tensor, offset: torch.Tensor, factor: torch.Tensor
) -> torch.Tensor:
    """(x + offset)·factor per axis, float64 ``[..., s, n]`` (a draw of :meth:`CoordinateAugmentation.draw`)."""
    device = coordinates.device
    return (coordinates.to(torch.float64) + offset.to(device)) * factor.to(device)


__all__ = [
    "NORMALIZATIONS",
    "CoordinateAugmentation",
    "NormalizedCoordinates",
    "augment_coordinates",
    "diagonal_video_positions",
    "fps_time_scale",
    "normalized_grid",
    "sincos_grid_positions",
    "sincos_grid_scale",
    "video_positions",
]
