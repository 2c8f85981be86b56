"""Positions on several axes: grids of patches, and M-RoPE's positions for text mixed with images and video.

A position with axes is a row of n coordinates: ``[s, n]`` (shared by the batch) or ``[b, s, n]``,
integer (exact angles) or float (used as given). Images use (h, w), video (t, h, w), and
vision-language models put text tokens on the diagonal (t = h = w).

- :func:`grid_positions` numbers the patches of an h×w or t×h×w grid row by row, after any prefix
  tokens (a ViT's CLS, register tokens) at a coordinate the model chooses.
- :func:`mrope_positions` is Qwen2-VL's position index (``get_rope_index`` in transformers 5.x, with
  Qwen2.5-VL's time intervals and Qwen3-VL's frame-by-frame video) for a sequence of text, image and
  video tokens, with the ``rope_deltas`` that decoding adds (:func:`mrope_decode_positions`).
- :func:`to_mrope_layout` and :func:`from_mrope_layout` convert to and from transformers' ``[3, b, s]``.

Notation used for tensor shapes: b batch, s sequence, n coordinate axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from posenc._validation import check_int, check_positive_int, check_positive_ints

#: Token types of :func:`mrope_positions`, as transformers' ``mm_token_type_ids``.
TEXT, IMAGE, VIDEO = 0, 1, 2


def grid_positions(
    sizes: Sequence[int],
    *,
    prefix_tokens: int = 0,
    prefix_position: int | Sequence[int] = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Coordinates of the patches of a grid, row-major (the last axis fastest), after ``prefix_tokens``.

    ``grid_positions((2, 3))`` is (0, 0), (0, 1), (0, 2), (1, 0), … : token p of an h×w image at
    (p // w, p % w), the order in which ViTs flatten their patches. Prefix tokens (CLS, registers)
    come first, each at ``prefix_position`` on every axis (or per axis): 0, the origin, gives them the
    identity rotation under RoPE, as RoPE-ViT and EVA leave them unrotated and Flux places its text.
    MAE's 2-D sin-cos gives a CLS token no code at all: build the encoding with ``prefix_tokens`` too.

    Args:
        sizes: the grid, (h, w) or (t, h, w), any number of axes.
        prefix_tokens: tokens before the grid.
        prefix_position: their coordinate, one int for every axis or one per axis.

    Returns:
        int64 ``[prefix_tokens + Π sizes, n]``.

    Raises:
        ValueError: a side < 1 (named), negative ``prefix_tokens``, a per-axis ``prefix_position`` of
            another length than ``sizes``.
    """
    sizes = check_positive_ints("sizes", sizes)
    prefix_tokens = check_int("prefix_tokens", prefix_tokens)
    if prefix_tokens < 0:
        raise ValueError(f"prefix_tokens must be ≥ 0, got {prefix_tokens}")
    axes = [torch.arange(size, device=device) for size in sizes]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(sizes))  # [Π sizes, n]
    if not prefix_tokens:
        return grid
    prefix = torch.as_tensor(prefix_position, dtype=torch.int64, device=device)
    if prefix.dim() > 1 or (prefix.dim() == 1 and prefix.numel() != len(sizes)):
        raise ValueError(
            f"prefix_position must be one int or one per axis ({len(sizes)}), got {prefix_position!r}"
        )
    return torch.cat((prefix.expand(prefix_tokens, len(sizes)), grid))


def to_mrope_layout(positions: torch.Tensor) -> torch.Tensor:
    """posenc's ``[b, s, n]`` (or ``[s, n]``) positions as transformers' M-RoPE ``position_ids`` ``[n, b, s]``."""
    if not isinstance(positions, torch.Tensor) or positions.dim() not in (2, 3):
        raise ValueError(
            f"positions must be [s, n] or [b, s, n], got {getattr(positions, 'shape', positions)}"
        )
    return (positions if positions.dim() == 3 else positions[None]).permute(2, 0, 1)


def from_mrope_layout(position_ids: torch.Tensor) -> torch.Tensor:
    """transformers' M-RoPE ``position_ids`` ``[n, b, s]`` as posenc's ``[b, s, n]``; text-only ``[b, s]``
    ids go on the diagonal of 3 axes."""
    if not isinstance(position_ids, torch.Tensor) or position_ids.dim() not in (2, 3):
        raise ValueError(
            f"position_ids must be [n, b, s] (or text-only [b, s]), got {getattr(position_ids, 'shape', position_ids)}"
        )
    if position_ids.dim() == 2:
        return position_ids[..., None].expand(*position_ids.shape, 3)
    return position_ids.permute(1, 2, 0)


