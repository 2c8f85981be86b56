"""The one interface through which every positional encoding acts on a transformer.

Seed 004 (§8.2) names three places an encoding can act: added to (or concatenated with)
the token embeddings, rotating queries and keys, or biasing the attention scores. Every
encoding implements all four hooks below; the ones that do not apply are identities or
return None, so attention code never branches on the type of encoding.

Notation used for tensor shapes:
    b batch, s sequence, h heads, d width (d_head per head), i / j query / key positions.

Positions are explicit integer tensors, ``[s]`` (shared by the batch) or ``[b, s]``;
``None`` means ``arange(s)``. A KV-cache offset or a packed sequence is expressed as
positions, so one contract covers training, decoding and packing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from posenc._validation import as_positions, check_float_tensor

KINDS = ("additive", "rotary", "bias", "none")


def resolve_positions(positions: torch.Tensor | None, x: torch.Tensor, *, seq_dim: int) -> torch.Tensor:
    """Positions for the sequence axis ``seq_dim`` of x: ``[s]`` or ``[b, s]`` int64 on x's device.

    Raises:
        ValueError: non-integer positions, or a shape that does not match x.
    """
    seq_len = x.shape[seq_dim]
    if positions is None:
        return torch.arange(seq_len, device=x.device)
    positions = as_positions(positions, device=x.device)
    batch = x.shape[0]
    if positions.dim() == 1 and positions.shape[0] == seq_len:
        return positions
    if positions.dim() == 2 and positions.shape == (batch, seq_len):
        return positions
    raise ValueError(
        f"positions must have shape [{seq_len}] or [{batch}, {seq_len}] to match an input of shape "
        f"{tuple(x.shape)}, got {tuple(positions.shape)}"
    )


class PositionalEncoding(nn.Module):
    """Base class: every hook is a no-op; subclasses override the ones where they act.

    Class attributes:
        kind: ``"additive"`` (acts on embeddings), ``"rotary"`` (rotates q and k),
            ``"bias"`` (biases attention scores) or ``"none"`` (the NoPE control).
        parameter_formula: the number of learned parameters as a formula of L (``max_len``),
            d (``d_model``) and h (``n_heads``), e.g. ``"L·d"``.
    """

    kind: str = "none"
    parameter_formula: str = "0"
    #: Buffers derived from hyper-parameters and kept in float64: a dtype conversion of the module
    #: (``.to(torch.bfloat16)``) empties them instead of rounding them; they are rebuilt on demand.
    exact_buffers: tuple[str, ...] = ()

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        for name in self.exact_buffers:
            buffer = getattr(self, name)
            if buffer.dtype != torch.float64:
                setattr(
                    self, name, torch.empty((0, *buffer.shape[1:]), dtype=torch.float64, device=buffer.device)
                )
        return self

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        """The ``parameter_formula`` evaluated at L = max_len, d = d_model, h = n_heads, with this
        instance's other settings (T5's ``num_buckets``, Swin's ``window``)."""
        return 0

    #: Whether a key rotated once stays right for every later query, so a KV cache may hold rotated
    #: keys. Where False, attention caches keys unrotated and rotates them with each call's queries.
    rotated_keys_are_cacheable: bool = True

    @property
    def acts_in_attention(self) -> bool:
        """Whether attention's hooks (rotate, bias, score_mod) do anything for this encoding."""
        return self.kind not in ("additive", "none")

    def output_width(self, input_width: int) -> int:
        """Width of ``embed``'s output for an input of width ``input_width``."""
        return input_width

    def embed(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings ``[b, s, d]`` -> ``[b, s, d']`` with position information (d' ≥ d)."""
        return check_float_tensor("x", x)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries ``[b, h, i, d_head]`` and keys ``[b, h, j, d_head]`` -> rotated (q, k), same shapes."""
        return check_float_tensor("q", q), check_float_tensor("k", k)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        """Additive attention-score bias ``[h, i, j]`` or ``[b, h, i, j]``, or None."""
        return None

    def score_mod(
        self,
        q_offset: int = 0,
        kv_offset: int = 0,
        *,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> Callable | None:
        """A ``flex_attention`` score_mod computing the bias inside the kernel, or None.

        Positions are ``q_positions`` / ``k_positions`` when given, else index + offset.
        """
        return None

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.embed(x, positions)
