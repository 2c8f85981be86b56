"""Counted positions of one query against the token index: what a gate-counting encoding (CoPE) counts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from posenc.plots._common import as_array


def counted_positions(
    words: Sequence[str],
    counted: torch.Tensor | np.ndarray,
    token_count: torch.Tensor | np.ndarray,
    *,
    title: str | None = None,
) -> Figure:
    """The counted position p_ij of one query to every key j, beside the token count i − j + 1.

    Args:
        words: the tokens, one per key, labelling the x axis (``[s]``).
        counted: ``[s]`` counted positions (e.g. ``posenc.analysis.counting.sentence_counts(...).counted``).
        token_count: ``[s]`` the count if every gate were 1.
        title: the axes title.

    Returns:
        The Figure; line ``gid="counted"`` holds x = 0 … s − 1, y = ``counted``; dashed line
        ``gid="token-count"`` the token count.

    Raises:
        ValueError: no words, or arrays whose length is not the number of words.
    """
    counted, token_count = as_array(counted, "counted", 1), as_array(token_count, "token_count", 1)
    words = [str(word) for word in words]
    if not words or counted.size != len(words) or token_count.size != len(words):
        raise ValueError(
            f"counted and token_count must hold one value per word ({len(words)}), got {counted.size} and "
            f"{token_count.size}"
        )
    index = np.arange(len(words))
    figure = Figure(figsize=(8, 4.2), layout="constrained")
    axes = figure.add_subplot()
    (reference,) = axes.plot(
        index, token_count, "--", color="grey", label="every gate 1: token count $i - j + 1$"
    )
    reference.set_gid("token-count")
    (line,) = axes.plot(index, counted, "o-", label=r"counted $p_{ij} = \sum_{t=j}^{i} g_{it}$")
    line.set_gid("counted")
    axes.set_xticks(index, [f"{j}\n{word}" for j, word in zip(index, words, strict=True)])
    axes.set_xlabel("key token j (index, word); the query is the last token")
    axes.set_ylabel(r"counted position $p_{ij}$")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right")
    axes.set_title("Counted positions of the last query" if title is None else title)
    return figure


__all__ = ["counted_positions"]
