"""Per-head RMSNorm of queries and keys (QK-norm): each head's d_head channels over their root mean square.

x ← x / √(mean(x²) + eps) · g over one head's channels, with one gain per channel shared by the heads, a
gain for the queries and another for the keys (Dehghani et al. 2023, arXiv 2302.05442, with LayerNorm;
RMSNorm as Gemma 3, Qwen 3 and Llama 4 use it). A :class:`QKNorm` declares it; where it sits and what
its gain is are the models' choices:

- Gemma 3 (arXiv 2503.19786): ``QKNorm(weight="unit_offset")``, g = 1 + w with w learned from zeros,
  before the rotation (transformers' ``Gemma3RMSNorm``, eps ``rms_norm_eps`` = 1e-6).
- Qwen 3: ``QKNorm()``, g = w learned from ones, before the rotation.
- Llama 4: ``QKNorm(weight=None, eps=1e-5, after_rotation=True)``, no gain (its ``Llama4TextL2Norm``),
  after the rotation, on its RoPE layers only (``use_qk_norm``). A gainless norm commutes with a rotation
  that keeps norms (RoPE), so there the place changes only the rounding; with a gain it does not.

The norm is taken in float32 for half types (float64 stays float64) and rounded once, after the gain.

Notation used for tensor shapes: b batch, h heads, s sequence, d head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from posenc._validation import check_bool, check_positive_float

#: The gains a QK-norm may have: "gain" (x·w, w from ones), "unit_offset" (x·(1 + w), w from zeros:
#: Gemma's convention), None (none: Llama 4's L2 norm).
WEIGHTS = ("gain", "unit_offset", None)


@dataclass(frozen=True)
class QKNorm:
    """Declares an RMSNorm of every query and key head (see the module docstring); each layer that takes
    it builds its own gains (:meth:`build`).

    Attributes:
        weight: ``"gain"`` (x·w, w from ones: Qwen 3), ``"unit_offset"`` (x·(1 + w), w from zeros:
            Gemma 3) or None (no gain: Llama 4).
        eps: added to the mean square (transformers' ``rms_norm_eps``).
        after_rotation: normalise the rotated q and k (Llama 4) rather than the projections (Gemma 3,
            Qwen 3).

    Raises:
        ValueError: a weight outside :data:`WEIGHTS`, an eps that is not finite and > 0.
        TypeError: an eps that is not a real number, an after_rotation that is not a bool.
    """

    weight: str | None = "gain"
    eps: float = 1e-6
    after_rotation: bool = False

    def __post_init__(self) -> None:
        if self.weight not in WEIGHTS:
            raise ValueError(f"qk_norm weight must be one of {list(WEIGHTS)}, got {self.weight!r}")
        check_positive_float("qk_norm eps", self.eps)
        check_bool("after_rotation", self.after_rotation)

    def check_place(self, encoding_name: str, rotation_is_per_token: bool) -> None:
        """Refuse a norm after a rotation that is not each token's own: normalising what ``rotate`` gives
        for one call would make the logits depend on the call (xPos scales q and k about the centre of
        each call's queries, which the norm would no longer cancel), so decoding would differ from the
        full forward. ``rotation_is_per_token``: the encoding's ``rotated_keys_are_cacheable``.

        Raises:
            ValueError: ``after_rotation`` for such an encoding, naming it.
        """
        if self.after_rotation and not rotation_is_per_token:
            raise ValueError(
                f"qk_norm after_rotation=True normalises the rotated q and k, but {encoding_name} does not "
                "rotate each token on its own (rotated_keys_are_cacheable is False): the logits would depend "
                "on the call; normalise before the rotation (after_rotation=False)"
            )

    def build(self, d_head: int) -> HeadRMSNorm:
        """One norm of ``d_head`` channels, its gain (if any) a fresh parameter ``[d_head]``."""
        return HeadRMSNorm(d_head, weight=self.weight, eps=float(self.eps))


def check_qk_norm(qk_norm: object) -> QKNorm | None:
    """None or a :class:`QKNorm`; a TypeError naming anything else."""
    if qk_norm is None or isinstance(qk_norm, QKNorm):
        return qk_norm
    raise TypeError(f"qk_norm must be a posenc.qk_norm.QKNorm or None, got {qk_norm!r}")


class HeadRMSNorm(nn.Module):
    """x ``[..., d]`` / √(mean(x²) + eps) · g over the last axis; ``weight`` ``[d]`` (transformers' name and
    shape) where the norm has a gain."""

    def __init__(self, d_head: int, *, weight: str | None, eps: float) -> None:
        super().__init__()
        self.d_head, self.mode, self.eps = d_head, weight, eps
        if weight is not None:
            initial = torch.ones(d_head) if weight == "gain" else torch.zeros(d_head)
            self.weight = nn.Parameter(initial)  # [d]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)  # half types in float32; float64 stays
        y = x.to(dtype)
        y = y * torch.rsqrt(y.square().mean(dim=-1, keepdim=True) + self.eps)  # [..., d]
        if self.mode == "gain":
            y = y * self.weight.to(dtype)
        elif self.mode == "unit_offset":
            y = y * (1.0 + self.weight.to(dtype))
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d_head}, weight={self.mode!r}, eps={self.eps}"
