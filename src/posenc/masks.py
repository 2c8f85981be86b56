"""Which keys a query sees: causal, sliding window, chunked and packed documents, as one predicate.

Indices, not positions: query r of i queries is token k_len − i + r of the keys' sequence (queries are
the last of the keys, as after a KV cache), so the same masks hold in training and decoding.

- sliding window ``window`` = W (Mistral, Gemma, GPT-OSS: transformers' ``sliding_window``): query t
  sees key u iff t − W < u ≤ t, the W latest tokens including itself; bidirectional, |t − u| < W.
- chunked attention ``chunk`` = C (Llama 4's ``attention_chunk_size``): query t sees key u iff
  ⌊t / C⌋ = ⌊u / C⌋ (and u ≤ t when causal): each chunk of C tokens attends within itself.

:func:`visible` is the predicate, usable as a flex ``mask_mod`` and on broadcast index grids;
:func:`windowed_sdpa` and :func:`chunked_sdpa` compute unbiased causal attention under these masks
with SDPA calls that skip the hidden blocks (a band of two chunks per block of queries; chunks as
batch rows), with or without learned sinks.

Notation used for tensor shapes: b batch, h heads, s sequence, i / j query / key positions, d width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc.sinks import sink_attention


def check_span(name: str, value: object) -> int | None:
    """None or a positive int (a window or chunk in tokens); a ValueError/TypeError naming the value."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int (tokens) or None, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive number of tokens, got {value}")
    return value


def visible(q_idx, kv_idx, *, causal: bool, window: int | None = None, chunk: int | None = None):
    """Whether query index ``q_idx`` sees key index ``kv_idx`` (broadcasting tensors, or flex's index
    scalars): the conjunction of causality, the window and the chunk."""
    seen = q_idx >= kv_idx if causal else None
    if window is not None:
        near = (q_idx - kv_idx < window) if causal else ((q_idx - kv_idx).abs() < window)
        seen = near if seen is None else seen & near
    if chunk is not None:
        same = q_idx // chunk == kv_idx // chunk
        seen = same if seen is None else seen & same
    return seen


