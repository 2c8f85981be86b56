"""Rotary position embedding as a module: rotates queries and keys, leaves embeddings and scores alone."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from posenc._validation import (
    check_choice,
    check_even_positive_int,
    check_float_tensor,
    check_on_device,
    check_positive_float,
    check_positive_int,
)
from posenc.encodings.base import PositionalEncoding, SeedRow, resolve_positions
from posenc.functional.angles import MAX_POSITION, reduced_angles_unchecked, split_frequencies
from posenc.functional.rope import LAYOUTS, XPOS_GAMMA, apply_rope_qk, rope_cos_sin, rope_inv_freq, xpos_scale

#: Positions below this are served from a float64 cos/sin cache grown on demand; others computed.
CACHE_POSITIONS = 1 << 16


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


class RotaryEncoding(PositionalEncoding):
    """RoPE (Su et al., 2021, https://arxiv.org/abs/2104.09864) with every scaling, both layouts, partial rotary.

    cos/sin for positions 0 … n−1 are cached in float64 as non-persistent buffers, grown on demand
    and cast to the input dtype once per call; a dtype conversion of the module empties the cache
    instead of rounding it. Positions are ``[s]`` or ``[b, s]`` (a KV-cache offset, left padding and
    packed sequences are all just positions).

    Dynamic NTK (``scaling="dynamic"``) recomputes the frequencies for the longest position in each
    call once it passes ``original_max_position_embeddings``. Keys rotated in an earlier call (a KV
    cache holding rotated keys) keep the frequencies they were rotated with, so new queries meet old
    keys at a different base and q·k is no longer a function of m − n alone; this is how the models
    using it behave. Cache unrotated keys, or use a static scaling, where that matters.

    Args:
        d_head: head width d.
        rotary_dim: rotated channels r (default d; GPT-NeoX uses d/4).
        base: ``rope_theta``.
        layout: ``"half"`` (LLaMA/GPT-NeoX in transformers) or ``"interleaved"`` (GPT-J, Meta's LLaMA).
        scaling: None or ``linear | ntk | dynamic | yarn | llama3 | longrope``.
        scaling_args: the scaling's ``rope_scaling`` keys, e.g. ``{"factor": 8.0, ...}``.
        xpos: scale queries by ζ^((pos − c)/xpos_scale_base) and keys by its inverse (xPos), c the
            centre of each call's query positions: q·k gains ζ^((m − n)/xpos_scale_base) whatever c is,
            and the scales stay finite at any position. The scale a key gets depends on the queries it
            meets, so attention caches such keys unrotated (``rotated_keys_are_cacheable`` is False).
            Query positions (and keys after their centre) may span up to 2·Δ, where ζ_0^(−Δ/base) is
            √(largest finite value) of the dtype: about 36,000 positions in float32/bfloat16, 4,500 in
            float16; wider calls raise a ValueError naming the positions and dtype.
        xpos_scale_base: xPos's scale base (512).
    """

    kind = "rotary"
    parameter_formula = "0"
    exact_buffers = ("cos_cached", "sin_cached")
    specimen_kwargs = {"d_head": 64}
    label = "RoPE"
    seed_row = SeedRow(3, "RoPE", "0", "Good", "Explicit")
    figures = {
        "inv-freq-scalings": "Linear divides every frequency by the factor; NTK, dynamic NTK and LongRoPE "
        "stretch the slow pairs most; YaRN and Llama 3 keep the fast pairs and divide only the slow ones "
        "(lower panel).",
        "rotation": "Each pair of the vector turns on a circle of fixed radius, by θ_k per position: pair 0 "
        "by one radian, the slowest pair barely at all. Rotation keeps the norm.",
        "flat-lines": "Flat lines: the rotated q·k depends only on the distance, and for unit pairs equals "
        "Σ_k cos(d·θ_k) (dashed), the closed form of the sinusoidal codes' dot product.",
    }

    def __init__(
        self,
        d_head: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        layout: str = "half",
        scaling: str | None = None,
        scaling_args: Mapping | None = None,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
    ) -> None:
        super().__init__()
        self.d_head = check_positive_int("d_head", d_head)
        self.rotary_dim = (
            self.d_head if rotary_dim is None else check_even_positive_int("rotary_dim", rotary_dim)
        )
        if self.rotary_dim > self.d_head or self.rotary_dim % 2:
            raise ValueError(
                f"rotary_dim must be even and at most d_head={self.d_head}, got {self.rotary_dim}"
            )
        self.base = check_positive_float("base", base)
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.scaling = scaling
        self.scaling_args = dict(scaling_args or {})
        self.xpos = bool(xpos)
        self.xpos_scale_base = check_positive_float("xpos_scale_base", xpos_scale_base)
        inv_freq, self.attention_factor = rope_inv_freq(
            self.rotary_dim, base=self.base, scaling=scaling, **self.scaling_args
        )
        self.register_buffer("inv_freq_pieces", split_frequencies(inv_freq), persistent=False)  # [r/2, 4] f64
        half = self.rotary_dim // 2
        self.register_buffer("cos_cached", torch.empty(0, half, dtype=torch.float64), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0, half, dtype=torch.float64), persistent=False)

    @property
    def inv_freq(self) -> torch.Tensor:
        """The frequencies θ_k in float64 ``[r/2]`` (before any dynamic rescaling)."""
        return self.inv_freq_pieces.sum(dim=-1)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.inv_freq_pieces.dtype != torch.float64:  # rebuilt exactly, never rounded
            inv_freq, _ = rope_inv_freq(
                self.rotary_dim, base=self.base, scaling=self.scaling, **self.scaling_args
            )
            self.inv_freq_pieces = split_frequencies(inv_freq).to(self.inv_freq_pieces.device)
        return self

    def frequency_pieces(self) -> torch.Tensor | None:
        """θ_k (as scaled) as float64 pieces ``[r/2, 4]``; None for dynamic NTK, whose frequencies follow
        the length."""
        return None if self.scaling == "dynamic" else self.inv_freq_pieces

    def rotation_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos and sin ``[..., r/2]`` of the rotation at integer positions (times the attention factor)."""
        return self.cos_sin(positions)

    def closed_form_dot(self, distances: torch.Tensor) -> torch.Tensor | None:
        """q·k at distance d for q = k with every pair a unit vector: Σ_k cos(d·θ_k) (unscaled RoPE only)."""
        if self.scaling is not None or self.xpos:
            return None
        cos, _ = rope_cos_sin(distances, self.inv_freq, dtype=torch.float64)
        return cos.sum(dim=-1)

    def _dynamic_length(self) -> int | None:
        return self.scaling_args["original_max_position_embeddings"] if self.scaling == "dynamic" else None

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos and sin ``[..., s, r/2]`` for integer positions ``[...]``, times the attention factor."""
        if torch.compiler.is_compiling():
            if self.scaling == "dynamic":
                raise ValueError(
                    "scaling='dynamic' picks its frequencies from the longest position, a host value; "
                    "it runs eagerly but not inside torch.compile (use a static scaling there)"
                )
            # Tensor ops only: no cache growth (a host sync) inside a compiled graph.
            check_on_device(
                (positions >= 0) & (positions < MAX_POSITION), "positions must lie in 0 … 2^27 − 1"
            )
            angle = reduced_angles_unchecked(positions, self.inv_freq_pieces)
            return torch.cos(angle) * self.attention_factor, torch.sin(angle) * self.attention_factor
        smallest, largest = int(positions.min()), int(positions.max())
        if smallest < 0 or largest >= MAX_POSITION:
            raise ValueError(
                f"positions must lie in 0 … 2^27 − 1, got {smallest if smallest < 0 else largest}"
            )
        length = self._dynamic_length()
        if length is not None and largest >= length:
            inv_freq, _ = rope_inv_freq(
                self.rotary_dim,
                base=self.base,
                scaling="dynamic",
                **(self.scaling_args | {"seq_len": largest + 1}),
            )
            return rope_cos_sin(positions, inv_freq.to(positions.device), dtype=torch.float64)
        if largest >= CACHE_POSITIONS:  # far positions: computed, not cached with all before them
            angle = reduced_angles_unchecked(positions, self.inv_freq_pieces)  # [..., s, r/2]
            return torch.cos(angle) * self.attention_factor, torch.sin(angle) * self.attention_factor
        if largest >= self.cos_cached.shape[0]:
            self._grow(min(max(largest + 1, 2 * self.cos_cached.shape[0]), CACHE_POSITIONS))
        if _consecutive(positions, smallest, largest):  # views of the cache, no gather
            return self.cos_cached[smallest : largest + 1], self.sin_cached[smallest : largest + 1]
        return self.cos_cached[positions], self.sin_cached[positions]

    def _grow(self, length: int) -> None:
        positions = torch.arange(length, device=self.cos_cached.device)
        angle = reduced_angles_unchecked(positions, self.inv_freq_pieces)  # [n, r/2]
        self.cos_cached = torch.cos(angle) * self.attention_factor
        self.sin_cached = torch.sin(angle) * self.attention_factor

    @property
    def rotated_keys_are_cacheable(self) -> bool:
        """Whether a key rotated once stays right for every later query (False with xPos: its scale is
        measured from the centre of the queries it meets)."""
        return not self.xpos

    def _angles(
        self, positions: torch.Tensor, sign: float, reference: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin(positions)  # [s, r/2] or [b, s, r/2], float64
        if self.xpos:
            scale = xpos_scale(
                positions, self.rotary_dim, scale_base=self.xpos_scale_base, reference=reference
            )  # [(b,) s, r/2]
            cos, sin = cos * scale**sign, sin * scale**sign
        return cos, sin

    def _xpos_reference(
        self, q_positions: torch.Tensor, k_positions: torch.Tensor, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """The centre of each row's query positions, ``[1]`` or ``[b, 1]``; None without xPos.

        Raises ValueError where a query below it, or a key above it, is too far for the scale to stay
        within √max of ``dtype``.
        """
        if not self.xpos:
            return None
        low, high = q_positions.amin(dim=-1, keepdim=True), q_positions.amax(dim=-1, keepdim=True)
        reference = (low + high) // 2  # [1] or [b, 1], an integer: offsets stay exact
        # the smallest ζ_k is ζ_0 = γ/(1 + γ) (γ = 0.4), a host constant: no tensor read under compile
        zeta_0 = XPOS_GAMMA / (1 + XPOS_GAMMA)
        reach = 0.5 * math.log(torch.finfo(dtype).max) / -math.log(zeta_0)
        allowed = int(reach * self.xpos_scale_base)  # the largest offset from the reference
        if torch.compiler.is_compiling():  # reading a value would be a host sync
            check_on_device(
                torch.cat(((reference - q_positions).flatten(), (k_positions - reference).flatten()))
                <= allowed,
                f"xPos cannot scale a call's queries or keys more than {allowed} positions from the centre of "
                f"its queries in {dtype}; rotate at most {2 * allowed} consecutive positions per call",
            )
            return reference
        for name, offsets in (("query", reference - q_positions), ("key", k_positions - reference)):
            if int(offsets.max()) > allowed:
                raise ValueError(
                    f"xPos cannot scale {name} positions {int(q_positions.min())} … "
                    f"{int(k_positions.max() if name == 'key' else q_positions.max())} in {dtype}: "
                    f"measured from their centre {int(reference.max())}, a scale would pass "
                    f"√max of {dtype}; rotate at most {2 * allowed} consecutive positions per call"
                )
        return reference

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q ``[b, h, i, d]`` and k ``[b, h_kv, j, d]``.

        Default positions: keys 0 … j−1; queries the last i of those (j−i … j−1), as in decoding.
        """
        for name, x in (("q", q), ("k", k)):
            check_float_tensor(name, x)
            if x.dim() != 4 or x.shape[-1] != self.d_head:
                raise ValueError(
                    f"{name} must have shape [b, h, s, d_head={self.d_head}], got {tuple(x.shape)}"
                )
        k_len, q_len = k.shape[2], q.shape[2]
        if k_positions is None:
            k_positions = torch.arange(k_len, device=k.device)
        if q_positions is None:
            start = k_len - q_len if q_len <= k_len else 0
            q_positions = torch.arange(start, start + q_len, device=q.device)
        q_positions = resolve_positions(q_positions, q, seq_dim=2)
        k_positions = resolve_positions(k_positions, k, seq_dim=2)
        reference = self._xpos_reference(q_positions, k_positions, q.dtype)
        q_cos, q_sin = self._angles(q_positions, 1.0, reference)
        # The dispatcher picks the kernel: Triton on CUDA, C on CPU (float32 inside, rounded once).
        if not self.xpos and (k_positions is q_positions or _same(q_positions, k_positions)):
            return apply_rope_qk(
                q, k, q_cos, q_sin, layout=self.layout, rotary_dim=self.rotary_dim
            )  # one table
        k_cos, k_sin = self._angles(k_positions, -1.0, reference)
        return apply_rope_qk(
            q, k, q_cos, q_sin, k_cos=k_cos, k_sin=k_sin, layout=self.layout, rotary_dim=self.rotary_dim
        )

    def extra_repr(self) -> str:
        scaling = f", scaling={self.scaling!r}, scaling_args={self.scaling_args}" if self.scaling else ""
        xpos = f", xpos=True, xpos_scale_base={self.xpos_scale_base}" if self.xpos else ""
        return f"d_head={self.d_head}, rotary_dim={self.rotary_dim}, base={self.base}, layout={self.layout!r}{scaling}{xpos}"
