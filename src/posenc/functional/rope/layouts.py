"""Converting q/k projection weights between the interleaved and half-split RoPE layouts."""

from __future__ import annotations

import torch

from posenc._validation import (
    check_choice,
    check_even_positive_int,
    check_positive_int,
)
from posenc.functional.rope.apply import LAYOUTS


def interleaved_to_half_permutation(rotary_dim: int, head_dim: int | None = None) -> torch.Tensor:
    """Channel order that turns an interleaved head into a half-split one: ``half = inter[..., perm]``.

    Pair k sits at (2k, 2k+1) interleaved and at (k, k + r/2) half-split; channels past r stay.
    """
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    head_dim = rotary_dim if head_dim is None else check_positive_int("head_dim", head_dim)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be at most head_dim {head_dim}, got {rotary_dim}")
    pairs = torch.arange(rotary_dim).view(rotary_dim // 2, 2)  # [r/2, 2]: (2k, 2k+1)
    return torch.cat((pairs[:, 0], pairs[:, 1], torch.arange(rotary_dim, head_dim)))


def permute_qk_weight(
    weight: torch.Tensor, n_heads: int, *, rotary_dim: int | None = None, to: str = "half"
) -> torch.Tensor:
    """Permute a q or k projection weight ``[n_heads·d, d_in]`` between layouts.

    ``to="half"`` converts an interleaved checkpoint (GPT-J, Meta's LLaMA) for half-split RoPE
    (transformers' LLaMA); ``to="interleaved"`` converts back. Attention outputs are unchanged:
    the permutation is applied to both q and k, so q·k is a sum over the same pairs.
    A bias ``[n_heads·d]`` is permuted by the same call.
    """
    n_heads = check_positive_int("n_heads", n_heads)
    check_choice("to", to, LAYOUTS)
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight rows {weight.shape[0]} are not divisible by n_heads={n_heads}")
    head_dim = weight.shape[0] // n_heads
    permutation = interleaved_to_half_permutation(head_dim if rotary_dim is None else rotary_dim, head_dim)
    if to == "interleaved":
        permutation = torch.argsort(permutation)
    heads = weight.reshape(n_heads, head_dim, *weight.shape[1:])  # [h, d, ...]
    return heads[:, permutation.to(weight.device)].reshape(weight.shape)


__all__ = [
    "interleaved_to_half_permutation",
    "permute_qk_weight",
]
