"""Attention with a bias of the distance i − j alone, on CPU at SDPA speed, with no s×s bias tensor.

softmax(q·kᵀ·scale + bias(i − j) + mask)·v, where the bias depends only on the distance i − j
between query and key positions (ALiBi's −m·(i − j), T5's bucketed table, any encoding's
``distance_bias``).

How: ``scaled_dot_product_attention``'s CPU flash kernel reads a float ``attn_mask`` row by row
with the mask's own row stride and unit column stride. With the keys in reverse order, a bias of
i − j sits at address ``row + column`` of a 1-d table of the bias per distance, so the mask is an
``as_strided`` view with strides (1, 1) of a ``[h, ~s]`` table: nothing of size s×s is built and
every value is the exact rounding of the bias, as in a materialised mask. Causal attention runs in
query blocks (default 256 rows), each against the keys up to its last query, so the work is that of
causal SDPA plus half a block per row; the table holds −inf for keys after the query.
Where autograd records (training on CPU), the calls run inside one autograd function
(:mod:`posenc.kernels.blocked`), which writes each call's gradients in place and, for a table that
requires grad (T5's, Kerple's), sums the weights' gradient along the diagonals into the table's.

A bias that falls by at least m·δ with the distance δ (ALiBi with slope m) gives far keys a weight
e^(−m·δ) relative to the query's own: :func:`decay_windows` bounds, from the inputs, the distance
beyond which all keys together change the output by less than a tolerance, and each block of such a
head reads only the keys within it. The bound is rigorous (Cauchy–Schwarz on q·k), so large logits
widen the window instead of costing accuracy. ``posenc.functional.alibi_attention`` puts ALiBi's
formula and these windows together.

Query positions are the last ``s_q`` of the ``s_k`` key positions (as after a KV cache), the same
alignment as :class:`posenc.attention.MultiHeadAttention`. Other position layouts (packed
sequences, explicit positions) are not handled here.

Notation used for tensor shapes: b batch, h query heads, h_kv key/value heads, s_q / s_k query /
key length, d head width, n distances.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from posenc._validation import check_positive_int
from posenc.kernels.blocked import Call, Layout, blocked_attention, differentiable

#: Query rows per SDPA call on the causal path: larger blocks waste half a block per row on the
#: masked triangle of the diagonal block, smaller ones pay more calls (128 and 256 tied, 512 was
#: slower, in a development comparison at s = 4096, h = 8, d = 64 on 2 cores).
DEFAULT_BLOCK = 256
#: Largest change to any output value that leaving out keys beyond a head's window may cause.
DEFAULT_WINDOW_TOLERANCE = 1e-7
#: Factor on the norms in :func:`alibi_windows`, far above their rounding error (about d·2^-24 in float32).
_NORM_MARGIN = 1 + 1e-3


def per_distance_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: Callable[[torch.Tensor], torch.Tensor],
    *,
    causal: bool = True,
    scale: float | None = None,
    block: int = DEFAULT_BLOCK,
    windows: Sequence[int | None] | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale + bias(i − j) + causal mask)·v for any bias of the distance; ``[b, h, s_q, d]``.

    Args:
        q: ``[b, h, s_q, d]`` queries at positions ``s_k − s_q … s_k − 1``.
        k, v: ``[b, h_kv, s_k, d]`` keys and values at positions ``0 … s_k − 1``; h_kv divides h.
        bias: distances i − j ``[n]`` (int64) -> the bias of each head ``[h, n]`` (any float dtype;
            rounded once to q's dtype).
        causal: mask keys after each query.
        scale: score scale (default 1/√d).
        block: query rows per SDPA call on the causal path.
        windows: per head, the largest distance whose keys must be read (None: all); causal only.
            Keys further away are left out, so this is exact only where their weight is nil.
    """
    b, h, s_q, s_k, groups = _check_qkv(q, k, v, causal)
    block = check_positive_int("block", block)
    windows = [None] * h if windows is None else list(windows)
    if len(windows) != h:
        raise ValueError(f"windows must give one entry per head ({h}), got {len(windows)}")
    if not causal and any(w is not None for w in windows):
        raise ValueError("windows apply to causal attention only; pass causal=True or windows=None")
    k_rev, v_rev = k.flip(2), v.flip(2)  # [b, h_kv, s_k, d]: key j at row s_k − 1 − j
    if groups > 1:
        k_rev, v_rev = k_rev.repeat_interleave(groups, dim=1), v_rev.repeat_interleave(groups, dim=1)

    rows = min(block, s_q) if causal else s_q
    first = -(rows - 1)  # smallest distance a call sees (the first key row of its last query)
    distances = torch.arange(first, s_k, device=q.device)  # [n]: −(rows − 1) … s_k − 1
    table = bias(distances)  # [h, n]
    if table.shape != (h, distances.numel()):
        raise ValueError(
            f"bias must map {distances.numel()} distances to [h={h}, {distances.numel()}], "
            f"got shape {tuple(table.shape)}"
        )
    converted = table.to(q.dtype)
    table = converted.clone() if converted is table else converted  # never written into: the caller's
    if causal:
        table[:, : rows - 1] = float("-inf")  # keys after the query
    table = table.contiguous()  # [h, n]; entry t holds the bias at distance t + first

    layout = ToeplitzLayout(h, s_q, s_k, rows, causal, _head_groups(windows, s_k))
    if q.device.type == "cpu" and differentiable(q, k_rev, v_rev, table):
        # one autograd node for every call, its gradients written in place (posenc.kernels.blocked)
        return blocked_attention(q, k_rev, v_rev, table, layout, scale)
    out = q.new_empty(b, h, s_q, v.shape[-1])  # [b, h, s_q, d_v]
    for call in layout.calls():
        heads, keys = slice(call.h0, call.h1), slice(call.k0, call.k1)
        out[:, heads, call.r0 : call.r1] = F.scaled_dot_product_attention(
            q[:, heads, call.r0 : call.r1],
            k_rev[:, heads, keys],
            v_rev[:, heads, keys],
            attn_mask=layout.mask(table, call),
            scale=scale,
        )
    return out


