"""Fast paths for hot functional operations: leaves that import nothing of posenc above them.

Each kernel has the semantics of its ``posenc.functional`` twin, which checks the arguments and picks
the kernel (RoPE: :func:`posenc.functional.apply_rope` and :func:`posenc.functional.apply_rope_qk`,
``backend="native"`` for the C kernel, ``"triton"`` for the Triton one). The entry points here take
checked arguments only.
"""

from posenc.kernels.rope_cpu import apply_rope_native, apply_rope_qk_native, native_available, native_status
from posenc.kernels.rope_triton import apply_rope_qk_triton, apply_rope_triton, triton_available

__all__ = [
    "apply_rope_native",
    "apply_rope_qk_native",
    "apply_rope_qk_triton",
    "apply_rope_triton",
    "native_available",
    "native_status",
    "triton_available",
]
