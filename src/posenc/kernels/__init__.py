"""Fast paths for hot functional operations; each has the semantics of its ``posenc.functional`` twin."""

from posenc.kernels.rope_cpu import apply_rope_cpu, apply_rope_qk, native_available
from posenc.kernels.rope_triton import apply_rope_qk_triton, apply_rope_triton, triton_available

__all__ = [
    "apply_rope_cpu",
    "apply_rope_qk",
    "apply_rope_qk_triton",
    "apply_rope_triton",
    "native_available",
    "triton_available",
]