class ToeplitzLayout(Layout):
    """The calls of :func:`per_distance_attention` over reversed keys, each mask a strided view of the
    ``[h, n]`` per-distance table (see the module docstring).

    Causal: blocks of ``rows`` queries, each against the keys up to its last query (within a head
    group's window); otherwise one call over every query and key.
    """

    def __init__(self, h: int, s_q: int, s_k: int, rows: int, causal: bool, groups) -> None:
        self.h, self.s_q, self.s_k, self.rows, self.causal, self.groups = h, s_q, s_k, rows, causal, groups

    def calls(self) -> list[Call]:
        if not self.causal:
            return [Call(0, self.h, 0, self.s_q, 0, self.s_k)]
        calls = []
        offset = self.s_k - self.s_q  # position of query row 0
        for h0, h1, window in self.groups:
            for start in range(0, self.s_q, self.rows):
                count = min(self.rows, self.s_q - start)
                end = offset + start + count  # one past the last key any of these queries sees
                first_key = 0 if window is None else max(0, offset + start - window)
                # reversed rows of keys first_key … end − 1
                calls.append(Call(h0, h1, start, start + count, self.s_k - end, self.s_k - first_key))
        return calls

    def mask(self, source: torch.Tensor, call: Call) -> torch.Tensor:
        return _toeplitz(source, call.h0, call.h1 - call.h0, call.r1 - call.r0, call.k1 - call.k0, self.rows)

    def visible(self, call: Call, rows: slice) -> slice:
        if not self.causal:
            return slice(0, call.k1 - call.k0)
        # reversed keys: those after the last of these rows are the call's first ones
        end = self.s_k - self.s_q + call.r0 + rows.stop  # one past the last key these rows see
        return slice(max(0, self.s_k - end - call.k0), call.k1 - call.k0)

    def add_grad(self, grad: torch.Tensor, ds: torch.Tensor, call: Call, rows: slice, keys: slice) -> None:
        # mask[r, c] reads table[r + c + rows − count]: sum ds over each anti-diagonal r + c
        first = rows.start + keys.start + self.rows - (call.r1 - call.r0)
        sums = _antidiagonal_sums(ds.sum(dim=0))  # [h', n + keys − 1]
        grad[call.h0 : call.h1, first : first + sums.shape[-1]] += sums


