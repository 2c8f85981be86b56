"""Scale-out on torch.distributed: DistributedDataParallel per run, or a sweep's runs spread over ranks.

Under ``torchrun --nproc_per_node=N`` the environment names each process's rank. Two modes:

- ``ddp``: every run is trained by all N ranks together; each rank computes the loss of its slice of
  the same global batch and DistributedDataParallel averages the gradients (gloo on CPU, nccl on
  CUDA), so the optimisation is that of one process with the whole batch. Rank 0 evaluates,
  checkpoints and writes the record.
- ``spread``: no process group; rank r trains runs r, r + N, r + 2N, … of the sweep on its own.
  Each run is still one process's work, so its result does not depend on N.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

MODES = ("ddp", "spread")


@dataclass(frozen=True)
class Context:
    """This process's place in the job."""

    rank: int  # global rank
    world_size: int  # processes in the job
    local_rank: int  # rank on this machine (selects the GPU)
    mode: str  # "ddp" or "spread"
    device: torch.device  # where this process computes

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def records(self) -> bool:
        """Whether this process evaluates and records the runs it trains (rank 0 under DDP, every
        rank when runs are spread)."""
        return self.is_main or not self.ddp

    @property
    def ddp(self) -> bool:
        """Whether runs are trained by all ranks together."""
        return self.mode == "ddp" and self.world_size > 1

    def barrier(self) -> None:
        if self.ddp:
            dist.barrier()

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over ranks under DDP; ``value`` itself otherwise."""
        if self.ddp:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def shard(self, batch_size: int) -> slice:
        """The rows of a global batch that this rank trains on."""
        if not self.ddp:
            return slice(0, batch_size)
        if batch_size % self.world_size:
            raise ValueError(f"batch_size={batch_size} must be divisible by the world size {self.world_size}")
        per_rank = batch_size // self.world_size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def runs(self, items: list) -> list:
        """The share of a sweep's runs this rank executes (all of them under DDP or alone)."""
        if self.mode == "spread" and self.world_size > 1:
            return items[self.rank :: self.world_size]
        return items


def resolve_device(device: str) -> str:
    """``"auto"`` -> cuda when available, else cpu; other values are checked."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be one of 'auto', 'cpu', 'cuda'; got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA device")
    return device


def start(mode: str = "spread", device: str = "auto") -> Context:
    """The context of this process, joining the process group when running as DDP under torchrun."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    kind = resolve_device(device)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if kind == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        target = torch.device("cuda", torch.cuda.current_device())
    else:
        target = torch.device("cpu")
    context = Context(rank, world_size, local_rank, mode, target)
    if context.ddp and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if kind == "cuda" else "gloo", timeout=datetime.timedelta(hours=6)
        )
    return context


def stop(context: Context) -> None:
    """Leave the process group (if this process joined one)."""
    if context.ddp and dist.is_initialized():
        dist.destroy_process_group()
