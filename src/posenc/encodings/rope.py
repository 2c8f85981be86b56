"""Rotary position embedding as a module: rotates queries and keys, leaves embeddings and scores alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

import torch
from torch import nn

from posenc._validation import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_int,
    check_on_device,
    check_positive_float,
    check_positive_int,
)
from posenc.encodings.base import PositionalEncoding, PositionSpace, RotarySpectrum, resolve_positions
from posenc.encodings.description import Description, SeedRow
from posenc.encodings.rope_schemes import RotaryScheme, rotary_scheme
from posenc.encodings.rope_xpos import xpos_reference
from posenc.functional.angles import (
    MAX_POSITION,
    reduced_angles_unchecked,
    reduced_float_angles,
    split_frequencies,
)
from posenc.functional.normalized import CoordinateAugmentation, augment_coordinates
from posenc.functional.rope import (
    LAYOUTS,
    AxisFrequencies,
    apply_rope_qk,
    rope_cos_sin,
    rope_logit_scale,
    rope_mixed_cos_sin,
    xpos_scale,
)

#: Positions below this are served from a float64 cos/sin cache grown on demand; others computed.
CACHE_POSITIONS = 1 << 16
#: Runs of positions whose cos/sin the module keeps in the dtype the kernels read (least recently used
#: dropped first): a model's layers and steps of one length share one entry.
KERNEL_TABLES = 8
#: Where the channels that do not turn sit (``unrotated``): after the rotated ones, or before them.
UNROTATED = ("last", "first")
#: The positions whose angles are exact (negative ones too: cos is even and sin odd).
POSITION_RANGE = "positions must satisfy |position| < 2^27"


def _consecutive(positions: torch.Tensor, smallest: int, largest: int) -> bool:
    """Whether 1-d ``positions`` are smallest, smallest + 1, …, largest (a slice of a table serves them)."""
    return (
        positions.dim() == 1
        and largest - smallest + 1 == positions.numel()
        and torch.equal(positions, torch.arange(smallest, largest + 1, device=positions.device))
    )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two position tensors hold the same positions (no host sync under compile: False there)."""
    return not torch.compiler.is_compiling() and a.shape == b.shape and torch.equal(a, b)


class _KernelTables(NamedTuple):
    """cos/sin of one run of a module's float64 cache in a kernel's dtype, and the cache they were cut
    from (its two tensors and their version counters when cut): valid only while those are unchanged."""

    source: tuple[torch.Tensor, torch.Tensor]
    version: tuple[int, int]
    cos: torch.Tensor
    sin: torch.Tensor


def _given_scheme(scheme: object, d_head: int, given: dict) -> RotaryScheme:
    """A scheme given whole: a RotaryScheme that fits d_head, with no argument that describes another."""
    if not isinstance(scheme, RotaryScheme):
        raise TypeError(f"scheme must be a RotaryScheme, got {scheme!r}")
    clash = sorted(name for name, value in given.items() if value not in (None, False))
    if clash:
        raise ValueError(f"scheme=… gives the frequencies; {', '.join(clash)} would describe them again")
    if scheme.rotary_dim > d_head:
        raise ValueError(f"the scheme rotates {scheme.rotary_dim} channels, more than d_head={d_head}")
    return scheme