def decay_windows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slopes: torch.Tensor | Sequence[float],
    *,
    scale: float | None = None,
    tolerance: float = DEFAULT_WINDOW_TOLERANCE,
) -> list[int | None]:
    """Per head, a distance W such that keys further than W from a query change its output by ≤ tolerance,
    for a bias that falls by at least ``slopes[h]``·δ at distance δ (ALiBi's −m·δ).

    For query i the kept keys include its own (bias 0), so with ε the weight of the keys left out
    relative to the kept ones, |output change| ≤ 2·max|v|·ε, and

        ε ≤ Σ_{δ>W} e^(s_ij − s_ii − m·δ) ≤ e^(2R) · e^(−m(W+1)) / (1 − e^(−m)),

    where s = q·k·scale and R = scale·max|q_i|·max|k_j| (Euclidean norms over the head, all
    batch rows) bounds |s_ij|. W is the smallest integer making 2·max|v|·ε ≤ tolerance. A head
    gets None (read every key) for a slope ≤ 0, non-finite inputs, or W ≥ s_k − 1.
    """
    b, h, s_q, s_k, groups = _check_qkv(q, k, v, causal=True)
    m = _check_slopes(slopes, h).tolist()
    tolerance = float(tolerance)
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance}")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    wide = torch.promote_types(q.dtype, torch.float32)
    with torch.no_grad():  # norms in float32 (or wider), then widened far beyond their rounding error
        q_norm = torch.linalg.vector_norm(q.detach(), dim=-1, dtype=wide).amax(dim=(0, 2)).tolist()  # [h]
        k_norm = torch.linalg.vector_norm(k.detach(), dim=-1, dtype=wide).amax(dim=(0, 2)).tolist()  # [h_kv]
        v_max = v.detach().abs().amax(dim=(0, 2, 3)).tolist()  # [h_kv]
    q_norm, k_norm = [x * _NORM_MARGIN for x in q_norm], [x * _NORM_MARGIN for x in k_norm]
    windows: list[int | None] = []
    for head in range(h):
        slope, kv = m[head], head // groups
        reach = 2 * abs(scale) * q_norm[head] * k_norm[kv]  # ≥ s_ij − s_ii
        if not (slope > 0 and math.isfinite(reach) and math.isfinite(v_max[kv])):
            windows.append(None)
            continue
        if v_max[kv] == 0:
            windows.append(0)
            continue
        log_excess = reach + math.log(2 * v_max[kv] / tolerance) - math.log(-math.expm1(-slope))
        window = max(0, math.ceil(log_excess / slope) - 1)
        windows.append(None if window >= s_k - 1 else window)
    return windows


def _toeplitz(table: torch.Tensor, head: int, heads: int, rows: int, cols: int, block: int) -> torch.Tensor:
    """``[1, heads, rows, cols]`` view of ``table`` ``[h, n]`` with mask[r, c] = table[head, r + c + block − rows].

    With keys reversed, column c of a call whose last query sees key row 0 is at distance
    r + c − (rows − 1) from query row r, stored at table index r + c − (rows − 1) + (block − 1).
    """
    start = table.storage_offset() + head * table.stride(0) + (block - rows)
    return table.as_strided((1, heads, rows, cols), (0, table.stride(0), 1, 1), start)


def _antidiagonal_sums(x: torch.Tensor) -> torch.Tensor:
    """``[h, r, c]`` -> ``[h, r + c − 1]``: entry t the sum of x[:, r, c] over r + c = t.

    Each row padded by r zeros and the whole read again with rows one element shorter, so that row r
    moves r places right: the anti-diagonals become columns."""
    h, r, c = x.shape
    padded = F.pad(x, (0, r)).reshape(h, r * (c + r))  # [h, r·(c + r)]
    return padded[:, : r * (c + r - 1)].reshape(h, r, c + r - 1).sum(dim=1)


def _head_groups(windows: list[int | None], s_k: int) -> list[tuple[int, int, int | None]]:
    """Runs of adjacent heads with the same window: (first head, one past the last, window)."""
    groups: list[tuple[int, int, int | None]] = []
    for head, window in enumerate(windows):
        window = None if window is None or window >= s_k - 1 else int(window)
        if groups and groups[-1][2] == window:
            groups[-1] = (groups[-1][0], head + 1, window)
        else:
            groups.append((head, head + 1, window))
    return groups


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[int, ...]:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor [b, heads, s, d], got {getattr(t, 'shape', t)!r}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be floating point, got dtype {t.dtype}")
    b, h, s_q, d = q.shape
    if k.shape[:3] != v.shape[:3] or k.shape[0] != b or k.shape[-1] != d:
        raise ValueError(
            f"k and v must be [b={b}, h_kv, s_k, ·] with k's last dim d={d}, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    h_kv, s_k = k.shape[1], k.shape[2]
    if h % h_kv:
        raise ValueError(f"key/value heads h_kv={h_kv} must divide query heads h={h}")
    if causal and s_q > s_k:
        raise ValueError(f"causal attention needs s_q ≤ s_k (queries are the last keys), got {s_q} > {s_k}")
    if min(s_q, s_k) == 0:
        raise ValueError(f"sequences must not be empty, got s_q={s_q}, s_k={s_k}")
    return b, h, s_q, s_k, h // h_kv


def _check_slopes(slopes: torch.Tensor | Sequence[float], h: int) -> torch.Tensor:
    m = torch.as_tensor(slopes.detach() if isinstance(slopes, torch.Tensor) else slopes)
    if m.dim() != 1 or m.numel() != h or m.dtype.is_complex or m.dtype == torch.bool:
        raise ValueError(f"slopes must be [h={h}] real numbers, got shape {tuple(m.shape)} dtype {m.dtype}")
    m = m.to(torch.float64).cpu()
    if not torch.isfinite(m).all():
        raise ValueError(f"slopes must be finite, got {m.tolist()}")
    return m


#: The names this module had as ``posenc.kernels.alibi_cpu``.
relative_attention = per_distance_attention
alibi_windows = decay_windows
