"""FoX: the Forgetting Transformer's forget gates, a data-dependent ALiBi read from the tokens' content.

Lin, Nikishin, He and Courville, 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
https://arxiv.org/abs/2503.02130 (ICLR 2025). Per head h and token t, a forget gate
f_t = σ(w_h·x_t + b_h) read from the attention layer's input x_t; the logit of query i and key j ≤ i gains

    D_ij = Σ_{l=j+1}^{i} log f_l        (:func:`posenc.functional.forgetting.forget_bias`)

so a key fades by the gates of the tokens that came after it: ALiBi's −m·(i − j) where every gate is
e^(−m), and a decay each token chooses otherwise. No position is read: shifting every position changes
nothing (``contextual_positions``), and what the bias depends on is the content between key and query.

Notation used for tensor shapes: b batch, s sequence, h heads, i / j query / key positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from posenc._validation import check_float_tensor, check_positive_int
from posenc.encodings.base import PositionalEncoding
from posenc.encodings.capabilities import declare
from posenc.encodings.description import Description
from posenc.functional.forgetting import cumulative_log_gates, forget_bias, forget_bias_block
from posenc.kernels.query_blocked import BlockTerms

PAPER = (
    'Lin, Nikishin, He and Courville, 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate", '
    "https://arxiv.org/abs/2503.02130"
)
#: The gates' initial bias b_h: f ≈ σ(5) ≈ 0.993 per token, a slow decay to start from (x-transformers'
#: ``DataDependentAlibi`` default).
DEFAULT_GATE_BIAS = 5.0


class ForgettingTransformer(PositionalEncoding):
    """FoX's forget gates (Lin et al., 2025, https://arxiv.org/abs/2503.02130) as an attention bias.

    ``content(x)`` reads log f_t = log σ(W·x_t + b) ``[b, s, h]`` from the attention layer's input (after
    its norm, as x-transformers' ``DataDependentAlibi`` reads it); ``content_terms`` gives
    D_ij = Σ_{l=j+1}^{i} log f_l ``[b, h, i, j]`` from the cumulative sums. A KV cache keeps each token's
    log f with its key, so decoding sums the gates of the cached tokens exactly as the full forward does;
    a cache keeping sinks and a window (StreamingLLM) keeps the gates of the tokens it keeps, and the decay
    then runs through those alone, as its positions are places in the cache.
    The gate W ``[h, d_model]``, b ``[h]`` is learned and belongs to one layer: give each layer its own
    (``TransformerLM(share_encoding=False)``).

    FoX is defined for causal attention: ``model_arguments(causal=False)`` is refused. An instance placed
    in bidirectional attention by hand gives keys after the query the decay through the gates between
    them.

    Args:
        d_model: the width of the layer input the gates read.
        n_heads: one gate per head.
        gate_bias: the initial b_h (default :data:`DEFAULT_GATE_BIAS`); W starts as ``nn.Linear``'s.

    Raises:
        TypeError: a non-integer size or a non-number gate bias.
        ValueError: a size below 1.
    """

    kind = "bias"
    capabilities = declare(contextual_positions=True)
    views = frozenset()

    @classmethod
    def model_arguments(cls, *, d_model: int, n_heads: int, max_len: int, causal: bool) -> dict:
        """The model's width and heads.

        Raises:
            ValueError: ``causal=False``: the forget gates decay keys before the query only.
        """
        if not causal:
            raise ValueError(
                f"FoX's forget gates decay the keys before the query, Σ_(l=j+1..i) log f_l for j ≤ i ({PAPER}); "
                "the paper defines no bidirectional form: causal=False is refused"
            )
        return {"d_model": d_model, "n_heads": n_heads}

    def __init__(self, *, d_model: int, n_heads: int, gate_bias: float = DEFAULT_GATE_BIAS) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.n_heads = check_positive_int("n_heads", n_heads)
        if isinstance(gate_bias, bool) or not isinstance(gate_bias, int | float):
            raise TypeError(f"gate_bias must be a number, got {gate_bias!r}")
        self.gate_bias = float(gate_bias)
        self.gate = nn.Linear(self.d_model, self.n_heads)  # x_t -> w_h·x_t + b_h, [b, s, h]
        nn.init.constant_(self.gate.bias, self.gate_bias)

    def content(self, x: torch.Tensor) -> torch.Tensor:
        """log f_t = log σ(w_h·x_t + b_h), ``[b, s, h]``, from the layer input x ``[b, s, d_model]``."""
        x = check_float_tensor("x", x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have d_model={self.d_model} channels, got shape {tuple(x.shape)}")
        return F.logsigmoid(self.gate(x))

    def content_terms(self, q, k, q_content, k_content) -> torch.Tensor:
        """D ``[b, h, i, j]`` = Σ_{l=j+1}^{i} log f_l from the keys' log gates ``[b, j, h]``; the queries
        ``[b, h, i, d]`` are the last i of the keys."""
        return forget_bias(k_content, q.shape[2])

    def block_terms(self, q, k, q_positions, k_positions, *, project=None, content=None) -> BlockTerms | None:
        """D for one block of queries at a time (:class:`posenc.kernels.query_blocked.BlockTerms`): the
        cumulative log gates ``[b, h, j]`` once, with autograd, and c_i − c_j per block, so attention's
        CPU sdpa path holds ``[b, h, block, j]`` at most, never ``[b, h, i, j]``. None without the
        content (the gates are read from it)."""
        if content is None:
            return None
        k_content = content[1]  # [b, j, h]
        offset = k_content.shape[1] - q.shape[2]  # the queries are the last i of the keys
        dtype = torch.promote_types(k_content.dtype, torch.float32)

        def block(q_rows, k_keys, rows, keys, cumulative):
            return forget_bias_block(
                cumulative,
                range(offset + rows.start, offset + rows.stop),
                range(keys.start, keys.stop),
                dtype,
            )

        return BlockTerms(block, (cumulative_log_gates(k_content),))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, gate_bias={self.gate_bias:g}"


DESCRIPTION = Description(
    label="FoX",
    shared_by_layers=False,  # each layer learns its own forget gates (Lin et al. 2025)
    where_it_acts="biases the scores by forget gates read from the content: Σ_(l=j+1..i) log σ(w_h·x_l + b_h)",
    used_by="Forgetting Transformer (FoX)",
    parameter_formula="h·(d + 1) per layer",
    specimen_kwargs={"d_model": 32, "n_heads": 4, "gate_bias": 1.0},
    figures={
        "content-terms": "The forget bias Σ log f_l of a fixed random input, per head: each key fades by "
        "the gates of the tokens after it (untrained gates, bias 1 so that the fading shows within the window).",
        "attention-weights": None,
        "logit-shift": "Every change is exactly 0: the bias is read from the content, never from the positions "
        "given; what moves it is the tokens between key and query, not where they stand.",
    },
)


__all__ = ["DEFAULT_GATE_BIAS", "ForgettingTransformer"]
