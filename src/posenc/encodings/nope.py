"""NoPE, the control: no position information at all."""

from __future__ import annotations

from posenc.encodings.base import PositionalEncoding
from posenc.encodings.description import Description


class NoPE(PositionalEncoding):
    """No positional encoding (Kazemnejad et al., 2023, https://arxiv.org/abs/2305.19466).

    Every hook is the identity or None. Under causal attention a decoder can still infer
    position from the mask; bidirectional attention without it is permutation-equivariant.
    """

    kind = "none"

    def __init__(self) -> None:
        super().__init__()


#: What posenc says about :class:`NoPE` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="NoPE",
    where_it_acts="nowhere: the control",
    used_by="—",
    parameter_formula="0",
    figures={
        "logit-shift": "Every change is exactly 0: NoPE never reads positions, so shifting them moves no logit. "
        "Order can reach a NoPE model only through the causal mask.",
    },
)
