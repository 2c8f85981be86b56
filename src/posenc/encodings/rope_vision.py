"""RoPE as the 2025 image and video generators and encoders configure it: DINOv3, LTX-Video, Cosmos.

Each is a preset: :class:`~posenc.encodings.rope.RotaryEncoding` with its frequencies given per axis as
data (:class:`~posenc.functional.rope.AxisFrequencies`), built under its own name so that analysis, the
figures and the report show it with its model's defaults. The coordinates are the models' own:
:func:`~posenc.functional.normalized.normalized_grid` (DINOv3, LTX) and
:func:`~posenc.functional.normalized.video_positions` (Cosmos's time at its base frame rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from posenc._validation import check_positive_floats
from posenc.encodings.description import Description
from posenc.encodings.rope import RotaryEncoding
from posenc.encodings.rope_axes import GRID_ONLY
from posenc.functional.normalized import CoordinateAugmentation, NormalizedCoordinates
from posenc.functional.rope import AxisFrequencies, geometric_frequencies

VISION_FIGURES = {
    "logit-shift": "Shifting every coordinate by the same vector leaves the logits unchanged: q·k depends "
    "only on the offset along each axis.",
}
#: Why the lab's 2-D grid does not train an encoding of video coordinates (t, h, w) in its own units.
VIDEO_GRID = (
    "its coordinates are a video's (t, h, w) in the model's own units; the lab's grid is one 2-D image"
)


class DinoV3RotaryEncoding(RotaryEncoding):
    """DINOv3's RoPE (Siméoni et al., 2025, https://arxiv.org/abs/2508.10104; timm's ``RotaryEmbeddingDinoV3``).

    Coordinates (h, w) in [−1, 1], cell centres normalised per axis or by the shorter/longer side
    (:func:`~posenc.functional.normalized.normalized_grid`); each axis turns d/4 pairs by 2π·x/period,
    periods temperature^(4i/d) (``temperature``, 100) or geometric from ``min_period`` to ``max_period``;
    the axes' pairs in two runs, ``layout="half"`` as DINOv3 (``"interleaved"`` for its other option).
    In training, ``shift_coords``, ``jitter_coords`` and ``rescale_coords`` augment the coordinates
    (:class:`~posenc.functional.normalized.CoordinateAugmentation`), drawn from ``augmentation_seed``.
    """

    def __init__(
        self,
        d_head: int,
        *,
        temperature: float = 100.0,
        min_period: float | None = None,
        max_period: float | None = None,
        shift_coords: float | None = None,
        jitter_coords: float | None = None,
        rescale_coords: float | None = None,
        **kwargs,
    ) -> None:
        if d_head % 4:
            raise ValueError(
                f"DINOv3 gives each of two axes d_head/4 pairs: d_head={d_head} is not a multiple of 4"
            )
        if (min_period is None) != (max_period is None):
            raise ValueError(
                f"give min_period and max_period together, got {min_period!r} and {max_period!r}"
            )
        if min_period is None:  # 2π / temperature^(2i/(d/2)): the base spectrum of a d/2-wide axis, × 2π
            axis = AxisFrequencies(d_head // 2, base=temperature, scale=2 * math.pi)
        else:
            axis = AxisFrequencies(d_head // 2, periods=(min_period, max_period))
        augmentation = CoordinateAugmentation(shift_coords, jitter_coords, rescale_coords)
        if augmentation.active and kwargs.get("augmentation") is not None:
            raise ValueError("give shift_coords/jitter_coords/rescale_coords or augmentation=…, not both")
        kwargs.setdefault("augmentation", augmentation if augmentation.active else None)
        super().__init__(d_head, frequencies=(axis, axis), **kwargs)


DINOV3_DESCRIPTION = Description(
    label="DINOv3 RoPE",
    where_it_acts="rotates q and k by 2π·x/period on normalised (h, w) coordinates",
    used_by="DINOv3 (a preset of rope with per-axis frequencies from periods)",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 16},
    figures=VISION_FIGURES,
    lab_not_applicable=GRID_ONLY,
    grid_coordinates=NormalizedCoordinates(),  # DINOv3's default: cell centres, each axis by its own side
)


def ltx_frequencies(pairs: int, theta: float = 10000.0) -> AxisFrequencies:
    """LTX-Video's frequencies of one axis: θ^(k/(n−1))·π/2, k = 0 … n − 1 (from π/2 to θ·π/2)."""
    return AxisFrequencies(2 * pairs, frequencies=geometric_frequencies(pairs, 1.0, theta) * (math.pi / 2))


