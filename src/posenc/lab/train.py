"""Training one run, resumable: AdamW with warm-up and cosine decay, checkpoints written atomically.

A checkpoint holds the model, the optimiser, the step, the data generator's and torch's RNG
states, the losses so far and the training time so far, all as tensors and plain Python values so
that it loads with ``torch.load(..., weights_only=True)``. It is written to a temporary file and
moved over the old one with ``os.replace``, so a process killed at any instant leaves either the
previous checkpoint or the new one, never a torn file. Resuming restores every state, so a run
killed and resumed takes the same steps on the same batches as one never interrupted.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from posenc._validation import at_least_float32
from posenc.functional.normalized import CoordinateAugmentation, augment_coordinates
from posenc.functional.randomized import randomized_positions
from posenc.lab import remaps
from posenc.lab.distributed import Context
from posenc.lab.presets import RunConfig
from posenc.lab.stacks import model_arguments, stack_named
from posenc.lab.tasks import Batch, Task
from posenc.model import TransformerLM

#: Offset separating the data generator's seed from the model's (same run seed, independent streams).
DATA_SEED_OFFSET = 1_000_003


@dataclass
class TrainOutcome:
    """A trained model and what its training measured."""

    model: TransformerLM  # the trained model (unwrapped from DDP)
    losses: list[list[float]]  # [[step, global training loss], …] every log_every steps
    train_seconds: float  # time in optimiser steps over all sessions of the run (no checkpoints, no eval)
    steps: int  # optimiser steps taken
    resumed_from: list[int] = field(default_factory=list)  # checkpoint steps this run resumed from
    curve: list[list[float]] = field(default_factory=list)  # [[step, the task's learning point], …]

    @property
    def seconds_per_step(self) -> float:
        return self.train_seconds / max(1, self.steps)


def build_model(config: RunConfig, task: Task) -> TransformerLM:
    """The run's model, initialised from its seed, with the training backend.

    Linear and embedding weights outside the encoding are drawn from N(0, 0.02²) as in GPT-2 (the
    tied token embedding would otherwise start with logits of order √d_model); the encoding keeps
    its own initialisation.
    """
    torch.manual_seed(config.seed)
    model = config.model
    stack = stack_named(config.encoding)  # a stack design named where an encoding is
    if stack is None:
        encoding = {"encoding": config.encoding, "encoding_kwargs": dict(config.encoding_kwargs)}
    else:
        encoding = model_arguments(stack, config.encoding_kwargs, model.n_layers)
    lm = TransformerLM(
        task.vocab_size,
        d_model=model.d_model,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        d_ff=model.d_ff,
        **encoding,
        backend=config.train_backend,
        causal=task.causal,
        random_positions=config.random_positions,
        embedding_scale=model.embedding_scale,
    )
    # every layer's encoding keeps its own initialisation (a stack's later layers hold their own copies)
    encoding_modules = {module for encoding in lm.layer_encodings for module in encoding.modules()}
    encoding_modules |= set(lm.encoding.modules())
    for module in lm.modules():
        if module in encoding_modules or not isinstance(module, nn.Linear | nn.Embedding):
            continue
        nn.init.normal_(module.weight, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    return lm


def set_backend(model: TransformerLM, backend: str) -> None:
    """Switch every attention layer's backend (they compute the same function)."""
    for block in model.blocks:
        block.attention.backend = backend


def learning_rate(step: int, config: RunConfig) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``lr / 10`` at the last step."""
    train = config.train
    if step < train.warmup:
        return train.lr * (step + 1) / train.warmup
    progress = (step - train.warmup) / max(1, train.steps - train.warmup)
    return train.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _randomized(batch: Batch, config: RunConfig) -> torch.Tensor:
    """Randomized positions (Ruoss et al., 2023) for the whole global batch ``[b, s]``, each example at its
    own sorted sample of 0 … R − 1 for its length, drawn from torch's CPU generator: every rank draws the
    same ones and keeps its own rows, so DDP trains on what one process would, and a checkpoint's RNG state
    resumes them."""
    rows, width = batch.inputs.shape
    return randomized_positions(rows, width, config.random_positions, lengths=batch.lengths)  # [b, s]


def _coordinate_augmentation(
    config: RunConfig, positions: torch.Tensor | None
) -> CoordinateAugmentation | None:
    """The run's augmentation of its grid coordinates (DINOv3's shift, jitter and rescale), or None.

    Drawn once per training step from torch's CPU generator (seeded by the run's seed, saved in its
    checkpoints), so every layer, and every rank under DDP, reads the same coordinates in a step, as
    DINOv3 draws once per forward for all its blocks; evaluation reads the grid as it is.

    Raises:
        ValueError: positions that are not coordinates on several axes ``[s, n]``, n ≥ 2.
    """
    if config.coordinate_augmentation is None:
        return None
    if positions is None or positions.dim() != 2 or positions.shape[-1] < 2:
        shape = None if positions is None else tuple(positions.shape)
        raise ValueError(
            f"coordinate augmentation moves coordinates on several axes, [s, n]; {config.label} trains at "
            f"positions of shape {shape}"
        )
    return CoordinateAugmentation(*config.coordinate_augmentation)


def _optimiser(model: nn.Module, config: RunConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.train.weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.train.lr, betas=(0.9, 0.95))


def save_checkpoint(path: Path, state: dict) -> None:
    """``torch.save`` to a temporary file, then an atomic ``os.replace`` over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(state, temporary)
        os.replace(temporary, path)
    except BaseException:  # an interrupt (Ctrl-C) while saving leaves no half-written file behind
        temporary.unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, config_hash: str) -> dict | None:
    """The checkpoint at ``path`` (``weights_only=True``) if it belongs to this run; None if absent."""
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("config_hash") != config_hash:
        raise ValueError(
            f"checkpoint {str(path)!r} belongs to run {state.get('config_hash')}, not {config_hash}"
        )
    return state


