"""Causal attention with a term q_i·w_clip(j − i, K) (Shaw et al.'s clipped relative keys) as a band of
2K + 1 diagonals plus flash attention over the far keys, on CPU.

Shaw et al., 2018, https://arxiv.org/abs/1803.02155: every key farther than K before its query reads the
same table row w_0, so its score is scale·q_i·k_j + c·q_i·w_0 = scale·q_i·(k_j + (c / scale)·w_0): the
term folds into the keys, and the far keys (j < i − K) are plain causal attention over shifted keys, one
``is_causal`` call of SDPA's CPU flash kernel (queries K + 1 … s − 1 against keys 0 … s − K − 2). The K + 1
near keys (i − K ≤ j ≤ i) are computed explicitly, a block of queries at a time against the keys of its
band. The two parts are merged by their log-sum-exps (as split attention merges its pieces):
lse = log(e^lse_far + e^lse_band), out = e^(lse_far − lse)·out_far + e^(lse_band − lse)·out_band.

Backward: the flash kernel's backward of the far part with the merged output and log-sum-exp gives that
part's share of the true gradients (its weights are exp(s − lse) with the whole row's lse); the band's
weights are recomputed per block, as in :mod:`posenc.kernels.query_blocked`. The gradient of w_0 is
(c / scale)·Σ of the far keys' gradients; that of the band's rows is the band's dS summed per row.

Notation used for tensor shapes: b batch, h heads, s sequence, d head width, R = 2K + 1 table rows,
n a block's queries.
"""

from __future__ import annotations

import torch

from posenc.kernels.blocked import _flash, _flash_backward

#: Queries per block of the band: each block multiplies its n queries by its n + K band keys, so smaller
#: blocks waste less (n + K against the K + 1 keys each query reads) and pay more calls.
BAND_BLOCK = 64


def clipped_relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    table: torch.Tensor,
    clip: int,
    *,
    scale: float,
    term_scale: float,
) -> torch.Tensor:
    """softmax(scale·q·kᵀ + term_scale·q_i·table[clip(j − i, K) + K] + causal mask)·v, ``[b, h, s, d_v]``.

    q ``[b, h, s, d]``, k and v ``[b, h_kv, s, ·]`` (h_kv divides h) at the same consecutive positions;
    table ``[2K + 1, d]`` (K = ``clip``), row 0 for keys K or more before the query.
    """
    return _Banded.apply(q, k, v, table, clip, scale, term_scale)