class LTXRotaryEncoding(RotaryEncoding):
    """LTX-Video's RoPE (HaCohen et al., 2024, https://arxiv.org/abs/2501.00103; diffusers'
    ``LTXVideoRotaryPosEmbed``).

    Coordinates (t, h, w) divided by a base grid and mapped to [−1, 1]
    (``normalized_grid(sizes, by=(20, 2048, 2048), centred=False, step=…)``); each axis has n = ⌊d/6⌋
    frequencies θ^(k/(n−1))·π/2 (:func:`ltx_frequencies`), the axes interleaved per frequency
    (``pair_layout="frequencies"``), pairs (2k, 2k+1), and the d mod 6 channels left over unrotated at
    the front. LTX rotates the whole inner width before splitting heads: its ``dim`` is this ``d_head``
    with q as ``[b, 1, s, inner]``.
    """

    def __init__(self, d_head: int, *, theta: float = 10000.0, **kwargs) -> None:
        if d_head < 6:
            raise ValueError(f"LTX gives each of three axes ⌊d_head/6⌋ pairs: d_head={d_head} has none")
        axis = ltx_frequencies(d_head // 6, theta)
        kwargs.setdefault("layout", "interleaved")
        kwargs.setdefault("unrotated", "first")
        super().__init__(d_head, frequencies=(axis, axis, axis), pair_layout="frequencies", **kwargs)


LTX_DESCRIPTION = Description(
    label="LTX-Video RoPE",
    where_it_acts="rotates q and k on (t, h, w) in [−1, 1], the axes interleaved per frequency",
    used_by="LTX-Video (a preset of rope with explicit frequencies, pair_layout='frequencies')",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 16},
    figures=VISION_FIGURES,
    lab_not_applicable=GRID_ONLY,
    grid_not_applicable=VIDEO_GRID,
)


def cosmos_widths(d_head: int) -> tuple[int, int, int]:
    """(t, h, w) channels of Cosmos: ⌊d/6⌋·2 for h and for w, the rest for t."""
    space = d_head // 6 * 2
    return d_head - 2 * space, space, space


class CosmosRotaryEncoding(RotaryEncoding):
    """Cosmos's RoPE (NVIDIA, 2025, https://arxiv.org/abs/2501.03575; diffusers' ``CosmosRotaryPosEmbed``).

    Axial over (t, h, w) with widths :func:`cosmos_widths`, each axis its own NTK base
    base·s_a^(d_a/(d_a − 2)) from ``rope_scale`` = (s_t, s_h, s_w) (2, 1, 1), ``layout="half"``; time
    in frames of the base frame rate (``video_positions(sizes, fps=fps, base_fps=24)``).
    """

    def __init__(
        self, d_head: int, *, base: float = 10000.0, rope_scale: Sequence[float] = (2.0, 1.0, 1.0), **kwargs
    ) -> None:
        scales = check_positive_floats("rope_scale", rope_scale, 3, "(t, h, w)")
        axes = []
        for name, width, scale in zip(("t", "h", "w"), cosmos_widths(d_head), scales, strict=False):
            if width < 2 or (width < 4 and scale != 1):  # NTK's exponent d/(d − 2) needs d ≥ 4
                need = 2 if scale == 1 else 4
                raise ValueError(
                    f"Cosmos's {name} axis gets {width} channels from d_head={d_head}; it needs {need}"
                )
            if scale == 1:
                axes.append(AxisFrequencies(width, base=base))
            else:
                axes.append(AxisFrequencies(width, base=base, scaling="ntk", scaling_args={"factor": scale}))
        super().__init__(d_head, frequencies=axes, **kwargs)


COSMOS_DESCRIPTION = Description(
    label="Cosmos RoPE",
    where_it_acts="rotates q and k, each of (t, h, w) its own channels and NTK base",
    used_by="Cosmos (a preset of rope with per-axis NTK bases)",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 24},
    figures=VISION_FIGURES,
    lab_not_applicable=GRID_ONLY,
    grid_not_applicable=VIDEO_GRID,
)
