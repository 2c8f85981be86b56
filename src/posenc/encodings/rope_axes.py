"""RoPE on several axes as the models configure it: axial (ViTs, Flux), M-RoPE (Qwen2-VL), RoPE-Mixed.

Each is :class:`~posenc.encodings.rope.RotaryEncoding` with its axes set (``build("rope", axes=…)``,
``sections=…``, ``mixed=True`` give the same modules); registered under their own names so that
analysis, the figures, the report and the lab show them with the defaults of the models that use them.
"""

from __future__ import annotations

from collections.abc import Sequence

from posenc.encodings.description import Description
from posenc.encodings.rope import RotaryEncoding

#: Why the lab's sequence tasks do not train encodings of positions on several axes.
GRID_ONLY = "its positions are coordinates on several axes (image patches); the lab's tasks are 1-D sequences"

GRID_FIGURES = {
    "patch-similarity": "One patch against the 14×14 grid: the rotated logit of equal unit vectors falls off "
    "along both axes, in a cross for axial RoPE (each axis its own channels) and along learned directions "
    "for RoPE-Mixed.",
    "logit-shift": "Shifting the whole grid along either axis, or both, leaves the logits unchanged: q·k "
    "depends only on the offset along each axis.",
}


class AxialRotaryEncoding(RotaryEncoding):
    """Axial RoPE (Heo et al., 2024, https://arxiv.org/abs/2403.13298; Flux): each axis its own frequencies.

    ``AxialRotaryEncoding(d_head)`` splits the head between two axes (rows, columns of patches);
    ``axes=(d_1, …, d_n)`` as Flux's ``axes_dim``. Positions ``[s, n]`` or ``[b, s, n]``.
    """

    def __init__(self, d_head: int, *, axes: int | Sequence[int] = 2, **kwargs) -> None:
        super().__init__(d_head, axes=axes, **kwargs)


#: What posenc says about :class:`AxialRotaryEncoding` (``register`` takes it with the class).
AXIAL_DESCRIPTION = Description(
    label="Axial RoPE",
    where_it_acts="rotates q and k, each coordinate axis its own channels",
    used_by="Flux, RoPE-ViT, EVA-02",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 64, "base": 100.0},  # RoPE-ViT's axial base for 14×14 patch grids
    figures=GRID_FIGURES,
    lab_not_applicable=GRID_ONLY,
)


def qwen2_vl_sections(pairs: int) -> tuple[int, int, int]:
    """(t, h, w) pairs in Qwen2-VL's proportion (16, 24, 24 of 64): a quarter for time, the rest halved."""
    if pairs < 3:
        raise ValueError(
            f"M-RoPE needs a pair for each of t, h and w: rotary_dim/2 = {pairs} pairs are too few"
        )
    time = max(1, pairs // 4)
    height = (pairs - time) // 2
    return time, height, pairs - time - height


def qwen3_vl_sections(pairs: int) -> tuple[int, int, int]:
    """(t, h, w) pairs in Qwen3-VL's proportion (24, 20, 20 of 64): 5/16 each for h and w, the rest time.

    Interleaved, h and w each take every third pair below 3 × their count: 5/16 of the pairs fits.
    """
    if pairs < 3:
        raise ValueError(
            f"M-RoPE needs a pair for each of t, h and w: rotary_dim/2 = {pairs} pairs are too few"
        )
    space = max(1, 5 * pairs // 16)
    return pairs - 2 * space, space, space


class MultimodalRotaryEncoding(RotaryEncoding):
    """M-RoPE (Wang et al., 2024, https://arxiv.org/abs/2409.12191): one spectrum split into (t, h, w) sections.

    Text tokens sit on the diagonal t = h = w, where it is 1-D RoPE; image and video tokens at their
    patch's (t, h, w) after the text before them (:func:`posenc.functional.mrope_positions`). Default
    sections in Qwen2-VL's proportion (:func:`qwen2_vl_sections`); with ``section_layout="interleaved"``
    (Qwen3-VL), in Qwen3-VL's (:func:`qwen3_vl_sections`).
    """

    def __init__(self, d_head: int, *, sections: Sequence[int] | None = None, **kwargs) -> None:
        if sections is None:
            pairs = (kwargs.get("rotary_dim") or d_head) // 2
            interleaved = kwargs.get("section_layout") == "interleaved"
            sections = qwen3_vl_sections(pairs) if interleaved else qwen2_vl_sections(pairs)
        super().__init__(d_head, sections=sections, **kwargs)


#: What posenc says about :class:`MultimodalRotaryEncoding` (``register`` takes it with the class).
MROPE_DESCRIPTION = Description(
    label="M-RoPE",
    where_it_acts="rotates q and k, one spectrum split into (t, h, w) sections",
    used_by="Qwen2-VL, Qwen2.5-VL, Qwen3-VL",
    parameter_formula="0",
    seed_row=None,
    specimen_kwargs={"d_head": 128, "sections": (16, 24, 24), "base": 1000000.0},
    figures={
        "mrope-positions": "Text counts up on the diagonal; the image's patches keep t and spread over h and w "
        "from where the text stopped; the text after it resumes one past the image's largest position.",
        "patch-similarity": "Within one frame only the h and w sections turn: the similarity falls off along "
        "rows and columns, with the time section's channels unchanged.",
        "logit-shift": "Shifting every (t, h, w) position by the same vector leaves the logits unchanged.",
    },
    lab_not_applicable="on text alone M-RoPE is 1-D RoPE (every axis at the same position); its axes need images or video",
)


class MixedRotaryEncoding(RotaryEncoding):
    """RoPE-Mixed (Heo et al., 2024, https://arxiv.org/abs/2403.13298): learned frequencies per head over the axes.

    Needs ``n_heads``; frequencies start from the paper's initialisation (base 10) and are trained.
    Positions ``[s, n]`` or ``[b, s, n]``; q and k rotate per head, on the eager path, with float64
    angles that carry the gradient to the frequencies.
    """

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The head width and the heads (one set of frequencies per head)."""
        return {"d_head": d_model // n_heads, "n_heads": n_heads}

    def __init__(self, d_head: int, n_heads: int, *, axes: int = 2, **kwargs) -> None:
        super().__init__(d_head, axes=axes, mixed=True, n_heads=n_heads, **kwargs)


#: What posenc says about :class:`MixedRotaryEncoding` (``register`` takes it with the class).
ROPE_MIXED_DESCRIPTION = Description(
    label="RoPE-Mixed",
    where_it_acts="rotates q and k by learned per-head directions over the axes",
    used_by="RoPE-ViT (RoPE-Mixed)",
    parameter_formula="h·d/2·n (per head, a frequency per pair and axis; n = 2 axes)",
    seed_row=None,
    specimen_kwargs={"d_head": 64, "n_heads": 8},
    figures=GRID_FIGURES,
    lab_not_applicable=GRID_ONLY,
)