def _vision_positions(
    start: int, grid: Sequence[int], merge: int, interval: float, device
) -> tuple[torch.Tensor, int]:
    """Coordinates ``[t·h·w/merge², 3]`` of one image or video after ``start``, and where text resumes.

    t counts frames (times ``interval``, truncated to an integer as transformers does), h and w
    merged patches; every axis starts at ``start``. Text resumes at start + max(h, w)/merge.
    """
    t, h, w = grid
    h, w = h // merge, w // merge
    times = (torch.arange(t, device=device) * interval).long() + start
    rows, cols = torch.arange(h, device=device) + start, torch.arange(w, device=device) + start
    coords = torch.stack(torch.meshgrid(times, rows, cols, indexing="ij"), dim=-1).reshape(-1, 3)
    return coords, start + max(grid[1], grid[2]) // merge


def _check_grids(name: str, grids: torch.Tensor | Sequence | None, merge: int) -> list[tuple[int, int, int]]:
    if grids is None:
        return []
    grids = torch.as_tensor(grids)
    if grids.dim() != 2 or grids.shape[-1] != 3 or grids.dtype.is_floating_point:
        raise ValueError(f"{name} must be integer [count, 3] rows of (t, h, w), got {tuple(grids.shape)}")
    rows = [tuple(int(v) for v in row) for row in grids.tolist()]
    for index, (t, h, w) in enumerate(rows):
        if min(t, h, w) < 1 or h % merge or w % merge:
            raise ValueError(
                f"{name}[{index}] = ({t}, {h}, {w}) must be positive with h and w divisible by "
                f"spatial_merge_size={merge}"
            )
    return rows


def _runs(types: list[int]) -> list[tuple[int, int, int]]:
    """(type, start, end) of each run of equal token types."""
    runs, start = [], 0
    for index in range(1, len(types) + 1):
        if index == len(types) or types[index] != types[start]:
            runs.append((types[start], start, index))
            start = index
    return runs


