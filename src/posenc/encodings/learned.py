"""Learned absolute position embeddings, as in GPT-2 and BERT: one trained vector per position."""

from __future__ import annotations

import torch
from torch import nn

from posenc._validation import check_choice, check_on_device, check_positive_float, check_positive_int
from posenc.encodings.additive import AdditiveEncoding
from posenc.encodings.base import PositionSpace
from posenc.encodings.description import Description, SeedRow
from posenc.functional.resample import resample_table

#: init name -> (std, truncated at ±2 std) as in each model's original code:
#: GPT-2 draws wpe from N(0, 0.01²); BERT draws position embeddings from a normal
#: truncated at two standard deviations, std 0.02 (initializer_range).
INITS = {"gpt2": (0.01, False), "bert": (0.02, True)}


class LearnedEncoding(AdditiveEncoding):
    """A trainable table ``[max_len, d_model]`` indexed by position (BERT, GPT-2).

    It cannot represent positions at or past ``max_len``: such positions raise a ValueError
    naming the position instead of being clamped.

    Args:
        max_len: number of positions the table holds (L).
        d_model: width of each code.
        init: ``"gpt2"`` (normal, std 0.01) or ``"bert"`` (normal truncated at ±2σ, std 0.02).
        std: overrides the standard deviation of ``init``.
        mode: ``"add"`` or ``"concat"``.
    """

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        init: str = "gpt2",
        std: float | None = None,
        mode: str = "add",
    ) -> None:
        super().__init__(d_model, mode=mode)
        self.max_len = check_positive_int("max_len", max_len)
        self.init = check_choice("init", init, INITS)
        default_std, self.truncated = INITS[init]
        self.std = default_std if std is None else check_positive_float("std", std)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.d_model))  # [L, d]
        self.reset_parameters()

    def count_parameters(self, max_len: int, d_model: int, n_heads: int) -> int:
        return (max_len or self.max_len) * (d_model or self.d_model)

    @property
    def position_space(self) -> PositionSpace:
        """The table's rows: positions 0 … max_len − 1."""
        return PositionSpace(limit=self.max_len)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.truncated:
                nn.init.trunc_normal_(self.weight, std=self.std, a=-2 * self.std, b=2 * self.std)
            else:
                nn.init.normal_(self.weight, std=self.std)

    def codes(self, positions: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # reading a value would be a host sync
            check_on_device(
                (positions >= 0) & (positions < self.max_len),
                f"positions of a learned table of max_len={self.max_len} must lie in 0 … {self.max_len - 1}",
            )
            return self.weight[positions]
        if positions.numel() == 0:
            return self.weight[positions]  # [..., 0, d_model]: no position to check
        smallest, largest = int(positions.min()), int(positions.max())
        if smallest < 0:
            raise ValueError(f"positions must be non-negative for a learned table, got {smallest}")
        if largest >= self.max_len:
            raise ValueError(
                f"position {largest} is at or past max_len={self.max_len}: a learned table has no code for it"
            )
        return self.weight[positions]  # [..., d_model]

    def resampled(
        self,
        old_size: int | tuple[int, ...],
        new_size: int | tuple[int, ...],
        *,
        prefix_tokens: int = 0,
        mode: str = "bicubic",
        antialias: bool = True,
    ) -> LearnedEncoding:
        """A new encoding whose table is this one moved from an ``old_size`` grid of patches to a
        ``new_size`` one (a ViT fine-tuned at another resolution), prefix rows (CLS) kept; see
        :func:`posenc.functional.resample_table`. Its positions are the new table's rows; its table
        has this one's dtype and device."""
        table = resample_table(
            self.weight.detach(),
            old_size,
            new_size,
            prefix_tokens=prefix_tokens,
            mode=mode,
            antialias=antialias,
        )
        resampled = LearnedEncoding(
            table.shape[0], self.d_model, init=self.init, std=self.std, mode=self.mode
        ).to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            resampled.weight.copy_(table)  # [N', d]
        return resampled

    def for_grid(self, trained: tuple[int, ...], grid: tuple[int, ...]) -> LearnedEncoding:
        """On a grid of another size, the table resampled to it (:meth:`resampled`, bicubic), as a ViT is
        used at a new resolution; on the trained size, itself."""
        if tuple(trained) == tuple(grid):
            return self
        return self.resampled(tuple(trained), tuple(grid))

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, {super().extra_repr()}, init={self.init!r}, std={self.std}"


#: What posenc says about :class:`LearnedEncoding` (``register`` takes it with the class).
DESCRIPTION = Description(
    label="Learned",
    where_it_acts="added to (or concatenated with) the token embeddings",
    used_by="BERT, GPT-2",
    parameter_formula="L·d",
    seed_row=SeedRow(2, "Learned", "L × d", "Poor", "No"),
    figures={
        "matrix-rows": "An untrained table is noise: nothing ties one position's row to the next, and there "
        "are no rows at all past position max_len − 1.",
        "gram": "Only the diagonal stands out: untrained codes are nearly orthogonal, with none of the "
        "sinusoidal Gram matrix's stripes; whatever relation between positions the table holds must be learned.",
    },
)
