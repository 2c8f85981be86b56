"""FIRE: an MLP of the log distance over the log of the query's position (progressive interpolation).

Li, You, Guruganesh, Ainslie, Ontanon, Zaheer, Sanghai, Yang, Kumar and Bhojanapalli, 2024, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", https://arxiv.org/abs/2310.04418
(ICLR 2024). The bias of query i and key j ≤ i, per head:

    b(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) ),     ψ(x) = log(c·x + 1)

f_θ an MLP 1 → H → h (one hidden layer of H = 32 ReLU units, one output per head), c and the threshold
L learned. Dividing by ψ of the query's own position maps every distance it can see into [0, 1]
whatever the length (progressive interpolation); L keeps short prefixes from being stretched. The
bias depends on i as well as on i − j, so FIRE gives no per-distance view (``distance_bias``).

Notation used for tensor shapes: b batch, h heads, H hidden units, i / j query / key positions.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc._validation import (
    check_nonnegative_float,
    check_positive_float,
    check_positive_int,
    pair_positions,
)
from posenc.encodings.base import PositionalEncoding
from posenc.encodings.description import Description
from posenc.kernels.per_distance import per_distance_attention
from posenc.kernels.query_blocked import BlockTerms

#: The authors' defaults (the paper's reference implementation): c, the threshold L, the hidden width,
#: and the constant added to the normaliser.
DEFAULT_C = 0.1
DEFAULT_THRESHOLD = 512.0
DEFAULT_HIDDEN = 32
DEFAULT_EPS = 1e-6


def fire_inputs(
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    *,
    eps: float = DEFAULT_EPS,
) -> torch.Tensor:
    """The MLP's input for every pair, ψ(|i − j|) / (ψ(max(L, i)) + eps), float64 ``[(b,) i, j]``.

    Args:
        q_positions, k_positions: integer positions ``[i]`` / ``[j]`` (or ``[b, ·]``), checked.
        c, threshold: the learned c and L as used: positive 0-d tensors (autograd flows through them).
        eps: added to the normaliser, as the authors' code does (it keeps c → 0 finite).

    ψ(x) = log(c·x + 1) is taken as ``log1p(c·x)``; distances and positions are exact in float64.
    """
    c, threshold = c.to(torch.float64), threshold.to(torch.float64)
    distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).abs().to(torch.float64)  # [(b,) i, j]
    normaliser = torch.log1p(c * torch.maximum(q_positions.to(torch.float64), threshold)) + eps  # [(b,) i]
    return torch.log1p(c * distance) / normaliser.unsqueeze(-1)


def relu_mlp_pieces(first: nn.Linear, second: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A scalar-input MLP ``second(relu(first(x)))`` as the piecewise linear function it is.

    With one input, unit k is w_k·x + b_k, switched on or off where x crosses t_k = −b_k/w_k; between
    consecutive crossings the MLP is A·x + B. Returns the crossings sorted, float64 ``[H]`` (+inf for a
    unit with w_k = 0, which never switches), and the slopes and intercepts of the H + 1 pieces, float64
    ``[h, H + 1]`` (piece m holds for x between crossings m − 1 and m). Slopes and intercepts carry
    autograd to every weight: the same gradients as the MLP, away from the crossings.
    """
    w = first.weight[:, 0].to(torch.float64)  # [H]
    b = first.bias.to(torch.float64)  # [H]
    v = second.weight.to(torch.float64)  # [h, H]
    bias_out = second.bias.to(torch.float64)  # [h]
    with torch.no_grad():
        switches = w != 0
        crossings = torch.where(switches, -b / torch.where(switches, w, 1.0), torch.inf)  # [H]
        order = torch.argsort(crossings, stable=True)
        on_before_any = (w < 0) | (~switches & (b > 0))  # units active as x → −∞
        toggle = torch.sign(w)  # +1 switches on at its crossing, −1 off, 0 never
    slope, intercept = v * w, v * b  # [h, H]: each unit's contribution while on
    start_slope = (slope * on_before_any).sum(-1)  # [h]
    start_intercept = (intercept * on_before_any).sum(-1) + bias_out
    steps_slope = (slope * toggle)[:, order].cumsum(-1)  # [h, H]
    steps_intercept = (intercept * toggle)[:, order].cumsum(-1)
    slopes = torch.cat((start_slope[:, None], start_slope[:, None] + steps_slope), dim=-1)  # [h, H+1]
    intercepts = torch.cat((start_intercept[:, None], start_intercept[:, None] + steps_intercept), dim=-1)
    return crossings[order], slopes, intercepts


