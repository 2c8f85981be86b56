"""Exact RoPE for transformers models: swap their rotary embedding for posenc's, same outputs, exact angles.

transformers computes cos/sin of ``position·inv_freq`` as a float32 product, which at position 2^20
is off by up to ~0.06 rad; posenc reduces the angle exactly (:func:`posenc.functional.rope_cos_sin`).
``use_posenc_rope(model)`` keeps everything else, including the scaling read from
``config.rope_parameters``, so a model whose positions stay small gives the same logits within fp32
rounding. transformers itself is only imported when the function is called.

What is replaced, and what is refused
-------------------------------------
A rotary module is replaced only when posenc reproduces what it returns. Each one is checked when
``use_posenc_rope`` is called, before the model is touched: a float32 copy of the module, rebuilt
from its config, and posenc's candidate replacements run on the same probes (a batch whose rows start
at different positions, a decoding step, positions on both sides of the scaling's original length, a
bfloat16 input and ``[3, b, s]`` multi-axis position ids), and every output must agree in structure,
shape and dtype, and in value within float32 rounding. The module's output format and dtype (and for
M-RoPE the section layout) are read from that comparison:

- ``"half"``: ``(cat((c, c)), cat((s, s)))`` ``[b, s, r]``, transformers' usual layout (Llama,
  Mistral, Mixtral, Qwen2/3, Gemma 1–4, Phi, Phi-3, GPT-NeoX and others with partial rotary,
  DeepSeek-V3, GLM, Granite, Falcon, Mamba hybrids, M-RoPE text models, …); OLMo, OLMo 2, FlexOlmo,
  Ernie 4.5 and the vision towers' axial RoPE keep it in float32 whatever the input dtype;
- ``"interleaved"``: each value twice in a row, ``repeat_interleave(2)``, ``[b, s, r]`` (Cohere,
  Cohere2, BLT);
- ``"half_width"``: ``(c, s)`` ``[b, s, r/2]``, each frequency once (GPT-OSS);
- ``"complex"``: ``c + i·s`` as one complex64 tensor ``[b, s, r/2]`` (DeepSeek-V2, Llama 4).

RoPE per layer type (rope_parameters nested per layer type, a forward that takes
``(x, position_ids, layer_type)``: Gemma 3 and 4, OLMo 3, MiMo-V2-Flash, …) gets one replacement per
layer type (:class:`PosencLayerTypeRotaryEmbedding`). Multi-axis M-RoPE (``mrope_section``: Qwen2-VL,
Qwen2.5-VL, Qwen3-VL, Qwen3.5) turns each pair with the coordinate of its section, contiguous or
interleaved; the vision towers' ``axial`` RoPE turns with the patch's row and column.

Refused with a ValueError that names ``config.model_type`` and the reason; the model is unchanged:

- models with no rotary module to replace (GPT-J and CodeGen keep a sin/cos table in each attention
  layer; Kimi-Linear);
- a rope_type posenc does not implement, anywhere in the model;
- a forward that takes other arguments than ``(x, position_ids[, layer_type])``;
- any other output the probes do not reproduce (a layout, frequencies or an attention factor that
  posenc does not compute the same way: an odd rotary width, M-RoPE sections that do not fill it; a
  module whose frequencies or attention_scaling were changed after it was built).

Rotary modules whose forward does not take ``(x, position_ids)`` (``forward(seqlen)``) are left as they
are. The sweep in ``tests/integrations/test_transformers_sweep.py`` builds a tiny model of every causal
LM with RoPE in the installed transformers and checks that each is either refused or gives the same
logits and greedy tokens after the swap.
"""

from posenc.integrations.transformers.patch import use_posenc_rope
from posenc.integrations.transformers.rotary import (
    OUTPUT_FORMATS,
    ROPE_TYPES,
    PosencLayerTypeRotaryEmbedding,
    PosencRotaryEmbedding,
    axial_rope_arguments,
    layer_config,
    mrope_sections,
    posenc_rope_arguments,
    rope_parameters,
)

__all__ = [
    "OUTPUT_FORMATS",
    "ROPE_TYPES",
    "PosencLayerTypeRotaryEmbedding",
    "PosencRotaryEmbedding",
    "axial_rope_arguments",
    "layer_config",
    "mrope_sections",
    "posenc_rope_arguments",
    "rope_parameters",
    "use_posenc_rope",
]
