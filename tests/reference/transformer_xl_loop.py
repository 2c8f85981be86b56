"""Float64 loop of Transformer-XL's relative attention (Dai et al. 2019, https://arxiv.org/abs/1901.02860, §3.3).

    A_ij = q_i·k_j + q_i·W_{k,R} R_{i−j} + u·k_j + v·W_{k,R} R_{i−j},   scaled by 1/√d_head (the reference
    code's ``attn_score.mul_(self.scale)``),

R_t the sinusoid of "Attention Is All You Need" at t = i − j (query position minus key position):
R_t[2k] = sin(t / base^(2k/d)), R_t[2k+1] = cos(t / base^(2k/d)), with math.sin and math.cos.
"""

from __future__ import annotations

import math

from tests.reference.shaw_loop import _dot, relative_attention_loop


def sinusoid(t: int, d_model: int, base: float = 10000.0) -> list[float]:
    """R_t: sin and cos of t·base^(−2k/d) interleaved, from the formula."""
    code = []
    for k in range(d_model // 2):
        angle = t / base ** (2 * k / d_model)
        code += [math.sin(angle), math.cos(angle)]
    return code


def transformer_xl_attention_loop(
    q, k, v, q_positions, k_positions, r_proj, u, v_bias, *, base=10000.0, causal=False
):
    """Attention output ``[b, h, i, d]`` with Transformer-XL's four terms; W_{k,R} = ``r_proj``
    ``[h·d, d_model]`` (head n's rows n·d … n·d + d − 1), u and v ``[h, d]``."""
    d, d_model = q.shape[-1], r_proj.shape[1]
    w, us, vs = r_proj.tolist(), u.tolist(), v_bias.tolist()

    def projected(t: int, head: int) -> list[float]:  # W_{k,R} R_t, head's slice
        code = sinusoid(t, d_model, base)
        return [_dot(w[head * d + c], code) for c in range(d)]

    def logit(q_vec, k_vec, q_pos, k_pos, head):
        r = projected(q_pos - k_pos, head)
        return (_dot(q_vec, r) + _dot(us[head], k_vec) + _dot(vs[head], r)) / math.sqrt(d)

    return relative_attention_loop(q, k, v, q_positions, k_positions, logit=logit, causal=causal)