def _repeat(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x.repeat_interleave(groups, dim=1) if groups > 1 else x


def _diagonals(dense: torch.Tensor, width: int) -> torch.Tensor:
    """``[b, h, n, width]`` view of ``dense`` ``[b, h, n, n + width − 1]`` (contiguous): entry t of row a is
    dense[a, a + t], the band layout (query a's key i − K + t at t)."""
    b, h, n, m = dense.shape
    return dense.as_strided(
        (b, h, n, width), (dense.stride(0), dense.stride(1), m + 1, 1), dense.storage_offset()
    )


def _padded(x: torch.Tensor, clip: int) -> torch.Tensor:
    """``[b, h, s, ·]`` with K rows of zeros in front ``[b, h, K + s, ·]``: key i − K + t of query i at row i + t."""
    return torch.cat((x.new_zeros(*x.shape[:2], clip, x.shape[-1]), x), dim=2)


def _band_scores(q_rows, k_pad, table, rows: slice, clip: int, scale: float, term_scale: float):
    """The band's scores ``[b, h, n, K + 1]`` of a block of queries (entry t: key i − K + t, table row t),
    −inf for keys before the first; and the block's padded keys ``[b, h, n + K, d]``."""
    k_band = k_pad[:, :, rows.start : rows.stop + clip]  # keys r0 − K … r1 − 1
    dense = torch.matmul(q_rows, k_band.transpose(-1, -2))  # [b, h, n, n + K]
    scores = torch.matmul(q_rows, table[: clip + 1].T).mul_(term_scale)  # q·w_t: [b, h, n, K + 1]
    scores.add_(_diagonals(dense, clip + 1), alpha=scale)
    if rows.start < clip:  # the first queries: keys before position 0 are padding
        query = torch.arange(rows.start, rows.stop, device=q_rows.device)[:, None]
        step = torch.arange(clip + 1, device=q_rows.device)[None, :]
        scores.masked_fill_(step < clip - query, float("-inf"))
    return scores, k_band


def _spread(band: torch.Tensor, clip: int) -> torch.Tensor:
    """The band layout ``[b, h, n, K + 1]`` back in dense form ``[b, h, n, n + K]`` (zeros off the band)."""
    b, h, n, _ = band.shape
    dense = band.new_zeros(b, h, n, n + clip)
    _diagonals(dense, clip + 1).copy_(band)
    return dense


class _Banded(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, clip: int, scale: float, term_scale: float):
        b, h, s, _ = q.shape
        groups = h // k.shape[1]
        wide = torch.promote_types(q.dtype, torch.float32)
        k_rep, v_rep = _repeat(k, groups), _repeat(v, groups)  # [b, h, s, ·]
        lse = torch.full((b, h, s), float("-inf"), dtype=wide, device=q.device)
        out = torch.zeros(b, h, s, v.shape[-1], dtype=wide, device=q.device)
        far = s - clip - 1  # queries clip + 1 … s − 1 see far keys 0 … s − clip − 2
        if far > 0:
            shifted = k_rep[:, :, :far] + table[0].to(q.dtype) * (term_scale / scale)  # [b, h, far, d]
            out_far, lse_far = _flash(
                q[:, :, clip + 1 :], shifted, v_rep[:, :, :far], is_causal=True, scale=scale
            )
            out[:, :, clip + 1 :], lse[:, :, clip + 1 :] = out_far, lse_far
        q_wide, table_wide = q.to(wide), table.to(wide)
        k_pad, v_pad = _padded(k_rep.to(wide), clip), _padded(v_rep.to(wide), clip)  # [b, h, K + s, ·]
        for start in range(0, s, BAND_BLOCK):
            rows = slice(start, min(start + BAND_BLOCK, s))
            scores, _ = _band_scores(q_wide[:, :, rows], k_pad, table_wide, rows, clip, scale, term_scale)
            top = scores.amax(dim=-1, keepdim=True)  # every query sees itself: finite
            weights = scores.sub_(top).exp_()  # [b, h, n, K + 1]
            total = weights.sum(dim=-1)  # [b, h, n]
            lse_band = top.squeeze(-1) + total.log()
            out_band = torch.matmul(_spread(weights, clip), v_pad[:, :, rows.start : rows.stop + clip])
            merged = torch.logaddexp(lse[:, :, rows], lse_band)
            out[:, :, rows] = out[:, :, rows] * (lse[:, :, rows] - merged).exp().unsqueeze(-1) + out_band * (
                (top.squeeze(-1) - merged).exp().unsqueeze(-1)
            )
            lse[:, :, rows] = merged
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, table, out, lse)
        ctx.clip, ctx.scale, ctx.term_scale = clip, scale, term_scale
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, table, out, lse = ctx.saved_tensors
        clip, scale, term_scale = ctx.clip, ctx.scale, ctx.term_scale
        b, h, s, d = q.shape
        h_kv = k.shape[1]
        groups = h // h_kv
        wide = torch.promote_types(q.dtype, torch.float32)
        k_rep, v_rep = _repeat(k, groups), _repeat(v, groups)
        dq = torch.zeros(q.shape, dtype=wide, device=q.device)
        dk = torch.zeros(b, h, clip + s, d, dtype=wide, device=q.device)  # padded as the keys: rows K …
        dv = torch.zeros(b, h, clip + s, v.shape[-1], dtype=wide, device=q.device)
        dtable = torch.zeros(table.shape, dtype=wide, device=q.device)
        grad_out = grad_out.contiguous()
        far = s - clip - 1
        if far > 0:
            shifted = k_rep[:, :, :far] + table[0].to(q.dtype) * (term_scale / scale)
            gq, gk, gv = _flash_backward(
                grad_out[:, :, clip + 1 :],
                q[:, :, clip + 1 :],
                shifted,
                v_rep[:, :, :far],
                out[:, :, clip + 1 :],
                lse[:, :, clip + 1 :],
                0.0,
                True,
                scale=scale,
            )
            dq[:, :, clip + 1 :] += gq
            dk[:, :, clip : clip + far] += gk
            dv[:, :, clip : clip + far] += gv
            dtable[0] += gk.to(wide).sum(dim=(0, 1, 2)) * (term_scale / scale)
        q_wide, table_wide = q.to(wide), table.to(wide)
        k_pad, v_pad = _padded(k_rep.to(wide), clip), _padded(v_rep.to(wide), clip)
        g_wide = grad_out.to(wide)
        rowsum = (g_wide * out.to(wide)).sum(dim=-1, keepdim=True)  # D [b, h, s, 1]
        for start in range(0, s, BAND_BLOCK):
            rows = slice(start, min(start + BAND_BLOCK, s))
            keys = slice(rows.start, rows.stop + clip)  # padded rows of the block's band keys
            q_rows, g_rows = q_wide[:, :, rows], g_wide[:, :, rows]
            scores, k_band = _band_scores(q_rows, k_pad, table_wide, rows, clip, scale, term_scale)
            weights = _spread(scores.sub_(lse[:, :, rows].to(wide).unsqueeze(-1)).exp_(), clip)  # P, dense
            dv[:, :, keys] += torch.matmul(weights.transpose(-1, -2), g_rows)
            ds = torch.matmul(g_rows, v_pad[:, :, keys].transpose(-1, -2))  # dO·vᵀ [b, h, n, n + K]
            ds -= rowsum[:, :, rows]
            ds *= weights  # dS, zero off the band
            dq[:, :, rows] += torch.matmul(ds, k_band).mul_(scale)
            dk[:, :, keys] += torch.matmul(ds.transpose(-1, -2), q_rows).mul_(scale)
            by_row = (
                _diagonals(ds, clip + 1) * term_scale
            )  # the term's gradient per table row t: [b, h, n, K + 1]
            dq[:, :, rows] += torch.matmul(by_row, table_wide[: clip + 1])
            dtable[: clip + 1] += torch.matmul(by_row.transpose(-1, -2), q_rows).sum(dim=(0, 1))
        dk, dv = dk[:, :, clip:], dv[:, :, clip:]
        if groups > 1:
            dk = dk.reshape(b, h_kv, groups, s, d).sum(dim=2)
            dv = dv.reshape(b, h_kv, groups, s, -1).sum(dim=2)
        need = ctx.needs_input_grad
        return (
            dq.to(q.dtype) if need[0] else None,
            dk.to(k.dtype) if need[1] else None,
            dv.to(v.dtype) if need[2] else None,
            dtable.to(table.dtype) if need[3] else None,
            None,
            None,
            None,
        )
