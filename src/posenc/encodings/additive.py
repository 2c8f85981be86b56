"""Absolute encodings that act on the token embeddings, by addition or concatenation (seed 004 §8.1)."""

from __future__ import annotations

import torch

from posenc._validation import check_choice, check_float_tensor, check_int, check_positive_int
from posenc.encodings.base import PositionalEncoding, resolve_positions
from posenc.encodings.capabilities import declare

MODES = ("add", "concat")


class AdditiveEncoding(PositionalEncoding):
    """An absolute code per position, ``codes(positions) -> [..., s, d_model]``, joined to the embeddings.

    ``mode="add"``: Embed(x) + PE(pos), the standard form; the input width must equal ``d_model``.
    ``mode="concat"``: [Embed(x); PE(pos)], widening the output by the code's own width ``d_model``.
    ``prefix_tokens``: the first this many tokens of each call get no code (a zero one): a ViT's CLS
    and register tokens, as MAE's table and diffusers' ``cls_token=True`` give them; their positions are
    read but not used. An encoder sees the whole sequence in one call; a decoder's cached calls would
    each start with tokens of the grid, so keep 0 there.
    """

    kind = "additive"
    # the codes are in the embeddings, so in every cached key: the kind says so already, declared for the reader
    capabilities = declare(follows_moving_positions=False)

    def __init__(self, d_model: int, *, mode: str = "add", prefix_tokens: int = 0) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.mode = check_choice("mode", mode, MODES)
        self.prefix_tokens = check_int("prefix_tokens", prefix_tokens)
        if self.prefix_tokens < 0:
            raise ValueError(f"prefix_tokens must be ≥ 0, got {prefix_tokens}")

    def codes(self, positions: torch.Tensor) -> torch.Tensor:
        """Position codes ``[..., d_model]`` for integer positions ``[...]``."""
        raise NotImplementedError

    def output_width(self, input_width: int) -> int:
        return input_width + self.d_model if self.mode == "concat" else input_width

    def embed(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        check_float_tensor("x", x)
        if x.dim() != 3 or x.shape[1] == 0:
            raise ValueError(f"x must have shape [b, s, d] with s ≥ 1, got {tuple(x.shape)}")
        positions = resolve_positions(
            positions, x, seq_dim=1, columns=self.position_space.columns
        )  # [s] or [b, s] (, n)
        codes = self.codes(positions).to(x.dtype)  # [s, d_model] or [b, s, d_model]
        if self.prefix_tokens:
            if x.shape[1] < self.prefix_tokens:
                raise ValueError(
                    f"a call of {x.shape[1]} tokens holds fewer than the prefix_tokens={self.prefix_tokens} "
                    "that get no code"
                )
            coded = torch.arange(x.shape[1], device=x.device) >= self.prefix_tokens  # [s]
            codes = codes * coded[:, None].to(codes.dtype)  # the prefix rows zero
        if self.mode == "add":
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"mode='add' needs inputs of width d_model={self.d_model}, got width {x.shape[-1]}"
                )
            return x + codes
        codes = codes.expand(x.shape[0], x.shape[1], self.d_model)  # [b, s, d_model]
        return torch.cat((x, codes), dim=-1)  # [b, s, d + d_model]

    def extra_repr(self) -> str:
        prefix = f", prefix_tokens={self.prefix_tokens}" if self.prefix_tokens else ""
        return f"d_model={self.d_model}, mode={self.mode!r}{prefix}"
