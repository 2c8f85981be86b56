"""FoPE, Fourier position embedding: each rotary pair's cos and sin become Fourier series over all kept
frequencies, with learned coefficients, and frequencies too slow to complete a period in training are
clipped to zero, so what a pair cannot learn within the training length is not extrapolated."""

from __future__ import annotations

import math

import torch
from torch import nn

from posenc._validation import check_positive_float, check_positive_int
from posenc.encodings.coordinate_rotation import CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.angles import reduced_angles, split_frequencies
from posenc.functional.rope import apply_rope


def fope_frequencies(d_head: int, base: float, max_len: int) -> torch.Tensor:
    """The frequencies FoPE keeps, float64 ``[D]``: RoPE's ω_k = base^(−2k/d), k = 0 … d/2 − 1, those above
    the floor 2π/max_len (a pair that completes no period within the training length is clipped to 0)."""
    omega = base ** (-2 * torch.arange(d_head // 2, dtype=torch.float64) / d_head)
    return omega[omega > 2 * math.pi / max_len]


class FourierEncoding(CoordinateRotation):
    """FoPE (Hua et al., 2024, https://arxiv.org/abs/2412.17739; vLLM's ``FourierRotaryEmbedding``): each
    rotary pair turns by Fourier series of the kept frequencies, the slowest clipped to zero.

    Pair k of the head (channels k and k + d/2, as GPT-NeoX) turns by

        cos_k(t) = Σ_f C[f, k]·cos(ω_f·t),   sin_k(t) = Σ_f S[f, k]·sin(ω_f·t),

    over the D frequencies ω_f above the floor 2π/max_len (:func:`fope_frequencies`), with learned
    coefficients C and S ``[sets, D, D]``; the d/2 − D pairs below the floor have frequency zero and pass
    unturned (cos 1, sin 0). C and S start at the identity plus Gaussian noise of standard deviation
    ``init_std`` (FoPE's ``fope_init_factor``): at 0 it is RoPE with the slow pairs clipped.

    With coefficients other than the identity, the pairs are no longer rotations and q·k is no longer a
    function of the distance alone: FoPE trades that exactness for spectral mixing.

    Args:
        d_head: head width (even).
        max_len: the training length L whose floor 2π/L clips the slow frequencies.
        n_heads: coefficient sets, one per key head (vLLM's ``fope_sep_head``, per KV head); the query
            heads of a group take their key head's. None: one set for every head.
        base: RoPE's base.
        init_std: the noise added to the identity at initialisation.

    Angles exact for integer positions (|position| < 2^27); the series in float64, cast once.
    """

    def __init__(
        self,
        d_head: int,
        max_len: int,
        n_heads: int | None = None,
        *,
        base: float = 10000.0,
        init_std: float = 0.1,
    ) -> None:
        super().__init__(d_head, axes=1, n_heads=n_heads)
        if self.d_head % 2:
            raise ValueError(f"FoPE turns pairs of channels: d_head must be even, got {d_head}")
        self.max_len = check_positive_int("max_len", max_len)
        self.base = check_positive_float("base", base)
        if not (isinstance(init_std, int | float) and math.isfinite(init_std) and init_std >= 0):
            raise ValueError(f"init_std must be a finite number ≥ 0, got {init_std!r}")
        self.init_std = float(init_std)
        kept = fope_frequencies(self.d_head, self.base, self.max_len)
        self.register_buffer("frequency_pieces_", split_frequencies(kept), persistent=False)  # [D, 4] f64
        sets, count = self.n_heads or 1, kept.shape[0]
        eye = torch.eye(count).expand(sets, count, count)
        self.cos_coef = nn.Parameter(eye + torch.randn(sets, count, count) * self.init_std)  # C [sets, D, D]
        self.sin_coef = nn.Parameter(eye + torch.randn(sets, count, count) * self.init_std)  # S [sets, D, D]

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.frequency_pieces_.dtype != torch.float64:  # rebuilt exactly, never rounded
            kept = fope_frequencies(self.d_head, self.base, self.max_len)
            self.frequency_pieces_ = split_frequencies(kept).to(self.frequency_pieces_.device)
        return self

    @property
    def kept_pairs(self) -> int:
        """D: the pairs whose frequency is above the floor 2π/max_len."""
        return self.frequency_pieces_.shape[0]

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 cos_k and sin_k ``[b or 1, sets, s, d/2]`` at integer positions ``[s]`` or ``[b, s]``."""
        angle = reduced_angles(positions, self.frequency_pieces_)  # [(b,) s, D], exact
        angle = angle[None] if angle.dim() == 2 else angle  # [b or 1, s, D]
        cos = torch.einsum("bsf,gfk->bgsk", torch.cos(angle), self.cos_coef.to(torch.float64))
        sin = torch.einsum("bsf,gfk->bgsk", torch.sin(angle), self.sin_coef.to(torch.float64))
        clipped = self.d_head // 2 - self.kept_pairs  # pairs of frequency zero: cos 1, sin 0
        cos = nn.functional.pad(cos, (0, clipped), value=1.0)
        sin = nn.functional.pad(sin, (0, clipped), value=0.0)
        return cos, sin  # [b or 1, sets, s, d/2]

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        cos, sin = self.cos_sin(positions[..., 0])
        sets = cos.shape[1]
        if sets > 1:
            if x.shape[1] % sets:
                raise ValueError(
                    f"FoPE's {sets} coefficient sets serve {sets} key heads and their query groups: "
                    f"{'q' if query else 'k'} has {x.shape[1]} heads"
                )
            if not query and x.shape[1] != sets:
                raise ValueError(
                    f"FoPE's {sets} coefficient sets are one per key head: k has {x.shape[1]} heads"
                )
            group = x.shape[1] // sets
            cos, sin = cos.repeat_interleave(group, dim=1), sin.repeat_interleave(group, dim=1)
        return apply_rope(x, cos, sin, layout="half")

    def extra_repr(self) -> str:
        return (
            f"d_head={self.d_head}, max_len={self.max_len}, n_heads={self.n_heads}, base={self.base}, "
            f"init_std={self.init_std}, kept_pairs={self.kept_pairs}"
        )


#: What posenc says about :class:`FourierEncoding` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="FoPE",
    where_it_acts="turns q and k by Fourier series of the kept RoPE frequencies; pairs below 2π/L clipped to 0",
    used_by="FoPE (InternLM-family configs, vLLM)",
    parameter_formula="2·h·D² (C and S per key head; D = pairs with ω > 2π/L, at most d_head/2)",
    specimen_kwargs={"d_head": 16, "max_len": 256, "n_heads": 8},
    figures={
        "logit-shift": "Shifting every position moves the logits a little: with coefficients other than the "
        "identity the pairs mix frequencies and q·k is no longer a function of the distance alone."
    },
)
