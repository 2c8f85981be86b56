"""Evaluation at lengths L, 2L, 4L, …: each task evaluates itself (``Task.evaluate``); what they share
is here.

A model with a position table (learned) is not run past its table: the length is reported as
``cannot run past L`` before any forward pass (:func:`cannot_run`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from posenc.lab.presets import RunConfig
    from posenc.lab.tasks import Task
    from posenc.model import TransformerLM

#: Tokens per forward pass during evaluation.
EVAL_TOKENS = 16384
#: Seed of the test sets: the same examples for every run, encoding and seed.
TEST_SEED = 20_240_004
CANNOT_RUN = "cannot run past L"


def position_limit(model: TransformerLM) -> int | None:
    """Positions the model can encode (a learned table's size), or None when unbounded."""
    return model.encoding.position_space.limit


def cannot_run(limit: int, positions: int) -> dict:
    """The entry of a length whose ``positions`` exceed the model's table of ``limit``."""
    return {
        "status": CANNOT_RUN,
        "reason": f"needs {positions} positions; the learned table holds {limit} (the training length)",
    }


def evaluate(model: TransformerLM, task: Task, config: RunConfig) -> dict:
    """The task's metrics per evaluation length (its own :meth:`~posenc.lab.tasks.Task.evaluate`)."""
    return task.evaluate(model, config)
