"""RNoPE-SWA (Yang et al. 2025, arXiv 2501.18795; Command A): three sliding-window RoPE layers to one
global NoPE layer. The window is 16 tokens, a quarter of the lab's L = 64 (the paper's RoPE layers see a
window well inside the training length): past L only the NoPE layer meets distances it never trained on."""

from posenc.lab.stacks import register_stack
from posenc.stacks import layer, pattern

register_stack(
    "rnope_swa", pattern("RRRN", R=layer("rope", window=16), N=layer("nope")), "RNoPE-SWA", "arXiv 2501.18795"
)