def _below_threshold(q_positions: torch.Tensor, k_positions: torch.Tensor, threshold: torch.Tensor) -> bool:
    """Whether keys ``[j]`` are consecutive, the queries ``[i]`` the last i of them, and no query beyond the
    threshold L (a host read): then ψ(max(L, i)) = ψ(L) for every query and the bias reads i − j alone."""
    if q_positions.dim() != 1 or k_positions.dim() != 1 or q_positions.shape[0] > k_positions.shape[0]:
        return False
    steps = torch.arange(k_positions.shape[0], device=k_positions.device)
    if not torch.equal(k_positions - k_positions[:1], steps):
        return False
    if not torch.equal(q_positions, k_positions[k_positions.shape[0] - q_positions.shape[0] :]):
        return False
    return float(q_positions[-1]) <= float(threshold.detach())


class FIRE(PositionalEncoding):
    """FIRE's bias (Li et al., 2024, https://arxiv.org/abs/2310.04418): f_θ(ψ(i − j)/ψ(max(L, i))) per head.

    As in the authors' implementation, ψ(x) = log(|c|·x + 1), L = |m|·L₀ with a learned multiplier m
    (initialised at 1) on the initial threshold L₀, and 1e-6 is added to the normaliser; c, m and the
    MLP are learned. The absolute values keep ψ increasing and L positive should training drive c or m
    through zero.

    Causal attention (i ≥ j) is the paper's setting. For a key after the query (bidirectional
    attention) the distance enters as |i − j| — the authors' code takes |c·(i − j)| — still normalised
    by the query's position: a symmetric extension the paper does not evaluate.

    Cost: the bias is materialised, ``[h, i, j]``. The MLP is never run per pair (that would hold
    ``[i, j, H]`` hidden activations): with one input it is piecewise linear with H crossings
    (:func:`relu_mlp_pieces`), so each pair costs a binary search among H crossings and one
    multiply-add per head, and memory stays O(i·j·h), the size of the output (plus float64 ``[i, j]``
    inputs). flex_attention reads the same materialised bias through the base class's lookup.

    Args:
        n_heads: attention heads h (outputs of the MLP).
        hidden: H, hidden units of the MLP (32 in the paper).
        c: initial c of ψ (0.1 in the authors' code).
        threshold: initial threshold L₀ (512 in the authors' code; ``model_arguments`` uses the model's
            ``max_len``, the training length, so interpolation starts where training stops).
        eps: added to ψ(max(L, i)) (1e-6, as the authors).

    Raises:
        ValueError: non-positive n_heads or hidden, c or threshold not positive and finite, a negative eps.
        TypeError: non-integer sizes, non-numeric c, threshold or eps.
    """

    kind = "bias"
    #: The MLP 1 → H → h with biases, c and the threshold's multiplier.
    #: A threshold below the 48 positions of the heatmap, so the figures show the interpolation.

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's heads, and its training length as the initial threshold L₀."""
        return {"n_heads": n_heads, "threshold": float(max_len)}

    def __init__(
        self,
        n_heads: int,
        *,
        hidden: int = DEFAULT_HIDDEN,
        c: float = DEFAULT_C,
        threshold: float = DEFAULT_THRESHOLD,
        eps: float = DEFAULT_EPS,
    ) -> None:
        super().__init__()
        self.n_heads = check_positive_int("n_heads", n_heads)
        self.hidden = check_positive_int("hidden", hidden)
        self.initial_threshold = check_positive_float("threshold", threshold)
        self.eps = check_nonnegative_float("eps", eps)
        self.mlp = nn.Sequential(nn.Linear(1, self.hidden), nn.ReLU(), nn.Linear(self.hidden, self.n_heads))
        self.c = nn.Parameter(torch.tensor(check_positive_float("c", c)))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))  # m: L = |m|·L₀

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        heads = n_heads or self.n_heads
        return self.hidden * (heads + 2) + heads + 2

    def threshold(self) -> torch.Tensor:
        """The threshold L = |m|·L₀ as used, a 0-d tensor (with autograd)."""
        return (self.threshold_scale * self.initial_threshold).abs()

    def inputs(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """The MLP's input ψ(|i − j|)/ψ(max(L, i)) for every pair, float64 ``[(b,) i, j]``."""
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        return fire_inputs(q_positions, k_positions, self.c.abs(), self.threshold(), eps=self.eps)

    def head_values(self, x: torch.Tensor) -> torch.Tensor:
        """f_θ(x) for inputs ``[...]``: ``[h, ...]``, in the MLP's dtype (float32 at least).

        Evaluated piecewise (:func:`relu_mlp_pieces`): memory O(h) per input, never O(H).
        """
        dtype = torch.promote_types(self.mlp[0].weight.dtype, torch.float32)
        crossings, slopes, intercepts = relu_mlp_pieces(self.mlp[0], self.mlp[2])
        piece = torch.searchsorted(crossings, x.detach().to(torch.float64).contiguous())  # [...]
        slopes, intercepts = slopes.to(dtype), intercepts.to(dtype)  # [h, H+1]
        x = x.to(dtype)
        values = torch.empty((slopes.shape[0], *x.shape), dtype=dtype, device=x.device)  # [h, ...]
        for head in range(slopes.shape[0]):  # a head at a time: temporaries of one head's size
            values[head] = torch.addcmul(intercepts[head, piece], slopes[head, piece], x)
        return values

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """The bias ``[h, i, j]`` (``[b, h, i, j]`` for batched positions), float32 (or the MLP's wider dtype)."""
        x = self.inputs(q_positions, k_positions)  # [(b,) i, j]
        values = self.head_values(x)  # [h, (b,) i, j]
        return values if x.dim() == 2 else values.movedim(0, 1)

    def block_terms(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        project=None,
        content: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> BlockTerms:
        """:meth:`bias` for one block of queries at a time (``posenc.kernels.query_blocked``): the MLP's
        pieces (:func:`relu_mlp_pieces`) are formed once, each block's inputs and values per pair."""
        q_positions, k_positions = pair_positions(q_positions, k_positions)
        dtype = torch.promote_types(self.mlp[0].weight.dtype, torch.float32)
        crossings, slopes, intercepts = relu_mlp_pieces(self.mlp[0], self.mlp[2])
        eps = self.eps

        def block(q_rows, k_keys, rows, keys, slopes, intercepts, c, threshold):
            x = fire_inputs(
                q_positions[..., rows], k_positions[..., keys], c, threshold, eps=eps
            )  # [(b,) n, m]
            piece = torch.searchsorted(crossings, x.detach().contiguous())  # [(b,) n, m]
            values = torch.addcmul(intercepts[:, piece], slopes[:, piece], x.to(dtype))  # [h, (b,) n, m]
            return values if x.dim() == 2 else values.movedim(0, 1)

        tensors = (slopes.to(dtype), intercepts.to(dtype), self.c.abs(), self.threshold())
        direct = None
        if _below_threshold(q_positions, k_positions, tensors[3]):

            def direct(q, k, v, *, causal, scale):  # a bias of i − j alone: one table per distance
                return per_distance_attention(q, k, v, self._distance_values, causal=causal, scale=scale)

        return BlockTerms(block, tensors, direct=direct)

    def _distance_values(self, distances: torch.Tensor) -> torch.Tensor:
        """f_θ(ψ(|d|)/ψ(L)) per head at distances ``[n]``, ``[h, n]``: the bias of every query at or below
        the threshold L (whose normaliser is ψ(L))."""
        c, threshold = self.c.abs().to(torch.float64), self.threshold().to(torch.float64)
        x = torch.log1p(c * distances.abs().to(torch.float64)) / (torch.log1p(c * threshold) + self.eps)
        return self.head_values(x)  # [h, n]

    def extra_repr(self) -> str:
        sizes = f"n_heads={self.n_heads}, hidden={self.hidden}"
        return f"{sizes}, threshold={self.initial_threshold:g}, eps={self.eps:g}"


#: What posenc says about :class:`FIRE` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="FIRE",
    where_it_acts="adds a learned MLP of the progressively interpolated log distance",
    used_by="FIRE",
    parameter_formula="H·(h + 2) + h + 2 (H = hidden, 32 by default; independent of L)",
    specimen_kwargs={"n_heads": 8, "threshold": 16.0},
    figures={
        "bias-heads": "An untrained MLP, per head. Up to the threshold (query 16 here) every row is the same "
        "function of i − j, a band along the diagonal; past it each query divides the log distance by the "
        "log of its own position, so the keys it sees span [0, 1] and the pattern stretches with the row.",
        "bias-distance": "The bias the query at position 96 gives keys 0 … 96 back: f_θ of ψ(d)/ψ(96), a "
        "curve over [0, 1] whatever the query's position, steep for near keys (the log spreads them out).",
        "logit-shift": "Shifting every position changes the logits once queries pass the threshold: FIRE "
        "depends on the query's position, not on i − j alone.",
    },
)


__all__ = ["FIRE", "fire_inputs", "relu_mlp_pieces"]
