"""xPos's reference point (Sun et al., 2022, https://arxiv.org/abs/2212.10554) for RotaryEncoding.

Queries are scaled by ζ^((pos − c)/scale_base) and keys by its inverse, c the centre of a call's query
positions: q·k gains ζ^((m − n)/scale_base) whatever c is, and the scales stay finite as long as no
position lies too far from c for the dtype (:func:`xpos_reference` checks it).
"""

from __future__ import annotations

import math

import torch

from posenc._validation import check_on_device
from posenc.functional.rope import XPOS_GAMMA


def xpos_reference(
    q_positions: torch.Tensor, k_positions: torch.Tensor, dtype: torch.dtype, scale_base: float
) -> torch.Tensor:
    """The centre of each row's query positions ``[s]`` or ``[b, s]``: ``[1]`` or ``[b, 1]``.

    Raises ValueError (a failed device check under torch.compile) where a query below it, or a key
    ``[j]`` or ``[b, j]`` above it, is too far for ζ_0^(offset/scale_base) to stay within √max of ``dtype``.
    """
    low, high = q_positions.amin(dim=-1, keepdim=True), q_positions.amax(dim=-1, keepdim=True)
    reference = (low + high) // 2  # [1] or [b, 1], an integer: offsets stay exact
    # the smallest ζ_k is ζ_0 = γ/(1 + γ) (γ = 0.4), a host constant: no tensor read under compile
    zeta_0 = XPOS_GAMMA / (1 + XPOS_GAMMA)
    reach = 0.5 * math.log(torch.finfo(dtype).max) / -math.log(zeta_0)
    allowed = int(reach * scale_base)  # the largest offset from the reference
    if torch.compiler.is_compiling():  # reading a value would be a host sync
        check_on_device(
            torch.cat(((reference - q_positions).flatten(), (k_positions - reference).flatten())) <= allowed,
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


__all__ = ["xpos_reference"]
