"""The Forgetting Transformer (Lin et al. 2025, arXiv 2503.02130) as the paper trains it: every layer
its own forget gates (h·(d + 1) parameters per layer), no other position information. The single
encoding ``forgetting`` in a lab run shares one gate across the layers."""

from posenc.lab.stacks import register_stack
from posenc.stacks import layer, pattern

register_stack("fox", pattern("F", F=layer("forgetting")), "FoX (gates per layer)", "arXiv 2503.02130")
