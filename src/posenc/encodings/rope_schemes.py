"""Where a RoPE's frequencies come from: one small frozen object per scheme.

:class:`~posenc.encodings.rope.RotaryEncoding` rotates; its scheme says by which frequencies, on how
many axes, and whether they follow the length of a call:

- :class:`OneAxis`: one spectrum θ_k = base^(−2k/r) on one line, with its scaling (Su et al., 2021,
  https://arxiv.org/abs/2104.09864; the scalings of :func:`~posenc.functional.rope_inv_freq`).
- :class:`Sections`: that spectrum split among axes (M-RoPE, Wang et al., 2024,
  https://arxiv.org/abs/2409.12191).
- :class:`Axial`: each axis its own spectrum (Heo et al., 2024, https://arxiv.org/abs/2403.13298; Flux).
- :class:`Mixed`: learned per-head directions over the axes (RoPE-Mixed, Heo et al., 2024).
- :class:`PerAxis`: each axis's frequencies as data (:class:`~posenc.functional.rope.AxisFrequencies`:
  a base with its scaling, an explicit vector or a period range), its pairs laid out by axis or by
  frequency; :class:`Axial` is its preset with one base for every axis.

Each checks its own arguments, naming the bad value; :func:`rotary_scheme` maps RotaryEncoding's
keyword arguments to one and refuses those that do not go together. Every scheme keeps one contract:
``spectrum() -> (inv_freq float64 [r/2], axis int64 [r/2] or None, attention_factor)``,
``position_axes``, and what its frequencies follow (:class:`RotaryScheme`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from posenc._validation import (
    check_bool,
    check_choice,
    check_even_positive_int,
    check_positive_float,
    check_positive_int,
    check_positive_ints,
)
from posenc.functional.rope import (
    PAIR_LAYOUTS,
    SECTION_LAYOUTS,
    AxisFrequencies,
    axes_spectrum,
    rope_inv_freq,
    rope_mixed_frequencies,
    rope_section_axes,
)

#: How dynamic NTK picks the length its frequencies follow (``dynamic_length``).
DYNAMIC_LENGTHS = ("call", "longest")
#: What LongRoPE does when a call past the original length meets keys of earlier, shorter calls.
LONGROPE_SWITCHES = ("refuse", "rerotate")
NOT_ON_AXES = "scaling='dynamic' follows the longest 1-D position; it does not apply on axes"

Spectrum = tuple[torch.Tensor, torch.Tensor | None, float]


def _set(scheme: object, **values: object) -> None:
    """Store checked values on a frozen scheme."""
    for name, value in values.items():
        object.__setattr__(scheme, name, value)


class RotaryScheme:
    """The contract of a scheme; the class attributes are RotaryEncoding's arguments a scheme leaves at
    their defaults (a scheme that takes one declares it as its own field).

    ``spectrum()``: ``(θ_k float64 [r/2], the axis each pair turns with int64 [r/2] or None on one axis,
    the factor on cos and sin)``. ``position_axes``: coordinates of a position (columns of ``[s, n]``).
    ``learned``: the frequencies are trained per head (no shared tables). ``dynamic``: recomputed from each
    call's length (:meth:`spectrum_at`); ``switches_factors``: LongRoPE's second set
    (:meth:`long_spectrum`) past ``original_length``.
    """

    scaling = None
    scaling_args = MappingProxyType({})
    dynamic_length = "call"
    longrope_switch = "refuse"
    axes = None
    sections = None
    section_layout = "contiguous"
    n_heads = None
    learned = False
    dynamic = False
    switches_factors = False
    original_length = None

    def spectrum(self) -> Spectrum:
        raise NotImplementedError

    @property
    def follows_length(self) -> bool:
        """Whether the frequencies depend on the length of the call (dynamic NTK, LongRoPE's two sets)."""
        return self.dynamic or self.switches_factors

    def long_spectrum(self) -> torch.Tensor | None:
        """LongRoPE's long-factor frequencies, float64 ``[r/2]``; None without a second set."""
        return None

    def spectrum_at(self, length: int) -> torch.Tensor:
        """θ_k float64 ``[r/2]`` for a call whose positions reach ``length`` − 1."""
        return self.spectrum()[0]


def check_length_options(
    scaling: str | None, scaling_args: Mapping, dynamic_length: str, longrope_switch: str
) -> tuple[str, str]:
    """``dynamic_length`` and ``longrope_switch`` checked, each only with its own scaling."""
    dynamic_length = check_choice("dynamic_length", dynamic_length, DYNAMIC_LENGTHS)
    if dynamic_length != "call" and scaling != "dynamic":
        raise ValueError(
            f"dynamic_length={dynamic_length!r} is for scaling='dynamic', got scaling={scaling!r}"
        )
    if scaling == "dynamic" and "seq_len" in scaling_args:
        raise ValueError(
            f"scaling='dynamic' follows the length of each call; seq_len={scaling_args['seq_len']!r} "
            "in scaling_args would hold only for calls shorter than original_max_position_embeddings: "
            "leave it out"
        )
    longrope_switch = check_choice("longrope_switch", longrope_switch, LONGROPE_SWITCHES)
    if longrope_switch != "refuse" and scaling != "longrope":
        raise ValueError(
            f"longrope_switch={longrope_switch!r} is for scaling='longrope', got scaling={scaling!r}"
        )
    return dynamic_length, longrope_switch


@dataclass(frozen=True)
class OneAxis(RotaryScheme):
    """One spectrum on one line, scaled as ``scaling`` says (:func:`~posenc.functional.rope_inv_freq`).

    Dynamic NTK follows each call's length (``dynamic_length``); LongRoPE without a fixed ``seq_len``
    takes its long factors past ``original_max_position_embeddings`` (``longrope_switch``).
    """

    rotary_dim: int
    base: float = 10000.0
    scaling: str | None = None
    scaling_args: Mapping = field(default_factory=dict)
    dynamic_length: str = "call"
    longrope_switch: str = "refuse"

    def __post_init__(self) -> None:
        rotary_dim = check_even_positive_int("rotary_dim", self.rotary_dim)
        scaling_args = dict(self.scaling_args or {})
        lengths = check_length_options(self.scaling, scaling_args, self.dynamic_length, self.longrope_switch)
        _set(self, rotary_dim=rotary_dim, base=check_positive_float("base", self.base))
        _set(self, scaling_args=scaling_args, dynamic_length=lengths[0], longrope_switch=lengths[1])
        self.spectrum()  # the scaling and its arguments, named where they do not fit

    position_axes = 1

    @property
    def dynamic(self) -> bool:
        return self.scaling == "dynamic"

    @property
    def switches_factors(self) -> bool:
        """LongRoPE choosing short or long factors per call (not when scaling_args fix seq_len)."""
        return self.scaling == "longrope" and "seq_len" not in self.scaling_args

    @property
    def original_length(self) -> int | None:
        """The length past which the frequencies change; None where they never do."""
        return self.scaling_args["original_max_position_embeddings"] if self.follows_length else None

    def _inv_freq(self, **extra: object) -> tuple[torch.Tensor, float]:
        args = self.scaling_args | extra
        return rope_inv_freq(self.rotary_dim, base=self.base, scaling=self.scaling, **args)

    def spectrum(self) -> Spectrum:
        inv_freq, factor = self._inv_freq()
        return inv_freq, None, factor

    def long_spectrum(self) -> torch.Tensor | None:
        return self._inv_freq(seq_len=self.original_length + 1)[0] if self.switches_factors else None

    def spectrum_at(self, length: int) -> torch.Tensor:
        if self.dynamic:
            return self._inv_freq(seq_len=int(length))[0]
        if self.switches_factors and length > self.original_length:
            return self.long_spectrum()
        return self.spectrum()[0]


@dataclass(frozen=True)
class Sections(OneAxis):
    """M-RoPE: :class:`OneAxis`'s spectrum (its scaling too), pair k turning with one of the axes,
    ``sections`` = (s_1, …, s_n) pairs each (Σ s_a = r/2) as :func:`~posenc.functional.rope_section_axes`
    lays them out (``"contiguous"``: Qwen2-VL; ``"interleaved"``: Qwen3-VL)."""

    sections: tuple[int, ...] = field(kw_only=True)
    section_layout: str = field(default="contiguous", kw_only=True)

    def __post_init__(self) -> None:
        sections = check_positive_ints("sections", self.sections)
        layout = check_choice("section_layout", self.section_layout, SECTION_LAYOUTS)
        _set(self, sections=sections, section_layout=layout)
        if self.scaling == "dynamic":
            raise ValueError(NOT_ON_AXES)
        if 2 * sum(sections) != self.rotary_dim:
            raise ValueError(
                f"sections {sections} hold {sum(sections)} pairs, but rotary_dim={self.rotary_dim} "
                f"has {self.rotary_dim // 2}"
            )
        super().__post_init__()  # which also checks the interleaving through spectrum()

    @property
    def position_axes(self) -> int:
        return len(self.sections)

    def spectrum(self) -> Spectrum:
        inv_freq, _, factor = super().spectrum()
        return inv_freq, rope_section_axes(self.sections, layout=self.section_layout), factor


@dataclass(frozen=True)
class Axial(RotaryScheme):
    """Axial RoPE: axis a rotates its own d_a channels with θ_{a,i} = base^(−2i/d_a), ``widths`` =
    (d_1, …, d_n), r = Σ d_a (:func:`~posenc.functional.rope_axial_frequencies`). No scaling."""

    widths: tuple[int, ...]
    base: float = 10000.0

    def __post_init__(self) -> None:
        _set(self, widths=check_positive_ints("axes", self.widths, even=True))
        _set(self, base=check_positive_float("base", self.base))

    @classmethod
    def equal(cls, n: int, rotary_dim: int, base: float = 10000.0) -> Axial:
        """n axes of r/n channels each."""
        if rotary_dim % (2 * n):
            raise ValueError(f"rotary_dim={rotary_dim} does not split into {n} even axis widths")
        return cls((rotary_dim // n,) * n, base)

    @property
    def rotary_dim(self) -> int:
        return sum(self.widths)

    @property
    def axes(self) -> tuple[int, ...]:
        return self.widths

    @property
    def position_axes(self) -> int:
        return len(self.widths)

    def spectrum(self) -> Spectrum:  # the preset of PerAxis with one base for every axis
        return axes_spectrum([AxisFrequencies(width, base=self.base) for width in self.widths])


@dataclass(frozen=True)
class PerAxis(RotaryScheme):
    """Each axis its frequencies as data: ``frequencies`` = one
    :class:`~posenc.functional.rope.AxisFrequencies` per axis (a base with its scaling, an explicit vector
    or a period range, times a scale), the pairs laid out by ``pair_layout``
    (:func:`~posenc.functional.rope.axes_spectrum`: ``"axes"`` axis by axis, ``"frequencies"`` the axes
    interleaved per frequency). r = Σ widths."""

    frequencies: tuple[AxisFrequencies, ...]
    pair_layout: str = "axes"

    def __post_init__(self) -> None:
        axes = (self.frequencies,) if isinstance(self.frequencies, AxisFrequencies) else self.frequencies
        if isinstance(axes, str | bytes) or not isinstance(axes, Sequence) or not axes:
            raise TypeError(f"frequencies must be AxisFrequencies or a sequence of them, got {axes!r}")
        for index, axis in enumerate(axes):
            if not isinstance(axis, AxisFrequencies):
                raise TypeError(f"frequencies[{index}] must be an AxisFrequencies, got {axis!r}")
        _set(self, frequencies=tuple(axes))
        _set(self, pair_layout=check_choice("pair_layout", self.pair_layout, PAIR_LAYOUTS))
        self.spectrum()  # the layout's conditions, named

    @property
    def rotary_dim(self) -> int:
        return sum(axis.width for axis in self.frequencies)

    @property
    def axes(self) -> tuple[int, ...]:
        return tuple(axis.width for axis in self.frequencies)

    @property
    def base(self) -> float | None:
        """The first axis's base, where its frequencies come from one (None for a vector or periods)."""
        return self.frequencies[0].base

    @property
    def position_axes(self) -> int:
        return len(self.frequencies)

    def spectrum(self) -> Spectrum:
        return axes_spectrum(self.frequencies, layout=self.pair_layout)


@dataclass(frozen=True)
class Mixed(RotaryScheme):
    """RoPE-Mixed: per head, pair k turns by Σ_a pos_a·F[h, k, a], F learned from
    :func:`~posenc.functional.rope_mixed_frequencies` (magnitudes from ``base``, the paper's 10). Its
    ``spectrum()`` is those magnitudes' 1-D counterpart, for figures; the angles come from F."""

    rotary_dim: int
    n_heads: int = field()  # required: the class attribute is the default of the other schemes
    axes: int = 2
    base: float = 10.0
    learned = True

    def __post_init__(self) -> None:
        rotary_dim = check_even_positive_int("rotary_dim", self.rotary_dim)
        axes = check_positive_int("axes", self.axes)
        _set(self, rotary_dim=rotary_dim, axes=axes, n_heads=check_positive_int("n_heads", self.n_heads))
        _set(self, base=check_positive_float("base", self.base))
        if rotary_dim % (2 * axes):
            raise ValueError(
                f"RoPE-Mixed splits rotary_dim={rotary_dim} into 2·axes = {2 * axes} groups of pairs"
            )

    @property
    def position_axes(self) -> int:
        return self.axes

    def spectrum(self) -> Spectrum:
        inv_freq, factor = rope_inv_freq(self.rotary_dim, base=self.base)
        return inv_freq, None, factor

    def initial_frequencies(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """F at initialisation, float64 ``[h, r/2, n]`` (one draw of the RNG)."""
        return rope_mixed_frequencies(
            self.n_heads, self.rotary_dim, self.axes, base=self.base, generator=generator
        )


def _axis_widths(axes: int | Sequence[int] | None, mixed: bool) -> int | tuple[int, ...] | None:
    """``axes`` checked: a count n (equal widths, or RoPE-Mixed's axes) or the width of each axis."""
    if axes is None or (isinstance(axes, int) and not isinstance(axes, bool)):
        return None if axes is None else check_positive_int("axes", axes)
    if mixed:
        raise ValueError(f"mixed=True takes axes as the number of axes, got widths {axes!r}")
    return check_positive_ints("axes", axes, even=True)


def _rotary_dim(d_head: int, rotary_dim: int | None, widths: int | tuple[int, ...] | None) -> int:
    """r: given, else Σ d_a of axial widths, else d_head; even and at most d_head."""
    total = sum(widths) if isinstance(widths, tuple) else None
    rotary_dim = check_even_positive_int(
        "rotary_dim", rotary_dim if rotary_dim is not None else total or d_head
    )
    if rotary_dim > d_head:
        raise ValueError(f"rotary_dim must be even and at most d_head={d_head}, got {rotary_dim}")
    if total is not None and total != rotary_dim:
        raise ValueError(f"axes {widths} add up to {total} channels, not rotary_dim={rotary_dim}")
    return rotary_dim


def rotary_scheme(
    d_head: int,
    *,
    rotary_dim: int | None = None,
    base: float | None = None,
    scaling: str | None = None,
    scaling_args: Mapping | None = None,
    xpos: bool = False,
    axes: int | Sequence[int] | None = None,
    sections: Sequence[int] | None = None,
    section_layout: str = "contiguous",
    mixed: bool = False,
    n_heads: int | None = None,
    dynamic_length: str = "call",
    longrope_switch: str = "refuse",
    frequencies: AxisFrequencies | Sequence[AxisFrequencies] | None = None,
    pair_layout: str | None = None,
) -> RotaryScheme:
    """The scheme RotaryEncoding's keyword arguments describe (as it documents them), with the
    combinations that do not go together refused by name."""
    if frequencies is not None:
        return _per_axis(
            d_head,
            rotary_dim,
            frequencies,
            pair_layout or "axes",
            base=base,
            scaling=scaling,
            scaling_args=scaling_args,
            xpos=xpos,
            axes=axes,
            sections=sections,
            mixed=mixed,
            n_heads=n_heads,
        )
    if pair_layout is not None:
        raise ValueError(f"pair_layout={pair_layout!r} lays out the axes of frequencies=…; give those too")
    mixed = check_bool("mixed", mixed)
    base = check_positive_float("base", (10.0 if mixed else 10000.0) if base is None else base)
    widths = _axis_widths(axes, mixed)
    sections = None if sections is None else check_positive_ints("sections", sections)
    section_layout = check_choice("section_layout", section_layout, SECTION_LAYOUTS)
    rotary_dim = _rotary_dim(d_head, rotary_dim, widths)
    if isinstance(widths, int) and not mixed:
        widths = Axial.equal(widths, rotary_dim, base).widths
    if widths is not None and sections is not None:
        raise ValueError("give axes (one spectrum per axis) or sections (one spectrum split), not both")
    on_axes = widths is not None or sections is not None
    if on_axes and xpos:
        raise ValueError("xpos scales by the distance along one line; it does not apply to positions on axes")
    if on_axes and scaling == "dynamic":
        raise ValueError(NOT_ON_AXES)
    if widths is not None and scaling is not None:
        raise ValueError(f"scaling {scaling!r} rescales one spectrum; with axes, each axis has its own")
    if mixed and (widths is None or n_heads is None):
        raise ValueError("mixed=True learns frequencies per head over the axes: give axes=n and n_heads")
    if n_heads is not None and not mixed:
        raise ValueError("n_heads is for mixed=True (one set of frequencies per head)")
    if widths is None:
        line = dict(scaling=scaling, scaling_args=scaling_args, dynamic_length=dynamic_length)
        line |= dict(longrope_switch=longrope_switch)
        if sections is None:
            return OneAxis(rotary_dim, base, **line)
        return Sections(rotary_dim, base, **line, sections=sections, section_layout=section_layout)
    check_length_options(None, {}, dynamic_length, longrope_switch)
    if scaling_args:
        raise ValueError(f"scaling arguments given without a scaling: {', '.join(sorted(scaling_args))}")
    return Mixed(rotary_dim, n_heads, widths, base) if mixed else Axial(widths, base)


def _per_axis(
    d_head: int, rotary_dim: int | None, frequencies: object, pair_layout: str, **others: object
) -> PerAxis:
    """:class:`PerAxis` from ``frequencies``, refusing the arguments that would set them another way."""
    clash = sorted(name for name, value in others.items() if value not in (None, False, {}))
    if clash:
        raise ValueError(
            f"frequencies=… gives every axis its frequencies; {', '.join(clash)} would set them again "
            "(give a base, scaling or periods per axis inside AxisFrequencies)"
        )
    scheme = PerAxis(frequencies, pair_layout)
    if scheme.rotary_dim > d_head or (rotary_dim is not None and rotary_dim != scheme.rotary_dim):
        raise ValueError(
            f"the axes' widths {scheme.axes} add up to {scheme.rotary_dim} rotated channels, which must be at "
            f"most d_head={d_head}" + ("" if rotary_dim is None else f" and equal rotary_dim={rotary_dim}")
        )
    return scheme


__all__ = [
    "DYNAMIC_LENGTHS",
    "LONGROPE_SWITCHES",
    "Axial",
    "Mixed",
    "OneAxis",
    "PerAxis",
    "RotaryScheme",
    "Sections",
    "check_length_options",
    "rotary_scheme",
]
