"""Position remaps that extend a RoPE model past its training length L without changing its frequencies:
the extension study's rows after the scalings (:mod:`posenc.lab.extension`).

Each is a position function written from its paper; a run names one in ``RunConfig.position_remap``.

- **Self-Extend** (Jin et al. 2024, "LLM Maybe LongLM", arXiv:2401.01325): a query i and key j at
  distance i − j < W (the neighbour window) use it as it is; farther ones use the grouped distance
  ⌊i/G⌋ + W − ⌊W/G⌋ − ⌊j/G⌋ (:func:`self_extend_distance`), which continues the window's distances and
  grows G times slower. No training.
- **ReRoPE** (Su 2023, "Rectified Rotary Position Embeddings"): the distance is min(i − j, w)
  (:func:`rerope_distance`): exact within the window, w beyond it. No training.
- **PoSE** (Zhu et al. 2023, arXiv:2309.10400): fine-tuning at the training length L with skip-wise
  position ids that span the target length (:func:`pose_positions`): the window is cut into chunks,
  each chunk keeps consecutive ids and is shifted by a skip bias u_c, with 0 = u_0 ≤ u_1 ≤ … ≤ T − L.
  Evaluation reads ordinary positions.
- **Continuous random positions** (arXiv:2602.14050): fine-tuning at L with positions drawn as sorted
  continuous uniforms over the target range [0, T) (:func:`continuous_positions`); evaluation reads
  ordinary positions.

How the scores are computed (:func:`remapped_scores`). Self-Extend and ReRoPE need a distance RoPE
cannot give with one position per token (a distance that is not a difference of two positions), so
their attention computes the scores twice and merges them: *near* scores with queries and keys turned
to their own positions p (distance p_i − p_j), *far* scores with queries turned to f_q(p_i) and keys to
f_k(p_j) (Self-Extend: ⌊p/G⌋ + W − ⌊W/G⌋ and ⌊p/G⌋; ReRoPE: w and 0, so every far distance is w), then
``where(p_i − p_j < window, near, far)`` before the causal mask and the softmax. Both are RoPE's own
rotations (the encoding's ``rotate``), so the merge is exact wherever f_q(p_i) − f_k(p_j) is the
paper's distance; a test compares it with a loop over every (i, j). The continuous remap turns queries
and keys at float positions with the encoding's own frequencies (``apply_rope``). A remapped model
evaluates eagerly (scores materialised) and serves no KV cache or packed documents.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc._validation import at_least_float32, check_positive_int

SELF_EXTEND, REROPE, POSE, CONTINUOUS = "self_extend", "rerope", "pose", "continuous"
#: Every remap, in the report's order; those computed in attention (zero-shot and fine-tuned) and those
#: that only change the positions a fine-tune reads (their zero-shot model is RoPE as trained).
REMAPS = (SELF_EXTEND, REROPE, POSE, CONTINUOUS)
IN_ATTENTION = (SELF_EXTEND, REROPE)
FINE_TUNE_ONLY = (POSE, CONTINUOUS)


# --- position functions ----------------------------------------------------------------------------


def self_extend_distance(i: torch.Tensor, j: torch.Tensor, window: int, group: int) -> torch.Tensor:
    """Self-Extend's distance between query positions ``i`` and key positions ``j`` (int64, broadcast):
    i − j below ``window``, else ⌊i/G⌋ + W − ⌊W/G⌋ − ⌊j/G⌋ (Jin et al. 2024, §3)."""
    check_positive_int("window", window)
    check_positive_int("group", group)
    near = i - j
    far = (
        torch.div(i, group, rounding_mode="floor")
        + (window - window // group)
        - torch.div(j, group, rounding_mode="floor")
    )
    return torch.where(near < window, near, far)


def self_extend_group(target: int, trained: int, window: int) -> int:
    """The smallest group size G whose largest distance over ``target`` positions,
    ⌊(target − 1)/G⌋ + W − ⌊W/G⌋ (query target − 1, key 0), stays below the ``trained`` length: every
    distance is then one the model was trained on (Jin et al.'s (L − W)·G + W ≥ target, exactly)."""
    if not 0 < window < trained:
        raise ValueError(f"window must lie in 1 … trained − 1 = {trained - 1}, got {window}")
    group = 1
    while (target - 1) // group + window - window // group >= trained:
        group += 1
    return group


def rerope_distance(i: torch.Tensor, j: torch.Tensor, window: int) -> torch.Tensor:
    """ReRoPE's distance: min(i − j, w) (int64, broadcast)."""
    check_positive_int("window", window)
    return torch.clamp(i - j, max=window)


def pose_positions(
    rows: int, length: int, target: int, chunks: int = 2, generator: torch.Generator | None = None
) -> torch.Tensor:
    """PoSE's skip-wise position ids ``[rows, length]`` (int64) spanning 0 … target − 1.

    Each row is cut into ``chunks`` chunks at cut points drawn uniformly (every chunk at least one
    token); chunk c keeps consecutive ids shifted by its skip bias u_c, with u_0 = 0 and u_c drawn
    uniformly from u_{c−1} … target − length (Zhu et al. 2023, §3.2), so ids increase and end below
    ``target``.
    """
    for name, value in (("rows", rows), ("length", length), ("target", target), ("chunks", chunks)):
        check_positive_int(name, value)
    if target < length or chunks > length:
        raise ValueError(f"PoSE needs length ≤ target and chunks ≤ length, got {length}, {target}, {chunks}")
    room = target - length
    ids = torch.empty(rows, length, dtype=torch.int64)
    for row in range(rows):
        cuts = (
            torch.randperm(length - 1, generator=generator)[: chunks - 1] + 1
        )  # distinct, in 1 … length − 1
        starts = [0, *sorted(cuts.tolist())]
        bias = 0
        for c, start in enumerate(starts):
            stop = starts[c + 1] if c + 1 < len(starts) else length
            if c:
                bias = int(torch.randint(bias, room + 1, (), generator=generator))
            ids[row, start:stop] = torch.arange(start, stop) + bias
    return ids


def continuous_positions(
    rows: int, length: int, target: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``[rows, length]`` float64 positions: ``length`` uniforms on [0, target), sorted, per row."""
    for name, value in (("rows", rows), ("length", length), ("target", target)):
        check_positive_int(name, value)
    draws = torch.rand(rows, length, dtype=torch.float64, generator=generator) * target
    return torch.sort(draws, dim=-1).values


# --- scores -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Remap:
    """One remap's settings, as a run records them (``RunConfig.position_remap``)."""

    name: str  # one of REMAPS
    window: int | None = None  # Self-Extend's neighbour window W, ReRoPE's w
    group: int | None = None  # Self-Extend's group size G
    target: int | None = None  # PoSE's and the continuous remap's target length T
    chunks: int = 2  # PoSE's chunks

    @classmethod
    def of(cls, settings: dict) -> Remap:
        """The remap a recorded ``position_remap`` names; a ValueError naming a bad one."""
        if not isinstance(settings, dict) or settings.get("name") not in REMAPS:
            raise ValueError(f"position_remap must name one of {', '.join(REMAPS)}, got {settings!r}")
        remap = cls(**settings)
        needed = {SELF_EXTEND: ("window", "group"), REROPE: ("window",), POSE: ("target",)}
        for field in needed.get(remap.name, ("target",)):
            check_positive_int(f"position_remap {field}", getattr(remap, field))
        return remap

    def distance(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """The paper's distance of query ``i`` and key ``j`` (the attention remaps)."""
        if self.name == SELF_EXTEND:
            return self_extend_distance(i, j, self.window, self.group)
        if self.name == REROPE:
            return rerope_distance(i, j, self.window)
        return i - j

    def far_positions(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(query, key) positions of the far scores: their difference is the far distance."""
        if self.name == SELF_EXTEND:
            grouped = torch.div(positions, self.group, rounding_mode="floor")
            return grouped + (self.window - self.window // self.group), grouped
        return torch.full_like(positions, self.window), torch.zeros_like(positions)  # ReRoPE


def _expand_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped keys or values ``[b, h_kv, s, d]`` repeated to ``heads``."""
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def remapped_scores(
    encoding, remap: Remap, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """Attention logits ``[b, h, i, j]`` of queries ``[b, h, i, d]`` and keys ``[b, h, j, d]`` (unturned) at
    ``positions`` (``[s]`` or ``[b, s]``; float for the continuous remap while it trains), before the mask.

    Self-Extend and ReRoPE: near and far scores merged where the distance is below the window (see the
    module); the other remaps: one computation at their positions.
    """
    scale = encoding.logit_scale(q.shape[-1])
    if positions.is_floating_point():  # the rotation takes float positions as given, angles exact
        turned_q, turned_k = encoding.rotate(q, k, positions, positions)
        return turned_q @ turned_k.transpose(-1, -2) * scale
    near_q, near_k = encoding.rotate(q, k, positions, positions)
    near = near_q @ near_k.transpose(-1, -2)  # [b, h, i, j]
    if remap.name not in IN_ATTENTION:
        return near * scale
    far_q_positions, far_k_positions = remap.far_positions(positions)
    far_q, far_k = encoding.rotate(q, k, far_q_positions, far_k_positions)
    far = far_q @ far_k.transpose(-1, -2)  # [b, h, i, j]
    within = (positions[..., :, None] - positions[..., None, :]) < remap.window  # [(b,) i, j]
    if within.dim() == 3:
        within = within[:, None]  # [b, 1, i, j]
    return torch.where(within, near, far) * scale


class _Step:
    """The float positions of the continuous remap for the current training step (None: evaluation)."""

    def __init__(self) -> None:
        self.positions: torch.Tensor | None = None


def _forward_at(layer, remap: Remap, step: _Step, x, positions, cache=None, documents=None):
    """``MultiHeadAttention.forward_at`` with remapped scores (installed by :func:`install`)."""
    if cache is not None or documents is not None:
        raise ValueError(f"a model with the {remap.name} remap serves no KV cache and no packed documents")
    b, s, _ = x.shape
    q = layer.q_proj(x).view(b, s, layer.n_heads, layer.d_head).transpose(1, 2)  # [b, h, s, d]
    k = layer.k_proj(x).view(b, s, layer.n_kv_heads, layer.d_head).transpose(1, 2)  # [b, h_kv, s, d]
    v = layer.v_proj(x).view(b, s, layer.n_kv_heads, layer.d_head).transpose(1, 2)  # [b, h_kv, s, d]
    k, v = _expand_heads(k, layer.n_heads), _expand_heads(v, layer.n_heads)
    at = step.positions if step.positions is not None else positions
    scores = at_least_float32(remapped_scores(layer.encoding, remap, q, k, at))  # [b, h, s, s]
    if layer.causal:
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)  # [i, j]: key after query
        scores = scores.masked_fill(future, -math.inf)
    out = F.softmax(scores, dim=-1).to(v.dtype) @ v  # [b, h, s, d]
    return layer.out_proj(out.transpose(1, 2).reshape(b, s, layer.n_heads * layer.d_head))


def install(model, settings: dict) -> _Step | None:
    """Put the remap into every attention layer of ``model`` (an instance override of ``forward_at``);
    PoSE needs none (its ids go in as positions). Returns the continuous remap's per-step holder.

    Raises:
        ValueError: an encoding that is not a rotation alone (a bias or score terms would be dropped).
    """
    remap = Remap.of(settings)
    if remap.name == POSE:
        return None
    for block in model.blocks:
        encoding = block.attention.encoding
        if encoding.kind != "rotary":  # a rotation alone: no bias or score terms for the remap to drop
            raise ValueError(
                f"the {remap.name} remap turns the queries and keys of a rotation; {type(encoding).__name__} "
                f"is of kind {encoding.kind!r}"
            )
    step = _Step()
    for block in model.blocks:
        block.attention.forward_at = types.MethodType(
            lambda layer, *args, **kwargs: _forward_at(layer, remap, step, *args, **kwargs), block.attention
        )
    return step


def training_positions(settings: dict, rows: int, length: int) -> torch.Tensor | None:
    """The positions ``[rows, length]`` a fine-tune step reads under the remap (PoSE's ids, the continuous
    remap's floats), drawn from torch's generator (a checkpoint resumes them); None: the ordinary ones."""
    remap = Remap.of(settings)
    if remap.name == POSE:
        return pose_positions(rows, length, remap.target, remap.chunks)
    if remap.name == CONTINUOUS:
        return continuous_positions(rows, length, remap.target)
    return None


__all__ = [
    "CONTINUOUS",
    "FINE_TUNE_ONLY",
    "IN_ATTENTION",
    "POSE",
    "REMAPS",
    "REROPE",
    "SELF_EXTEND",
    "Remap",
    "continuous_positions",
    "install",
    "pose_positions",
    "remapped_scores",
    "rerope_distance",
    "self_extend_distance",
    "self_extend_group",
    "training_positions",
]
