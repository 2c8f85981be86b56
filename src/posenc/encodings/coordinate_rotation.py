"""The common frame of encodings that turn queries and keys by a map of their own coordinates (STRING,
LieRE, ComRoPE, Golden Gate RoPE, Mochi, PoPE, FoPE): shapes checked, positions resolved, each side turned.

A subclass says how one tensor turns at its positions (:meth:`CoordinateRotation.turn`); queries and
keys turn alike, each by its own positions, so a key turned once stays right for every later query
(``rotated_keys_are_cacheable``) and the relative-position claims are the map's own.
"""

from __future__ import annotations

import torch

from posenc._validation import check_float_tensor, check_positive_int
from posenc.encodings.base import (
    PositionalEncoding,
    PositionSpace,
    constructor_arguments,
    query_key_positions,
)
from posenc.encodings.capabilities import declare

#: Why the lab's sequence tasks do not train encodings of positions on several axes.
GRID_ONLY = "its positions are coordinates on several axes (image patches); the lab's tasks are 1-D sequences"

GRID_FIGURES = {
    "patch-similarity": "One patch against the 14×14 grid: the rotated logit of equal vectors, falling off "
    "with the offset in every direction the rotation's frequencies point along.",
    "logit-shift": "Shifting the whole grid along either axis, or both, leaves the logits unchanged where "
    "the rotation of an offset is the same wherever it starts.",
}


class CoordinateRotation(PositionalEncoding):
    """Queries ``[b, h, i, d_head]`` and keys ``[b, h_kv, j, d_head]`` each turned by a map of their own
    positions: ``[s]`` / ``[b, s]`` on one axis, coordinates ``[s, n]`` / ``[b, s, n]`` on n axes.

    Subclasses set ``self.d_head`` and ``self.axes`` and implement :meth:`turn`. ``per_head``: the map
    differs per head, so q and k need ``n_heads`` heads each (no grouped keys).
    """

    kind = "rotary"
    #: The map of a key reads the key and its own positions only: a cache may keep it turned.
    capabilities = declare(rotated_keys_are_cacheable=True)
    per_head = False

    def __init__(self, d_head: int, *, axes: int = 1, n_heads: int | None = None) -> None:
        super().__init__()
        self.d_head = check_positive_int("d_head", d_head)
        self.axes = check_positive_int("axes", axes)
        self.n_heads = None if n_heads is None else check_positive_int("n_heads", n_heads)

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The head width d_model / n_heads, and the heads where the constructor takes them."""
        sizes = {"d_head": d_model // n_heads, "n_heads": n_heads, "max_len": max_len}
        return {name: value for name, value in sizes.items() if name in constructor_arguments(cls)}

    @property
    def input_widths(self) -> tuple[int, ...]:
        """Widths of q and k that ``rotate`` takes: ``(d_head,)`` (PoPE also takes its own 2·d output)."""
        return (self.d_head,)

    @property
    def position_space(self) -> PositionSpace:
        """``[s]`` on one axis, coordinates ``[s, n]`` on n (host ints, also under torch.compile)."""
        return PositionSpace(columns=self.axes, axes=self.axes)

    def turn(self, x: torch.Tensor, positions: torch.Tensor, *, query: bool) -> torch.Tensor:
        """x ``[b, h, s, d_head]`` turned at coordinates ``[s, n]`` or ``[b, s, n]`` (n ≥ 1: one axis is a
        column of its own here); ``query`` tells the queries from the keys where the map does."""
        raise NotImplementedError

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor | None = None,
        k_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[b, h, i, d_head]`` and k ``[b, h_kv, j, d_head]`` turned at their positions (None: keys
        0 … j − 1 and queries the last i of them, on every axis).

        Raises:
            ValueError: q or k not ``[b, h, s, d_head]``; heads other than ``n_heads`` for a map per head;
                positions that do not fit q or k.
            TypeError: q or k not floating point.
        """
        for name, x in (("q", q), ("k", k)):
            check_float_tensor(name, x)
            if x.dim() != 4 or x.shape[-1] not in self.input_widths:
                widths = " or ".join(map(str, self.input_widths))
                raise ValueError(f"{name} must have shape [b, h, s, d_head={widths}], got {tuple(x.shape)}")
            if self.per_head and x.shape[1] != self.n_heads:
                raise ValueError(
                    f"{type(self).__name__} turns each of its n_heads={self.n_heads} heads by its own map: "
                    f"{name} needs {self.n_heads} heads, got {x.shape[1]}"
                )
        q_positions, k_positions = query_key_positions(q, k, q_positions, k_positions, columns=self.axes)
        if self.axes == 1:  # [(b,) s] -> [(b,) s, 1]: every map reads coordinates
            q_positions, k_positions = q_positions.unsqueeze(-1), k_positions.unsqueeze(-1)
        return self.turn(q, q_positions, query=True), self.turn(k, k_positions, query=False)