class RotaryEncoding(PositionalEncoding):
    """RoPE (Su et al., 2021, https://arxiv.org/abs/2104.09864) with every scaling, both layouts, partial rotary.

    cos/sin for positions 0 … n−1 are cached in float64 as non-persistent buffers, grown on demand;
    a dtype conversion of the module empties the cache instead of rounding it. The runs of it that
    calls rotate by (consecutive positions) are kept in the dtype the kernels read, float32 (float64
    for float64 heads), each rounded once (:meth:`_kernel_tables`). Positions are ``[s]`` or
    ``[b, s]`` (a KV-cache offset, left padding and packed sequences are all just positions).

    The frequencies come from one scheme (``self.scheme``, :mod:`posenc.encodings.rope_schemes`) that the
    arguments pick: one axis with its scaling, M-RoPE's sections, axial widths or RoPE-Mixed.

    Dynamic NTK (``scaling="dynamic"``) recomputes the frequencies for the longest position in each
    call once it passes ``original_max_position_embeddings`` (``dynamic_length="call"``), or, with
    ``dynamic_length="longest"``, for the longest length seen so far, back to the original frequencies
    when a call is shorter than the original length: transformers' stateful ``dynamic_rope_update``.
    Keys rotated in an earlier call (a KV cache holding rotated keys) keep the frequencies they were
    rotated with, so new queries meet old keys at a different base and q·k is no longer a function of
    m − n alone; this is how the models using it behave. Cache unrotated keys, or use a static
    scaling, where that matters.

    LongRoPE (``scaling="longrope"`` without a fixed ``seq_len``) takes its long factors for a call
    whose largest position (queries and keys) is at or past ``original_max_position_embeddings``, as
    Phi-3 does per call. One call never mixes the two sets: attention caches such keys unrotated
    (``rotated_keys_are_cacheable`` is False) and rotates every key of a call with the set of that
    call. A decoding step that crosses the original length while the cache holds keys of earlier,
    shorter calls is refused by default (``longrope_switch="refuse"``): in a model of more than one
    layer, those keys and values were computed from states of the short set, which a full recompute
    replaces, so the cache must be filled again from the start (transformers' Phi-3 drops its cache at
    that step). ``longrope_switch="rerotate"`` rotates the cached keys again with the long factors
    instead: exactly a full recompute for one attention layer, and the best a cache can do beyond it.

    DeepSeek's YaRN (``scaling="deepseek_yarn"``) also scales the softmax (:meth:`logit_scale`).

    Args:
        d_head: head width d.
        rotary_dim: rotated channels r (default d; GPT-NeoX uses d/4).
        base: ``rope_theta``.
        layout: ``"half"`` (LLaMA/GPT-NeoX in transformers) or ``"interleaved"`` (GPT-J, Meta's LLaMA).
        scaling: None or a name of :data:`~posenc.functional.rope.SCALINGS` (``linear | ntk | dynamic |
            yarn | llama3 | longrope | deepseek_yarn | ntk_su | ntk_alpha | proportional``).
        scaling_args: the scaling's ``rope_scaling`` keys, e.g. ``{"factor": 8.0, ...}``.
        dynamic_length: for ``scaling="dynamic"``: ``"call"`` (each call's longest position) or
            ``"longest"`` (the longest seen so far, reset below the original length, as transformers).
        longrope_switch: for ``scaling="longrope"``: ``"refuse"`` a call past the original length whose
            earlier keys (a KV cache's) all lie below it, or ``"rerotate"`` them with the long factors.
        xpos: scale queries by ζ^((pos − c)/xpos_scale_base) and keys by its inverse (xPos), c the
            centre of each call's query positions: q·k gains ζ^((m − n)/xpos_scale_base) whatever c is,
            and the scales stay finite at any position. The scale a key gets depends on the queries it
            meets, so attention caches such keys unrotated (``rotated_keys_are_cacheable`` is False).
            Query positions (and keys after their centre) may span up to 2·Δ, where ζ_0^(−Δ/base) is
            √(largest finite value) of the dtype: about 36,000 positions in float32/bfloat16, 4,500 in
            float16; wider calls raise a ValueError naming the positions and dtype.
        xpos_scale_base: xPos's scale base (512).
        axes: positions on several axes (``[s, n]`` or ``[b, s, n]``), each axis with its own
            frequencies (axial RoPE, :func:`~posenc.functional.rope_axial_frequencies`): the rotary
            width of each axis ``(d_1, …, d_n)`` (r = Σ d_a), or n for n equal widths. With ``mixed``,
            the number of axes.
        sections: positions on several axes sharing one spectrum, split into runs of
            ``(s_1, …, s_n)`` pairs (M-RoPE, :func:`~posenc.functional.rope_section_axes`; Σ s_a = r/2).
        section_layout: ``"contiguous"`` (Qwen2-VL) or ``"interleaved"`` (Qwen3-VL).
        mixed: RoPE-Mixed: learned frequencies per head over the ``axes`` axes (needs ``n_heads``),
            initialised with magnitudes from ``base`` (default 10 here, the paper's). The angles are
            float64 products, differentiable in the frequencies; per-head tables rotate eagerly.
        n_heads: heads, for ``mixed``.
        frequencies: each axis's frequencies as data, one
            :class:`~posenc.functional.rope.AxisFrequencies` per axis (a base with its scaling, an
            explicit vector or a period range; widths add up to r); positions ``[s, n]`` or ``[b, s, n]``.
        pair_layout: with ``frequencies``, ``"axes"`` (each axis's pairs in a run) or ``"frequencies"``
            (the axes interleaved per frequency, LTX-Video).
        unrotated: where the d − r channels that do not turn sit: ``"last"`` (GPT-NeoX) or ``"first"``
            (LTX-Video's d mod 6 channels).
        augmentation: a :class:`~posenc.functional.normalized.CoordinateAugmentation` (DINOv3's shift,
            jitter, rescale), drawn once per call in training mode from a generator seeded with
            ``augmentation_seed``; queries and keys move alike, and eval mode leaves coordinates as given.
        augmentation_seed: the seed of that generator.
        scheme: the frequencies as a ready :class:`~posenc.encodings.rope_schemes.RotaryScheme` instead of
            the arguments above that describe one (a preset with a scheme of its own, as HoPE's).

    Integer positions give exact angles on every axis; float coordinates (axes, sections, frequencies) are
    used as given, their angles reduced as exactly as integers
    (:func:`~posenc.functional.angles.reduced_float_angles`); RoPE-Mixed's are float64 products, which
    carry the gradient to its frequencies.
    """

    kind = "rotary"
    _exact_buffers = ("cos_cached", "sin_cached")

    def __init__(
        self,
        d_head: int,
        *,
        rotary_dim: int | None = None,
        base: float | None = None,
        layout: str = "half",
        scaling: str | None = None,
        scaling_args: Mapping | None = None,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
        axes: int | Sequence[int] | None = None,
        sections: Sequence[int] | None = None,
        section_layout: str = "contiguous",
        mixed: bool = False,
        n_heads: int | None = None,
        dynamic_length: str = "call",
        longrope_switch: str = "refuse",
        frequencies: AxisFrequencies | Sequence[AxisFrequencies] | None = None,
        pair_layout: str | None = None,
        unrotated: str = "last",
        augmentation: CoordinateAugmentation | None = None,
        augmentation_seed: int = 0,
        scheme: RotaryScheme | None = None,
    ) -> None:
        super().__init__()
        self.d_head = check_positive_int("d_head", d_head)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.xpos = check_bool("xpos", xpos)
        self.xpos_scale_base = check_positive_float("xpos_scale_base", xpos_scale_base)
        #: where the frequencies come from (one axis, sections, axial, mixed): :mod:`.rope_schemes`
        given = dict(
            rotary_dim=rotary_dim,
            base=base,
            scaling=scaling,
            scaling_args=scaling_args,
            axes=axes,
            sections=sections,
            mixed=mixed,
            n_heads=n_heads,
            frequencies=frequencies,
        )
        if scheme is not None:
            self.scheme = _given_scheme(scheme, d_head, given)
        else:
            self.scheme = rotary_scheme(
                d_head,
                rotary_dim=rotary_dim,
                base=base,
                scaling=scaling,
                scaling_args=scaling_args,
                xpos=self.xpos,
                axes=axes,
                sections=sections,
                section_layout=section_layout,
                mixed=mixed,
                n_heads=n_heads,
                dynamic_length=dynamic_length,
                longrope_switch=longrope_switch,
                frequencies=frequencies,
                pair_layout=pair_layout,
            )
        # a key rotated once stays right for every later query, but not with xPos (its scale is measured
        # from the centre of the queries it meets) nor with LongRoPE's two factor sets (a call past the
        # original length rotates every key with the long set)
        cacheable = not self.xpos and not self.scheme.switches_factors
        self.capabilities = replace(type(self).capabilities, rotated_keys_are_cacheable=cacheable)
        if augmentation is not None and augmentation.active:  # a draw per training call of rotate
            self.capabilities = replace(self.capabilities, draws_per_call=True)
        self.unrotated = check_choice("unrotated", unrotated, UNROTATED)
        if augmentation is not None and not isinstance(augmentation, CoordinateAugmentation):
            raise TypeError(f"augmentation must be a CoordinateAugmentation or None, got {augmentation!r}")
        if augmentation is not None and self.scheme.position_axes == 1:
            raise ValueError("augmentation moves coordinates on axes; this RoPE has one axis (positions [s])")
        self.augmentation = augmentation if augmentation is not None and augmentation.active else None
        self.augmentation_seed = check_int("augmentation_seed", augmentation_seed)
        #: the draws of the augmentation: one per training call (CPU, so that a seed gives the same draws)
        self.augmentation_generator = torch.Generator().manual_seed(self.augmentation_seed)
        inv_freq, axis, self.attention_factor = self.scheme.spectrum()
        self.register_buffer("inv_freq_pieces", split_frequencies(inv_freq), persistent=False)  # [r/2, 4] f64
        long = self.scheme.long_spectrum()
        long_pieces = None if long is None else split_frequencies(long)
        self.register_buffer("long_inv_freq_pieces", long_pieces, persistent=False)  # [r/2, 4] f64 or None
        #: dynamic_length="longest": the length the frequencies follow now (transformers' max_seq_len_cached)
        self.dynamic_seen = self.scheme.original_length if self.scheme.dynamic else None
        self.register_buffer("frequency_axis", axis, persistent=False)  # [r/2] int64, or None: one axis
        half = self.rotary_dim // 2
        self.register_buffer("cos_cached", torch.empty(0, half, dtype=torch.float64), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0, half, dtype=torch.float64), persistent=False)
        #: cos/sin of runs of the float64 cache in the dtype the kernels read (:meth:`_kernel_tables`)
        self._kernel_cache: dict[tuple, _KernelTables] = {}
        if self.scheme.learned:
            self.mixed_frequencies = nn.Parameter(
                self.scheme.initial_frequencies().to(torch.get_default_dtype())
            )  # [h, r/2, n]

    # The arguments as the scheme holds them, checked (axes: the widths, or RoPE-Mixed's count).
    rotary_dim = property(lambda self: self.scheme.rotary_dim, doc="rotated channels r")
    base = property(lambda self: self.scheme.base, doc="rope_theta (RoPE-Mixed: of its initial magnitudes)")
    scaling = property(lambda self: self.scheme.scaling, doc="the scaling's name, or None")
    scaling_args = property(lambda self: dict(self.scheme.scaling_args), doc="the scaling's arguments")
    dynamic_length = property(lambda self: self.scheme.dynamic_length)
    longrope_switch = property(lambda self: self.scheme.longrope_switch)
    axes = property(lambda self: self.scheme.axes, doc="axial widths (d_1, …, d_n), RoPE-Mixed's n, or None")
    sections = property(lambda self: self.scheme.sections, doc="M-RoPE's pairs per axis, or None")
    section_layout = property(lambda self: self.scheme.section_layout)
    mixed = property(lambda self: self.scheme.learned, doc="RoPE-Mixed: learned per-head frequencies")
    n_heads = property(lambda self: self.scheme.n_heads, doc="RoPE-Mixed's heads, else None")

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The head width d_model / n_heads (the heads matter to RoPE-Mixed only, which asks for them)."""
        return {"d_head": d_model // n_heads}

    @property
    def position_space(self) -> PositionSpace:
        """Coordinates on n axes (``[s, n]``) with axes, sections or mixed; else ``[s]`` (host ints, also
        under torch.compile)."""
        axes = self.scheme.position_axes
        return PositionSpace(columns=axes, axes=axes)

    @property
    def inv_freq(self) -> torch.Tensor:
        """The frequencies θ_k in float64 ``[r/2]`` (before any dynamic rescaling)."""
        return self.inv_freq_pieces.sum(dim=-1)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self._kernel_cache.clear()  # another device or dtype: nothing kept may serve it
        if self.inv_freq_pieces.dtype != torch.float64:  # rebuilt exactly, never rounded
            inv_freq, axis, _ = self.scheme.spectrum()
            self.inv_freq_pieces = split_frequencies(inv_freq).to(self.inv_freq_pieces.device)
            if self.long_inv_freq_pieces is not None:
                long = self.scheme.long_spectrum()
                self.long_inv_freq_pieces = split_frequencies(long).to(self.inv_freq_pieces.device)
            if axis is not None:
                self.frequency_axis = axis.to(self.inv_freq_pieces.device)
        return self

    @property
    def views(self) -> frozenset[str]:
        """Its rotation tables, frequencies and spectrum; no tables or frequencies for RoPE-Mixed (learned
        per-head directions), no frequencies where they follow the length (dynamic NTK, LongRoPE)."""
        if self.scheme.learned:
            return frozenset({"rotary_spectrum"})
        fixed = () if self.scheme.follows_length else ("frequencies",)
        closed = self.scheme.scaling is None and not self.xpos and self.scheme.position_axes == 1
        return frozenset(
            {"rotation_tables", "rotary_spectrum", *fixed, *(("closed_form_dot",) if closed else ())}
        )

    def rotary_spectrum(self) -> RotarySpectrum:
        """``rotary_dim``, ``base`` (RoPE-Mixed: of its initial magnitudes), ``layout`` and ``unrotated``."""
        return RotarySpectrum(self.rotary_dim, self.base, self.layout, self.unrotated)

    def frequency_pieces(self) -> torch.Tensor | None:
        """θ_k (as scaled) as float64 pieces ``[r/2, 4]``; None for dynamic NTK and LongRoPE's two sets,
        whose frequencies follow the length, and RoPE-Mixed, whose frequencies are learned directions."""
        return None if self.scheme.follows_length or self.scheme.learned else self.inv_freq_pieces

    def rotation_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """float64 cos and sin ``[..., r/2]`` of the rotation at integer positions (times the attention
        factor): ``[s]`` on one axis, ``[s, n]`` on several; None for RoPE-Mixed (one table per head)."""
        return None if self.scheme.learned else self.cos_sin(positions)

    def closed_form_dot(self, distances: torch.Tensor) -> torch.Tensor | None:
        """q·k at distance d for q = k with every pair a unit vector: Σ_k cos(d·θ_k) (unscaled 1-D RoPE only)."""
        if self.scheme.scaling is not None or self.xpos or self.scheme.position_axes > 1:
            return None
        cos, _ = rope_cos_sin(distances, self.inv_freq, dtype=torch.float64)
        return cos.sum(dim=-1)

    def cos_sin(
        self, positions: torch.Tensor, *, seq_len: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos and sin ``[..., s, r/2]`` times the attention factor, for positions ``[..., s]`` or, on
        several axes, coordinates ``[..., s, n]`` (integer: exact; float: angles reduced as exactly).

        ``seq_len``: the length whose frequencies dynamic NTK and LongRoPE take (a host int, or a
        device scalar under torch.compile); default the largest position + 1 (a call of its own: it
        also moves ``dynamic_length="longest"``'s state).
        """
        if seq_len is None and self.scheme.follows_length:
            seq_len = self._call_length(positions)
        if self.frequency_axis is None and positions.is_floating_point():  # [..., s] float: every pair's
            per_frequency = positions[..., None].expand(*positions.shape, self.inv_freq_pieces.shape[0])
        elif self.frequency_axis is None:
            return self._table(positions, per_frequency=False, seq_len=seq_len)
        else:
            per_frequency = positions[..., self.frequency_axis]  # [..., s, r/2]: each pair's coordinate
        if per_frequency.is_floating_point():  # float coordinates: reduced as exactly as integers
            angle = reduced_float_angles(per_frequency, self.inv_freq_pieces)
            if self.scheme.switches_factors:
                long = reduced_float_angles(per_frequency, self.long_inv_freq_pieces)
                angle = torch.where(torch.as_tensor(seq_len) > self.scheme.original_length, long, angle)
            return torch.cos(angle) * self.attention_factor, torch.sin(angle) * self.attention_factor
        return self._table(per_frequency, per_frequency=True, seq_len=seq_len)

    def _call_length(self, *positions: torch.Tensor) -> int | torch.Tensor:
        """The length one call's frequencies follow: the largest of its positions + 1 (every coordinate,
        on axes), through ``dynamic_length="longest"``'s state; a device scalar under torch.compile."""
        if torch.compiler.is_compiling():
            return torch.stack([p.max() for p in positions]).max() + 1
        length = max((int(p.max()) for p in positions if p.numel()), default=-1) + 1  # 0: no token
        if not self.scheme.dynamic or self.scheme.dynamic_length == "call":
            return length
        # transformers' dynamic_rope_update: grow past the longest length seen, reset below the original
        original = self.scheme.original_length
        if length > self.dynamic_seen:
            self.dynamic_seen = length
        elif length < original < self.dynamic_seen:
            self.dynamic_seen = original
        return self.dynamic_seen

    def _table(
        self, positions: torch.Tensor, *, per_frequency: bool, seq_len: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of integer positions ``[...]`` (``[..., r/2]``, one per pair, with ``per_frequency``),
        from the float64 cache where it holds them; ``seq_len`` as :meth:`cos_sin` resolved it."""
        if torch.compiler.is_compiling():
            if self.scheme.dynamic:
                raise ValueError(
                    "scaling='dynamic' picks its frequencies from the longest position, a host value; "
                    "it runs eagerly but not inside torch.compile (use a static scaling there)"
                )
            # Tensor ops only: no cache growth (a host sync) inside a compiled graph.
            check_on_device(positions.abs() < MAX_POSITION, POSITION_RANGE)
            angle = reduced_angles_unchecked(positions, self.inv_freq_pieces, per_frequency=per_frequency)
            if self.scheme.switches_factors:  # both sets, one picked on the device (no host read)
                long = reduced_angles_unchecked(
                    positions, self.long_inv_freq_pieces, per_frequency=per_frequency
                )
                angle = torch.where(seq_len > self.scheme.original_length, long, angle)
            return torch.cos(angle) * self.attention_factor, torch.sin(angle) * self.attention_factor
        if positions.numel() == 0:  # no token: empty tables
            shape = positions.shape if per_frequency else (*positions.shape, self.rotary_dim // 2)
            empty = torch.zeros(shape, dtype=torch.float64, device=positions.device)
            return empty, empty.clone()
        smallest, largest = int(positions.min()), int(positions.max())
        if smallest <= -MAX_POSITION or largest >= MAX_POSITION:
            raise ValueError(f"{POSITION_RANGE}, got {smallest if smallest <= -MAX_POSITION else largest}")
        if smallest < 0:  # the cache holds 0, 1, …: cos is even and sin odd, both exact
            cos, sin = self._table(positions.abs(), per_frequency=per_frequency, seq_len=seq_len)
            negative = positions < 0 if per_frequency else (positions < 0).unsqueeze(-1)  # [..., 1 or r/2]
            return cos, torch.where(negative, -sin, sin)
        if self.scheme.dynamic and seq_len > self.scheme.original_length:
            inv_freq = self.scheme.spectrum_at(int(seq_len))
            return rope_cos_sin(positions, inv_freq.to(positions.device), dtype=torch.float64)
        if self.scheme.switches_factors and seq_len > self.scheme.original_length:  # the long set: computed
            angle = reduced_angles_unchecked(
                positions, self.long_inv_freq_pieces, per_frequency=per_frequency
            )
            return torch.cos(angle) * self.attention_factor, torch.sin(angle) * self.attention_factor
        if largest >= CACHE_POSITIONS:  # far positions: computed, not cached with all before them
            angle = reduced_angles_unchecked(positions, self.inv_freq_pieces, per_frequency=per_frequency)
            return torch.cos(angle) * self.attention_factor, torch.sin(angle) * self.attention_factor
        if largest >= self.cos_cached.shape[0]:
            self._grow(min(max(largest + 1, 2 * self.cos_cached.shape[0]), CACHE_POSITIONS))
        if per_frequency:  # pair k's value at its own coordinate
            pairs = torch.arange(positions.shape[-1], device=positions.device)
            return self.cos_cached[positions, pairs], self.sin_cached[positions, pairs]
        if _consecutive(positions, smallest, largest):  # views of the cache, no gather
            return self.cos_cached[smallest : largest + 1], self.sin_cached[smallest : largest + 1]
        return self.cos_cached[positions], self.sin_cached[positions]

    def _grow(self, length: int) -> None:
        self._kernel_cache.clear()
        positions = torch.arange(length, device=self.cos_cached.device)
        angle = reduced_angles_unchecked(positions, self.inv_freq_pieces)  # [n, r/2]
        self.cos_cached = torch.cos(angle) * self.attention_factor
        self.sin_cached = torch.sin(angle) * self.attention_factor

    def logit_scale(self, d_head: int) -> float:
        """d_head^(−1/2), times mscale(factor, mscale_all_dim)² for DeepSeek's YaRN
        (:func:`~posenc.functional.rope.rope_logit_scale`)."""
        return rope_logit_scale(d_head, scaling=self.scheme.scaling, **self.scheme.scaling_args)

    def _angles(
        self,
        positions: torch.Tensor,
        sign: float,
        reference: torch.Tensor | None,
        seq_len: int | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.scheme.learned:  # one table per head, differentiable in the learned frequencies
            return rope_mixed_cos_sin(positions, self.mixed_frequencies)  # [1 or b, h, s, r/2]
        # [s, r/2] or [b, s, r/2], float64 (seq_len only where the frequencies follow the length, so that
        # a subclass's cos_sin(positions) still serves the others)
        cos, sin = self.cos_sin(positions) if seq_len is None else self.cos_sin(positions, seq_len=seq_len)
        if self.xpos:
            scale = xpos_scale(
                positions, self.rotary_dim, scale_base=self.xpos_scale_base, reference=reference
            )  # [(b,) s, r/2]
            cos, sin = cos * scale**sign, sin * scale**sign
        return cos, sin

    def _check_no_switch(
        self, q_positions: torch.Tensor, k_positions: torch.Tensor, seq_len: int | torch.Tensor
    ) -> None:
        """ValueError when this call takes LongRoPE's long factors while the keys before its own (a KV
        cache's: the first j − i) all lie below the original length, computed by shorter calls."""
        seq_dim = -1 if self.position_space.columns == 1 else -2
        earlier = k_positions.shape[seq_dim] - q_positions.shape[seq_dim]
        if earlier <= 0:
            return
        original = self.scheme.original_length
        earlier_largest = k_positions.narrow(seq_dim, 0, earlier).max()
        if torch.compiler.is_compiling():
            check_on_device(
                (seq_len <= original) | (earlier_largest >= original),
                "LongRoPE: a call past original_max_position_embeddings meets keys of shorter calls; "
                "fill the KV cache again from the start",
            )
            return
        if seq_len > original and int(earlier_largest) < original:
            raise ValueError(
                f"LongRoPE switches to its long factors at position {original} "
                f"(original_max_position_embeddings), which this call reaches (positions up to {seq_len - 1}), "
                f"but the {earlier} keys before it (a KV cache's, positions up to {int(earlier_largest)}) "
                "come from calls that used the short factors: fill the cache again from the start with the "
                "whole sequence (one call past the original length), as transformers' Phi-3 does, or build "
                "the encoding with longrope_switch='rerotate'"
            )

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q ``[b, h, i, d]`` and k ``[b, h_kv, j, d]``.

        Default positions: keys 0 … j−1; queries the last i of those (j−i … j−1), as in decoding; on
        several axes the same numbers on every axis (the diagonal, where M-RoPE puts text).
        """
        for name, x in (("q", q), ("k", k)):
            check_float_tensor(name, x)
            if x.dim() != 4 or x.shape[-1] != self.d_head:
                raise ValueError(
                    f"{name} must have shape [b, h, s, d_head={self.d_head}], got {tuple(x.shape)}"
                )
        if self.scheme.learned and (q.shape[1] != self.n_heads or k.shape[1] != self.n_heads):
            raise ValueError(
                f"RoPE-Mixed turns each of its {self.n_heads} heads by its own frequencies: q and k need "
                f"{self.n_heads} heads, got {q.shape[1]} and {k.shape[1]}"
            )
        k_len, q_len = k.shape[2], q.shape[2]
        columns = self.position_space.columns
        # float positions on one axis too (continuous positions): angles reduced as exactly as integers
        k_positions = resolve_positions(k_positions, k, seq_dim=2, columns=columns, float_line=True)
        start = k_len - q_len if q_len <= k_len else 0  # default queries: the last q_len keys
        q_positions = resolve_positions(
            q_positions, q, seq_dim=2, columns=columns, start=start, float_line=True
        )
        if self.augmentation is not None and self.training:  # one draw moves queries and keys alike
            if torch.compiler.is_compiling():
                raise ValueError(
                    "coordinate augmentation draws from its own seeded generator on the host, which a compiled "
                    "graph cannot do: compile the model in eval mode, or augment the coordinates before the call "
                    "(posenc.functional.normalized.augment_coordinates) and build the encoding without it"
                )
            offset, factor = self.augmentation.draw(columns, self.augmentation_generator)
            same = k_positions is q_positions
            q_positions = augment_coordinates(q_positions, offset, factor)
            k_positions = q_positions if same else augment_coordinates(k_positions, offset, factor)
        reference = (
            xpos_reference(q_positions, k_positions, q.dtype, self.xpos_scale_base) if self.xpos else None
        )
        # one length for the whole call: queries and keys turn with the same frequencies
        seq_len = self._call_length(q_positions, k_positions) if self.scheme.follows_length else None
        if self.scheme.switches_factors and self.scheme.longrope_switch == "refuse":
            self._check_no_switch(q_positions, k_positions, seq_len)
        q_cos, q_sin = self._kernel_tables(*self._angles(q_positions, 1.0, reference, seq_len), q.dtype)
        # The dispatcher picks the kernel: Triton on CUDA, C on CPU (float32 inside, rounded once).
        if not self.xpos and (k_positions is q_positions or _same(q_positions, k_positions)):
            return self._turn(q, k, q_cos, q_sin)  # one table
        k_cos, k_sin = self._kernel_tables(*self._angles(k_positions, -1.0, reference, seq_len), k.dtype)
        return self._turn(q, k, q_cos, q_sin, k_cos, k_sin)

    def _kernel_tables(
        self, cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for heads of ``dtype`` in the dtype the kernels read (float32; float64 for float64
        heads), kept between calls where they are a run of the float64 cache (consecutive positions).

        The C and Triton kernels read float32 tables for float32, bfloat16 and float16 heads; given
        float64 ones, the C kernel converts them block by block and the Triton kernel casts them, in
        every call. The float32 tables are those float64 values rounded once, so every result is the
        same. An entry is keyed by the run (its offset and length in the cache), the dtype and the
        device, and serves only while the cache it was cut from is the module's own, unchanged (same
        tensors, same version counters): a grown, moved, converted or modified cache is never read
        through an old entry. Anything else (gathered or scaled tables, xPos, tracing) is cast here.
        """
        target = torch.float64 if dtype == torch.float64 else torch.float32
        if cos.dtype == target or torch.compiler.is_compiling():
            return cos, sin
        source = (self.cos_cached, self.sin_cached)
        if cos._base is not source[0] or sin._base is not source[1] or cos.dim() != 2:
            return cos.to(target), sin.to(target)  # not a run of the cache: cast, not kept
        key = (cos.storage_offset(), sin.storage_offset(), cos.shape[0], target, cos.device)
        version = (source[0]._version, source[1]._version)
        entry = self._kernel_cache.pop(key, None)
        if entry is None or entry.source[0] is not source[0] or entry.source[1] is not source[1]:
            entry = None
        if entry is None or entry.version != version:
            entry = _KernelTables(source, version, cos.to(target), sin.to(target))
        self._kernel_cache[key] = entry  # last: the most recently used
        while len(self._kernel_cache) > KERNEL_TABLES:
            self._kernel_cache.pop(next(iter(self._kernel_cache)))
        return entry.cos, entry.sin

    def _turn(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_cos: torch.Tensor,
        q_sin: torch.Tensor,
        k_cos: torch.Tensor | None = None,
        k_sin: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate the r channels of q and k (the first r, or the last with ``unrotated="first"``)."""
        tables = dict(k_cos=k_cos, k_sin=k_sin, layout=self.layout)
        if self.unrotated == "last" or self.rotary_dim == self.d_head:
            return apply_rope_qk(q, k, q_cos, q_sin, rotary_dim=self.rotary_dim, **tables)
        kept = self.d_head - self.rotary_dim  # [b, h, s, kept] pass through, the rest turns
        q_turned, k_turned = apply_rope_qk(
            q[..., kept:].contiguous(), k[..., kept:].contiguous(), q_cos, q_sin, **tables
        )
        return torch.cat((q[..., :kept], q_turned), dim=-1), torch.cat((k[..., :kept], k_turned), dim=-1)

    def extra_repr(self) -> str:
        scaling = f", scaling={self.scaling!r}, scaling_args={self.scaling_args}" if self.scaling else ""
        if self.dynamic_length != "call":
            scaling += f", dynamic_length={self.dynamic_length!r}"
        if self.longrope_switch != "refuse":
            scaling += f", longrope_switch={self.longrope_switch!r}"
        xpos = f", xpos=True, xpos_scale_base={self.xpos_scale_base}" if self.xpos else ""
        unrotated = f", unrotated={self.unrotated!r}" if self.unrotated != "last" else ""
        augmented = f", augmentation={self.augmentation}" if self.augmentation is not None else ""
        return (
            f"d_head={self.d_head}, rotary_dim={self.rotary_dim}, base={self.base}, layout={self.layout!r}"
            f"{scaling}{xpos}{unrotated}{augmented}"
        )


#: What posenc says about :class:`RotaryEncoding` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="RoPE",
    where_it_acts="rotates queries and keys",
    used_by="LLaMA, GPT-NeoX, GPT-J, Phi-3",
    parameter_formula="0",
    seed_row=SeedRow(3, "RoPE", "0", "Good", "Explicit"),
    specimen_kwargs={"d_head": 64},
    figures={
        "inv-freq-scalings": "Linear divides every frequency by the factor; NTK, dynamic NTK and LongRoPE "
        "stretch the slow pairs most; YaRN and Llama 3 keep the fast pairs and divide only the slow ones "
        "(lower panel).",
        "rotation": "Each pair of the vector turns on a circle of fixed radius, by θ_k per position: pair 0 "
        "by one radian, the slowest pair barely at all. Rotation keeps the norm.",
        "flat-lines": "Flat lines: the rotated q·k depends only on the distance, and for unit pairs equals "
        "Σ_k cos(d·θ_k) (dashed), the closed form of the sinusoidal codes' dot product.",
    },
)
