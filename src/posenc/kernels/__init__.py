"""Fast paths for hot functional operations; each has the semantics of its ``posenc.functional`` twin."""

from posenc.kernels.rope_cpu import apply_rope_cpu, apply_rope_qk, native_available

__all__ = ["apply_rope_cpu", "apply_rope_qk", "native_available"]
