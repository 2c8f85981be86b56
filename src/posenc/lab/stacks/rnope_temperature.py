"""RNoPE with Llama 4's query temperature on its NoPE layer (``attn_temperature_tuning``): f(p) =
log(⌊(p + 1) / floor_scale⌋ + 1) · 0.1 + 1, with floor_scale 64 = the lab's L in place of Llama 4's 8192,
so that the factor is 1 over the training windows but their last position and grows past L as it does
past 8192 tokens in Llama 4."""

from posenc.lab.stacks import register_stack
from posenc.stacks import layer, pattern
from posenc.temperature import Llama4Temperature

register_stack(
    "rnope_temperature",
    pattern("RRRN", R=layer("rope"), N=layer("nope", temperature=Llama4Temperature(floor_scale=64))),
    "RNoPE + Llama 4 temperature",
    "arXiv 2501.18795; Llama 4",
)
