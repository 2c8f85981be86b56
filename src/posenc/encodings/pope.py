"""PoPE, polar coordinate position embedding: each channel of q and k becomes a complex number whose
magnitude is the content (softplus) and whose phase is the position alone, decoupling what from where."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from posenc._validation import at_least_float32, check_choice, check_positive_float, check_positive_int
from posenc.encodings.coordinate_rotation import CoordinateRotation
from posenc.encodings.description import Description
from posenc.functional.angles import reduced_angles, split_frequencies
from posenc.functional.rope import apply_rope

BIAS_INITS = ("zero", "uniform")


def pope_frequencies(d_head: int, base: float) -> torch.Tensor:
    """PoPE's frequencies, one per channel, float64 ``[d]``: θ_c = base^(−c/d), c = 0 … d − 1."""
    return base ** (-torch.arange(d_head, dtype=torch.float64) / d_head)


class PolarEncoding(CoordinateRotation):
    """PoPE (Gopalakrishnan et al., 2025, https://arxiv.org/abs/2509.10534): each channel of q and k a
    complex number whose magnitude is the content and whose phase is the position alone.

    Channel c of a query at position i becomes softplus(q_c)·e^{i(i·θ_c − δ_{h,c})}, of a key at j
    softplus(k_c)·e^{i·j·θ_c}, and the score is the real part of their product's sum,

        q·k = Σ_c softplus(q_c)·softplus(k_c)·cos((i − j)·θ_c − δ_{h,c}),

    the content in the magnitudes only, the position in the phases only. As real vectors each side is
    ``[μ·cos φ, μ·sin φ]``: ``rotate`` gives q and k twice the head width; the values keep theirs. A
    query or key already in that form (2·d wide) has its phases turned by its position alone, so
    rotating by m and then by k is rotating by m + k.

    δ is a learned phase per head and channel, kept in [−2π, 0] (clamped where it is used, as the paper
    bounds it). x-transformers adds δ to the keys' phases; it is taken from the queries' here, the same
    score, so that grouped keys (fewer key heads) need no δ of their own.

    Args:
        d_head: head width d (the queries and keys become 2d wide).
        n_heads: query heads (one δ row each).
        base: θ_c = base^(−c/d).
        bias_init: ``"zero"`` (δ = 0) or ``"uniform"`` (δ drawn from [−2π, 0]).

    Angles are exact for integer positions (|position| < 2^27), the softplus in float32 at least.
    """

    def __init__(self, d_head: int, n_heads: int, *, base: float = 10000.0, bias_init: str = "zero") -> None:
        super().__init__(d_head, axes=1, n_heads=check_positive_int("n_heads", n_heads))
        self.base = check_positive_float("base", base)
        self.bias_init = check_choice("bias_init", bias_init, BIAS_INITS)
        phase = torch.zeros(self.n_heads, self.d_head)
        if bias_init == "uniform":
            phase.uniform_(-2 * math.pi, 0.0)
        self.phase_bias = nn.Parameter(phase)  # δ [h, d]
        frequencies = pope_frequencies(self.d_head, self.base)
        self.register_buffer("frequency_pieces_", split_frequencies(frequencies), persistent=False)  # [d, 4]

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.frequency_pieces_.dtype != torch.float64:  # rebuilt exactly, never rounded
            pieces = split_frequencies(pope_frequencies(self.d_head, self.base))
            self.frequency_pieces_ = pieces.to(self.frequency_pieces_.device)
        return self

    def phase(self) -> torch.Tensor:
        """δ as used, float64 ``[h, d]``, in [−2π, 0]."""
        return self.phase_bias.to(torch.float64).clamp(-2 * math.pi, 0.0)

    @property
    def input_widths(self) -> tuple[int, int]:
        """d (content: put in polar form) and 2·d (already polar: its phases turn further)."""
        return (self.d_head, 2 * self.d_head)

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        angle = reduced_angles(positions[..., 0], self.frequency_pieces_)  # [(b,) s, d] f64, exact
        angle = angle.unsqueeze(-3) if angle.dim() == 3 else angle[None, None]  # [b or 1, 1, s, d]
        if x.shape[-1] == 2 * self.d_head:  # polar already: e^{iα} turns [μ cos φ, μ sin φ] by α, no δ again
            return apply_rope(x, torch.cos(angle), torch.sin(angle), layout="half")
        if query:
            if x.shape[1] != self.n_heads:
                raise ValueError(
                    f"PoPE turns each of its n_heads={self.n_heads} query heads by its own phase: q needs "
                    f"{self.n_heads} heads, got {x.shape[1]}"
                )
            angle = angle - self.phase()[None, :, None, :]  # [b or 1, h, s, d]
        # contiguous: softplus's backward on a transposed view (q of [b, s, h, d]) breaks under aot_autograd
        magnitude = F.softplus(at_least_float32(x).contiguous())  # [b, h, s, d]
        cos, sin = torch.cos(angle).to(magnitude.dtype), torch.sin(angle).to(magnitude.dtype)
        return torch.cat((magnitude * cos, magnitude * sin), dim=-1).to(x.dtype)  # [b, h, s, 2d]

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, n_heads={self.n_heads}, base={self.base}, bias_init={self.bias_init!r}"


#: What posenc says about :class:`PolarEncoding` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="PoPE",
    where_it_acts="turns q and k into polar form: softplus magnitudes, phases of the position alone (2× wide)",
    used_by="PoPE (x-transformers' polar_pos_emb)",
    parameter_formula="h·d (δ, a phase per head and channel; d = d_head)",
    specimen_kwargs={"d_head": 8, "n_heads": 8},
    figures={
        "logit-shift": "Shifting every position leaves the logits unchanged: the phases differ by (i − j)·θ_c, "
        "and the magnitudes read the content alone."
    },
)
