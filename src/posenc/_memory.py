"""Whether an error says memory ran out: the sizes asked for are at fault, not the code that asked."""

from __future__ import annotations

#: What torch's allocators say (CPU: "can't allocate memory", CUDA/MPS: "out of memory").
ALLOCATOR_MESSAGES = ("can't allocate memory", "out of memory", "not enough memory")


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says an allocation failed: a MemoryError, or a RuntimeError of torch's allocators
    (``torch.OutOfMemoryError`` is one)."""
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(message in text for message in ALLOCATOR_MESSAGES)