def train(
    config: RunConfig,
    task: Task,
    context: Context,
    checkpoint: Path,
    on_step: Callable[[int], None] | None = None,
    initial: dict | None = None,
) -> TrainOutcome:
    """Train the run's model for ``config.train.steps`` steps, resuming from ``checkpoint`` if present.

    ``initial``: a state dict the model starts from instead of its seeded initialisation (a run with
    ``init_from``: a fine-tune, or with 0 steps an evaluation of the trained weights as they are); the
    encoding's own buffers (RoPE's scaled frequencies) are not in it and stay this run's.

    Every rank draws the same global batch from the same generator; under DDP each computes the
    loss of its slice normalised by the global count of scored tokens, so the averaged gradient
    equals that of one process with the whole batch.
    """
    model = build_model(config, task)
    if initial is not None:
        model.load_state_dict(initial)
    remapped = None if config.position_remap is None else remaps.install(model, config.position_remap)
    model = model.to(context.device)
    optimiser = _optimiser(model, config)
    generator = torch.Generator().manual_seed(config.seed + DATA_SEED_OFFSET)
    step, losses, train_seconds, resumed_from, curve = 0, [], 0.0, [], []
    state = load_checkpoint(checkpoint, config.config_hash)
    if state is not None:
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimizer"])
        generator.set_state(state["data_rng"])
        torch.set_rng_state(state["torch_rng"])
        step, losses, train_seconds = state["step"], state["losses"], state["train_seconds"]
        resumed_from = [*state["resumed_from"], step]
        curve = state.get("curve", [])
    # buffers are not broadcast: an encoding's are constants or caches of the positions it has seen (RoPE's
    # angles), which differ in size between ranks that train on different positions
    wrapped = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False) if context.ddp else model
    rows = context.shard(config.train.batch_size)
    positions = task.positions(model.encoding, config.batch_length)  # None: 0 … s − 1
    if positions is not None:
        positions = positions.to(context.device)
    randomized = config.random_positions is not None and positions is None
    augmentation = _coordinate_augmentation(config, positions)
    model.train()
    while step < config.train.steps:
        started = time.perf_counter()
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(step, config)
        batch = task.train_batch(config.train.batch_size, config.batch_length, generator)
        total = batch.mask.sum()  # scored tokens in the global batch
        inputs, targets, mask = (
            t[rows].to(context.device) for t in (batch.inputs, batch.targets, batch.mask)
        )
        step_positions = _randomized(batch, config)[rows].to(context.device) if randomized else positions
        if batch.positions is not None:  # the task's own per-example positions (coupled digits, offsets)
            step_positions = batch.positions[rows].to(context.device)
        if augmentation is not None:  # one draw per step moves every layer's queries and keys alike
            step_positions = augment_coordinates(step_positions, *augmentation.draw(step_positions.shape[-1]))
        if config.position_remap is not None:  # PoSE's ids, or the continuous remap's floats
            drawn = remaps.training_positions(config.position_remap, *batch.inputs.shape)
            if drawn is not None and drawn.is_floating_point():
                remapped.positions = drawn[rows].to(context.device)
            elif drawn is not None:
                step_positions = drawn[rows].to(context.device)
        logits = wrapped(inputs, step_positions)  # [b, s, vocab]
        nll = F.cross_entropy(
            at_least_float32(logits.flatten(0, 1)), targets.flatten(), reduction="none"
        )  # [b·s]
        loss_sum = (nll * mask.flatten()).sum()
        (loss_sum * (context.world_size if context.ddp else 1) / total).backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        step += 1
        if step % config.train.log_every == 0 or step == config.train.steps:
            global_loss = context.all_reduce_sum(loss_sum.detach().to(torch.float64)) / total
            losses.append([step, float(global_loss)])
        train_seconds += time.perf_counter() - started
        every = config.train.curve_every
        if every and step % every == 0 and context.records:  # outside the timed step
            model.eval()
            curve.append([step, task.learning_point(model, config)])
            model.train()
        if on_step is not None:
            on_step(step)
        if step % config.train.checkpoint_every == 0 and step < config.train.steps and context.records:
            save_checkpoint(
                checkpoint,
                {
                    "config_hash": config.config_hash,
                    "step": step,
                    "model": model.state_dict(),
                    "optimizer": optimiser.state_dict(),
                    "data_rng": generator.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "losses": losses,
                    "train_seconds": train_seconds,
                    "resumed_from": resumed_from,
                    "curve": curve,
                },
            )
    if remapped is not None:
        remapped.positions = None  # evaluation reads the ordinary positions
    model.eval()
    return TrainOutcome(model, losses, train_seconds, step, resumed_from, curve)
