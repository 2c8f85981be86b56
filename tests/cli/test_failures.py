"""Which errors mean "the sizes do not fit in memory" (posenc._memory), and the one line posenc._exits gives them."""

from __future__ import annotations

import pytest
import torch

from posenc._exits import BROKEN_PIPE, memory_message
from posenc._memory import out_of_memory


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes."),
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."),
        RuntimeError("MPS backend out of memory (MPS allocated: 1.00 GB)"),
    ],
)
def test_allocation_failures_of_python_and_torch_are_out_of_memory(error):
    assert out_of_memory(error)


@pytest.mark.parametrize(
    "error", [RuntimeError("shape '[2, 3]' is invalid for input of size 5"), ValueError("out of memory")]
)
def test_other_errors_are_not_out_of_memory(error):
    assert not out_of_memory(error)


def test_the_message_is_one_line_naming_the_command_and_the_size_torch_reports():
    cpu = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 2147483648 bytes.")
    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has\nmore text")
    assert memory_message("posenc bench", cpu) == (
        "posenc bench: error: the sizes asked for do not fit in memory (an allocation of 2.0 GiB failed); "
        "ask for smaller ones"
    )
    assert "(an allocation of 20.00 GiB failed)" in memory_message("posenc lab run", cuda)
    assert "\n" not in memory_message("posenc lab run", cuda)
    assert memory_message("posenc verify", MemoryError()) == (
        "posenc verify: error: the sizes asked for do not fit in memory; ask for smaller ones"
    )


def test_a_closed_stdout_is_128_plus_sigpipe_not_verifys_failing_claim():
    assert BROKEN_PIPE == 141 != 1