def mrope_positions(
    token_types: torch.Tensor,
    image_grids: torch.Tensor | Sequence | None = None,
    video_grids: torch.Tensor | Sequence | None = None,
    *,
    spatial_merge_size: int = 1,
    attention_mask: torch.Tensor | None = None,
    video_time_intervals: Sequence[float] | torch.Tensor | None = None,
    split_video_frames: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE positions (t, h, w) of text, image and video tokens, and the ``rope_deltas`` decoding adds.

    The position index of Qwen2-VL (Wang et al., 2024, https://arxiv.org/abs/2409.12191) as
    transformers 5.x computes it (``get_rope_index``): text tokens count up on the diagonal; an image
    or video placed at position p gives its merged patches (p + t·interval, p + row, p + col), and the
    text after it resumes at p + max(h, w)/merge. ``rope_deltas`` = (largest position + 1) − (tokens),
    so that decoding token n continues at n + delta on every axis.

    Args:
        token_types: ``[b, s]``: 0 text, 1 image, 2 video (transformers' ``mm_token_type_ids``).
        image_grids, video_grids: ``[count, 3]`` (t, h, w) patch grids in order of appearance
            (``image_grid_thw``, ``video_grid_thw``); the tokens of one image are t·h·w/merge².
        spatial_merge_size: patches merged along h and w into one token (2 in Qwen2-VL).
        attention_mask: ``[b, s]``, 0 for padding: padded tokens are skipped and get position 0.
        video_time_intervals: per video, the step of its temporal positions (Qwen2.5-VL:
            ``tokens_per_second · second_per_grid_ts``); default 1 (Qwen2-VL).
        split_video_frames: each video frame a video of its own (t = 1), as Qwen3-VL, which separates
            frames by timestamp text.

    Returns:
        ``(positions [b, s, 3] int64, rope_deltas [b, 1] int64)``.

    Raises:
        ValueError: token types other than 0, 1, 2; vision tokens that the grids do not account for
            (named by batch row and position), grids left over, bad grids or shapes.
    """
    token_types = torch.as_tensor(token_types)
    if token_types.dim() != 2 or token_types.dtype.is_floating_point:
        raise ValueError(f"token_types must be integer [b, s], got {tuple(token_types.shape)}")
    unknown = set(token_types.unique().tolist()) - {TEXT, IMAGE, VIDEO}
    if unknown:
        raise ValueError(f"token_types must be 0 (text), 1 (image) or 2 (video), got {sorted(unknown)}")
    merge = check_positive_int("spatial_merge_size", spatial_merge_size)
    images = _check_grids("image_grids", image_grids, merge)
    videos = _check_grids("video_grids", video_grids, merge)
    intervals = (
        [1.0] * len(videos) if video_time_intervals is None else [float(v) for v in video_time_intervals]
    )
    if len(intervals) != len(videos):
        raise ValueError(
            f"video_time_intervals must give one interval per video ({len(videos)}), got {len(intervals)}"
        )
    if split_video_frames:
        videos, intervals = (
            [(1, h, w) for t, h, w in videos for _ in range(t)],
            [i for (t, _, _), i in zip(videos, intervals, strict=True) for _ in range(t)],
        )
    queues = {
        IMAGE: list(zip(images, [1.0] * len(images), strict=True)),
        VIDEO: list(zip(videos, intervals, strict=True)),
    }
    b, s = token_types.shape
    mask = (
        torch.ones(b, s, dtype=torch.bool)
        if attention_mask is None
        else torch.as_tensor(attention_mask).bool()
    )
    if mask.shape != (b, s):
        raise ValueError(
            f"attention_mask must have the shape of token_types {(b, s)}, got {tuple(mask.shape)}"
        )
    positions = torch.zeros(b, s, 3, dtype=torch.int64, device=token_types.device)
    deltas = []
    for row in range(b):
        kept = mask[row].nonzero().flatten()
        types = token_types[row, kept].tolist()
        row_positions, current = [], 0
        for kind, start, end in _runs(types):
            if kind == TEXT:
                row_positions.append(torch.arange(current, current + end - start)[:, None].expand(-1, 3))
                current += end - start
                continue
            current = _place_vision(
                row_positions, queues[kind], kind, end - start, current, merge, (row, start)
            )
        row_positions = torch.cat(row_positions) if row_positions else torch.zeros(0, 3, dtype=torch.int64)
        positions[row, kept.to(positions.device)] = row_positions.to(positions.device)
        deltas.append(int(row_positions.max()) + 1 - len(types) if len(types) else 0)
    leftover = {
        name: len(queues[kind]) for name, kind in (("image", IMAGE), ("video", VIDEO)) if queues[kind]
    }
    if leftover:
        raise ValueError(f"grids left over after the last vision token: {leftover}")
    return positions, torch.tensor(deltas, dtype=torch.int64, device=token_types.device)[:, None]


def _place_vision(row_positions, queue, kind, tokens, current, merge, where) -> int:
    """Consume grids from ``queue`` for a run of ``tokens`` vision tokens; returns where text resumes."""
    name = "image" if kind == IMAGE else "video"
    while tokens > 0:
        if not queue:
            raise ValueError(
                f"{name} tokens at batch row {where[0]}, position {where[1]} have no {name} grid left"
            )
        (t, h, w), interval = queue.pop(0)
        count = t * h * w // merge**2
        if count > tokens:
            raise ValueError(
                f"the {name} at batch row {where[0]}, position {where[1]} has {tokens} tokens, but its grid "
                f"({t}, {h}, {w}) with spatial_merge_size={merge} gives {count}"
            )
        vision, current = _vision_positions(current, (t, h, w), merge, interval, None)
        row_positions.append(vision)
        tokens -= count
    return current


def mrope_decode_positions(
    rope_deltas: torch.Tensor, cache_lengths: int | torch.Tensor, steps: int = 1
) -> torch.Tensor:
    """Positions ``[b, steps, 3]`` of the next ``steps`` text tokens after a prompt of
    :func:`mrope_positions`: token n (counting the unpadded tokens before it) at n + delta on every axis.

    Args:
        rope_deltas: ``[b, 1]`` from :func:`mrope_positions`.
        cache_lengths: tokens already decoded or prefilled per row (an int, or ``[b]`` for rows with
            padding: the unpadded count).
    """
    rope_deltas = torch.as_tensor(rope_deltas)
    if rope_deltas.dim() != 2 or rope_deltas.shape[-1] != 1:
        raise ValueError(f"rope_deltas must be [b, 1], got {tuple(rope_deltas.shape)}")
    steps = check_positive_int("steps", steps)
    lengths = torch.as_tensor(cache_lengths, device=rope_deltas.device).reshape(-1, 1)  # [1 or b, 1]
    text = lengths + torch.arange(steps, device=rope_deltas.device) + rope_deltas  # [b, steps]
    return text[..., None].expand(*text.shape, 3)


__all__ = [
    "IMAGE",
    "TEXT",
    "VIDEO",
    "from_mrope_layout",
    "grid_positions",
    "mrope_decode_positions",
    "mrope_positions",
    "to_mrope_layout",
]
