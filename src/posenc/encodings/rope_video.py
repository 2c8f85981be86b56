"""M-RoPE as the video-language models configure it: VideoRoPE, HoPE, Hunyuan's XD-RoPE, Ernie 4.5-VL.

Each is :class:`~posenc.encodings.rope.RotaryEncoding` with one spectrum split among axes (``sections``),
registered under its own name as a preset: VideoRoPE and Ernie with time on the lowest frequencies after
the spatial axes alternating (``section_layout="time_last"``), HoPE the same with the time frequencies
at zero, XD-RoPE four contiguous sections (P, W, H, T) on an NTK-alpha base.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from posenc._validation import check_positive_float, check_positive_ints
from posenc.encodings.description import Description
from posenc.encodings.rope import RotaryEncoding
from posenc.encodings.rope_schemes import Sections, Spectrum
from posenc.encodings.rope_vision import VIDEO_GRID, VISION_FIGURES

#: Why the lab's sequence tasks do not train encodings of video-language positions.
VIDEO_ONLY = "on text alone it is 1-D RoPE (every axis at the same position); its axes need video"


def time_last_sections(pairs: int) -> tuple[int, int, int]:
    """(t, h, w) pairs in VideoRoPE's proportion (16, 24, 24 of 64): a quarter for time, the rest halved."""
    if pairs < 3:
        raise ValueError(f"a video RoPE needs a pair for each of t, h and w: {pairs} pairs are too few")
    space = (pairs - max(1, pairs // 4)) // 2
    return pairs - 2 * space, space, space


class VideoRotaryEncoding(RotaryEncoding):
    """VideoRoPE (Wei et al., 2025, https://arxiv.org/abs/2502.05173): M-RoPE with low-frequency temporal
    allocation, h and w alternating over the high frequencies and t on the lowest
    (``section_layout="time_last"``). Its diagonal layout and adjustable temporal spacing δ are the
    coordinates :func:`~posenc.functional.normalized.diagonal_video_positions` gives. Positions (t, h, w).
    """

    def __init__(self, d_head: int, *, sections: Sequence[int] | None = None, **kwargs) -> None:
        if sections is None:
            sections = time_last_sections((kwargs.get("rotary_dim") or d_head) // 2)
        super().__init__(d_head, sections=sections, section_layout="time_last", **kwargs)


VIDEOROPE_DESCRIPTION = Description(
    label="VideoRoPE",
    where_it_acts="rotates q and k, h and w on the high frequencies, t on the lowest",
    used_by="VideoRoPE (a preset of rope with sections, section_layout='time_last')",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 16},
    figures=VISION_FIGURES,
    lab_not_applicable=VIDEO_ONLY,
)


@dataclass(frozen=True)
class ZeroTimeSections(Sections):
    """Sections whose axis 0 (time) turns with frequency 0: HoPE's hybrid frequency allocation."""

    def spectrum(self) -> Spectrum:
        inv_freq, axis, factor = super().spectrum()
        return torch.where(axis == 0, torch.zeros_like(inv_freq), inv_freq), axis, factor


class HoPERotaryEncoding(RotaryEncoding):
    """HoPE (Li et al., 2025, https://arxiv.org/abs/2505.20444): VideoRoPE's allocation with the temporal
    frequencies set to zero (hybrid frequency allocation: those pairs do not turn, NoPE on time, which
    keeps the semantic preference at any distance). Its dynamic temporal scaling is the spacing δ of
    :func:`~posenc.functional.normalized.diagonal_video_positions`, drawn per video in training.
    """

    def __init__(
        self,
        d_head: int,
        *,
        sections: Sequence[int] | None = None,
        base: float = 10000.0,
        layout: str = "half",
        **kwargs,
    ) -> None:
        sections = (
            time_last_sections(d_head // 2) if sections is None else check_positive_ints("sections", sections)
        )
        scheme = ZeroTimeSections(2 * sum(sections), base, sections=sections, section_layout="time_last")
        super().__init__(d_head, scheme=scheme, layout=layout, **kwargs)


HOPE_DESCRIPTION = Description(
    label="HoPE",
    where_it_acts="rotates q and k by h and w on the high frequencies; the time pairs stay still",
    used_by="HoPE (a preset of rope: VideoRoPE's sections with zero temporal frequency)",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 16},
    figures=VISION_FIGURES,
    lab_not_applicable=VIDEO_ONLY,
)


class XDRotaryEncoding(RotaryEncoding):
    """Hunyuan's XD-RoPE (vLLM's ``XDRotaryEmbedding``): one spectrum on an NTK-alpha base
    (base·alpha^(r/(r−2)), ``scaling="ntk_alpha"``) split into four contiguous sections turning with the
    coordinates (P, W, H, T): the text position, width, height and time. Default sections r/8 each.
    """

    def __init__(
        self, d_head: int, *, sections: Sequence[int] | None = None, alpha: float = 1.0, **kwargs
    ) -> None:
        if sections is None:
            pairs = (kwargs.get("rotary_dim") or d_head) // 2
            if pairs < 4:
                raise ValueError(f"XD-RoPE needs a pair for each of P, W, H and T: {pairs} pairs are too few")
            sections = (pairs - 3 * (pairs // 4),) + (pairs // 4,) * 3
        alpha = check_positive_float("alpha", alpha)
        if alpha != 1.0:
            if kwargs.get("scaling") is not None:
                raise ValueError(
                    f"alpha={alpha} is XD-RoPE's ntk_alpha scaling; scaling={kwargs['scaling']!r} too"
                )
            kwargs.update(scaling="ntk_alpha", scaling_args={"alpha": alpha})
        super().__init__(d_head, sections=sections, **kwargs)


XDROPE_DESCRIPTION = Description(
    label="XD-RoPE",
    where_it_acts="rotates q and k, one NTK-alpha spectrum split into (P, W, H, T) sections",
    used_by="Hunyuan (a preset of mrope: four contiguous sections, ntk_alpha)",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 16},
    figures=VISION_FIGURES,
    lab_not_applicable=VIDEO_ONLY,
    grid_not_applicable="its four coordinates (P, W, H, T) have no reading of a 2-D grid's (row, column) alone",
)


def ernie_sections(pairs: int) -> tuple[int, int, int]:
    """(t, h, w) pairs in Ernie 4.5-VL's proportion (20, 22, 22 of 64)."""
    if pairs < 3:
        raise ValueError(f"Ernie's 3-D RoPE needs a pair for each of t, h and w: {pairs} pairs are too few")
    space = max(1, 11 * pairs // 32)
    return pairs - 2 * space, space, space


class ErnieRotaryEncoding(RotaryEncoding):
    """Ernie 4.5-VL's 3-D RoPE (vLLM's ``Ernie4_5_VLRotaryEmbedding``): one spectrum, pairs
    ``[h w h w … t t t]``: h and w alternating over the high frequencies, t the last (lowest) ones
    (``section_layout="time_last"``). Positions (t, h, w); Ernie's ``mrope_section`` (h, w, t) is
    ``sections=(t, h, w)`` here.
    """

    def __init__(self, d_head: int, *, sections: Sequence[int] | None = None, **kwargs) -> None:
        if sections is None:
            sections = ernie_sections((kwargs.get("rotary_dim") or d_head) // 2)
        super().__init__(d_head, sections=sections, section_layout="time_last", **kwargs)


ERNIE_DESCRIPTION = Description(
    label="Ernie 4.5-VL 3-D RoPE",
    where_it_acts="rotates q and k, [h w h w … t t t] over one spectrum",
    used_by="Ernie 4.5-VL (a preset of mrope with section_layout='time_last')",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 16},
    figures=VISION_FIGURES,
    lab_not_applicable=VIDEO_ONLY,
)

__all__ = [
    "ERNIE_DESCRIPTION",
    "HOPE_DESCRIPTION",
    "VIDEOROPE_DESCRIPTION",
    "VIDEO_GRID",
    "XDROPE_DESCRIPTION",
    "ErnieRotaryEncoding",
    "HoPERotaryEncoding",
    "VideoRotaryEncoding",
    "XDRotaryEncoding",
    "ZeroTimeSections",
]