def attention_mask(
    q_len: int,
    k_len: int,
    device,
    *,
    causal: bool,
    window: int | None = None,
    chunk: int | None = None,
    documents: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Which keys each query sees, bool: ``[i, j]``, ``[(b, 1,) i, j]`` with documents, or None (all)."""
    mask = None
    if causal or window is not None or chunk is not None:
        q_idx = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # [i, 1]
        kv_idx = torch.arange(k_len, device=device)[None, :]  # [1, j]
        mask = visible(q_idx, kv_idx, causal=causal, window=window)  # [i, j]
        if chunk is not None and documents is None:
            mask = mask & visible(q_idx, kv_idx, causal=False, chunk=chunk)
    if documents is not None:  # queries and keys are the same tokens
        same = documents[..., :, None] == documents[..., None, :]  # [(b,) i, j]
        if chunk is not None:  # chunks counted from each document's first token, as alone
            local = _within_document(documents)  # [(b,) s]
            same = same & visible(local[..., :, None], local[..., None, :], causal=False, chunk=chunk)
        same = same if same.dim() == 2 else same[:, None]  # [(b, 1,) i, j]
        mask = same if mask is None else mask & same
    return mask


def _within_document(documents: torch.Tensor) -> torch.Tensor:
    """Each token's index within its document, ``[(b,) s]``, for ids packed one document after another."""
    index = torch.arange(documents.shape[-1], device=documents.device).expand_as(documents)
    first = torch.ones_like(documents, dtype=torch.bool)
    first[..., 1:] = documents[..., 1:] != documents[..., :-1]
    starts = torch.where(first, index, torch.zeros_like(index)).cummax(dim=-1).values  # [(b,) s]
    return index - starts


def causal_sdpa(q, k, v, *, scale: float, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of the same tokens, q ``[b, h, s, d]``, k, v ``[b, h_kv, s, d]``: ``is_causal``
    SDPA, with sinks where given (no mask tensor either way)."""
    return _causal(q, k, v, sinks, scale, q.shape[1] != k.shape[1])


def _causal(q, k, v, sinks, scale: float, gqa: bool) -> torch.Tensor:
    """Causal attention of the same tokens (``is_causal``), with sinks where given."""
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    return sink_attention(q, *_expanded(q, k, v), sinks, scale=scale, is_causal=True)


def _expanded(q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    groups = q.shape[1] // k.shape[1]
    if groups == 1:
        return k, v
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [b, h, j, d]


def _padded(x: torch.Tensor, length: int) -> torch.Tensor:
    """x ``[b, h, s, d]`` with zero tokens after it up to ``length``."""
    return x if x.shape[2] == length else F.pad(x, (0, 0, 0, length - x.shape[2]))


def _blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    """x ``[b, h, n·size, d]`` as ``[b·n, h, size, d]``: each block of tokens a batch row."""
    b, h, s, d = x.shape
    n = s // size
    return x.view(b, h, n, size, d).transpose(1, 2).reshape(b * n, h, size, d)


def _unblocks(x: torch.Tensor, b: int) -> torch.Tensor:
    """The inverse of :func:`_blocks`: ``[b·n, h, size, d]`` -> ``[b, h, n·size, d]``."""
    bn, h, size, d = x.shape
    return x.view(b, bn // b, h, size, d).transpose(1, 2).reshape(b, h, bn // b * size, d)


def chunked_sdpa(q, k, v, chunk: int, *, scale: float, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Causal chunked attention of the same tokens, q ``[b, h, s, d]``, k, v ``[b, h_kv, s, d]``: each
    chunk of ``chunk`` tokens one causal SDPA call, all chunks as batch rows of one call."""
    b, _, s, _ = q.shape
    if s <= chunk:
        return _causal(q, k, v, sinks, scale, q.shape[1] != k.shape[1])
    length = -(-s // chunk) * chunk  # padded keys come after every real query: hidden by causality
    q, k, v = (_blocks(_padded(x, length), chunk) for x in (q, k, v))  # [b·n, h, C, d]
    out = _causal(q, k, v, sinks, scale, q.shape[1] != k.shape[1])
    return _unblocks(out, b)[:, :, :s]


def windowed_sdpa(q, k, v, window: int, *, scale: float, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Causal sliding-window attention of the same tokens, q ``[b, h, s, d]``, k, v ``[b, h_kv, s, d]``.

    Blocks of W = ``window`` queries: the first is causal attention within itself; block n ≥ 1 sees
    the keys of blocks n − 1 and n under one band mask ``[W, 2W]`` (query r sees key c iff
    r < c ≤ r + W), all blocks as batch rows of one SDPA call: 2W² scores a block, none of the hidden
    ones beyond the band.
    """
    b, h, s, d = q.shape
    gqa = h != k.shape[1]
    if s <= window:
        return _causal(q, k, v, sinks, scale, gqa)
    length = -(-s // window) * window
    q, k, v = (_padded(x, length) for x in (q, k, v))
    first = _causal(q[:, :, :window], k[:, :, :window], v[:, :, :window], sinks, scale, gqa)  # [b, h, W, d]
    rows = _blocks(q[:, :, window:], window)  # [b·(n − 1), h, W, d]
    keys, values = (
        torch.cat([_blocks(x[:, :, :-window], window), _blocks(x[:, :, window:], window)], dim=2)
        for x in (k, v)
    )  # [b·(n − 1), h_kv, 2W, d]: the previous block's keys, then the block's own
    r = torch.arange(window, device=q.device)[:, None]
    c = torch.arange(2 * window, device=q.device)[None, :]
    band = (c > r) & (c <= r + window)  # [W, 2W]
    if sinks is None and not (rows.requires_grad or keys.requires_grad or values.requires_grad):
        rest = F.scaled_dot_product_attention(rows, keys, values, attn_mask=band, scale=scale, enable_gqa=gqa)
    else:  # for gradients with a mask, SDPA on CPU takes its math backend: the flash kernel's instead
        rest = sink_attention(rows, *_expanded(rows, keys, values), sinks, scale=scale, attn_mask=band)
    return torch.cat([first, _unblocks(rest, b)], dim=2)[:, :, :s]
