"""RNoPE (Yang et al. 2025, arXiv 2501.18795): three RoPE layers to one NoPE layer, every layer global,
the ratio of Llama 4's ``no_rope_layers`` (NoPE every fourth layer)."""

from posenc.lab.stacks import register_stack
from posenc.stacks import layer, pattern

register_stack("rnope", pattern("RRRN", R=layer("rope"), N=layer("nope")), "RNoPE", "arXiv 2501.18795")
