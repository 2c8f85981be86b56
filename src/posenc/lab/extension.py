"""The context-extension study: which RoPE scaling gets a model trained at L to 2L, 4L and 8L.

A RoPE language model is trained at L (an ordinary lab run, its weights kept in the work directory).
For every scaling and every target length f·L it is evaluated twice, each a run of its own that starts
from those weights (``RunConfig.init_from``):

- **zero-shot**: the scaling for factor f put in, no training (0 steps), evaluated at L and f·L;
- **fine-tuned**: the same, then a short fine-tune at f·L (a fraction of the pre-training steps, each of
  as many tokens as a pre-training step; the same budget and learning-rate schedule for every
  scaling), evaluated at L and f·L.

``unscaled`` is the plain RoPE of pre-training: zero-shot it is the model as trained, fine-tuned it is
continued training at the longer length, the baseline every scaling has to beat. The scalings take
factor f and, where they have one, the original length L (Chen et al. 2023's linear interpolation,
NTK-aware scaling, dynamic NTK, Peng et al. 2023's YaRN, Llama 3's, Ding et al. 2024's LongRoPE).
LongRoPE's per-pair factors come from an evolutionary search on the target model; here they rise
geometrically from 1 at the fastest pair to f at the slowest (:func:`longrope_factors`), the monotone
shape of the searched factors, without the search. The serving engines' variants of these
(``deepseek_yarn``, ``ntk_su``, ``ntk_alpha``) and ``proportional`` (which turns part of the pairs and
extends nothing) are not in the default study.

After the scalings come the position remaps of :mod:`posenc.lab.remaps`, on the unscaled RoPE: Self-Extend
and ReRoPE (computed in attention: zero-shot, and fine-tuned at f·L as the scalings), PoSE and
continuous random positions (fine-tuned at L with positions spanning f·L, the same steps of the same
tokens; zero-shot they are the unscaled model).

Encodings trained from scratch at L (ALiBi, T5, FIRE) are ordinary lab runs evaluated at L … 8L.
"""

from __future__ import annotations

from dataclasses import replace

from posenc.lab.presets import (
    NO_OVERRIDES,
    Overrides,
    Preset,
    RunConfig,
    TrainConfig,
    check_encodings,
    run_config,
)
from posenc.lab.remaps import FINE_TUNE_ONLY, REMAPS, REROPE, SELF_EXTEND, self_extend_group

#: The study's name for RoPE as pre-trained (no scaling).
UNSCALED = "unscaled"
#: Scalings that take the original length as ``original_max_position_embeddings``.
_WITH_ORIGINAL = ("dynamic", "yarn", "llama3", "longrope", "deepseek_yarn")


def longrope_factors(factor: int, pairs: int) -> list[float]:
    """Per-pair rescale factors rising geometrically from 1 (fastest pair) to ``factor`` (slowest)."""
    if pairs == 1:
        return [float(factor)]
    return [float(factor) ** (k / (pairs - 1)) for k in range(pairs)]


def scaling_kwargs(scaling: str, factor: int, original: int, d_head: int) -> dict:
    """RoPE's constructor arguments for ``scaling`` extending length ``original`` by ``factor``.

    Raises:
        ValueError: a scaling posenc does not have, or a factor below 2.
    """
    from posenc.functional.rope import SCALINGS

    if scaling not in (UNSCALED, *SCALINGS):
        raise ValueError(f"unknown scaling {scaling!r}; valid: {', '.join((UNSCALED, *SCALINGS))}")
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
        raise ValueError(f"an extension factor must be an integer of at least 2, got {factor!r}")
    if scaling == UNSCALED:
        return {}
    args: dict = {"factor": factor}
    if scaling in _WITH_ORIGINAL:
        args["original_max_position_embeddings"] = original
    if scaling == "longrope":
        args["short_factor"] = [1.0] * (d_head // 2)
        args["long_factor"] = longrope_factors(factor, d_head // 2)
    if scaling == "ntk_alpha":
        args = {"alpha": factor}
    return {"scaling": scaling, "scaling_args": args}


def finetune_budget(pretraining: TrainConfig, factor: int, fraction: float, lr_ratio: float) -> TrainConfig:
    """The fine-tune's budget at ``factor`` × L: ``fraction`` of the steps (at least 1), each of the same
    number of tokens as a pre-training step (a ``factor`` times smaller batch of ``factor`` times longer
    windows), ``lr_ratio`` of the peak learning rate, a tenth of the steps of warm-up, no checkpoint
    before the end."""
    steps = max(1, round(pretraining.steps * fraction))
    return replace(
        pretraining,
        steps=steps,
        batch_size=max(1, pretraining.batch_size // factor),
        lr=pretraining.lr * lr_ratio,
        warmup=max(1, steps // 10),
        checkpoint_every=steps,
        log_every=max(1, steps // 10),
    )


def zero_shot_budget(pretraining: TrainConfig) -> TrainConfig:
    """No training: the weights are evaluated as they are."""
    return replace(pretraining, steps=0, warmup=1, checkpoint_every=1, log_every=1)


def remap_settings(remap: str, factor: int, length: int, window_fraction: float) -> dict:
    """The recorded ``position_remap`` of ``remap`` extending length ``length`` by ``factor``: Self-Extend's
    and ReRoPE's window W = ``window_fraction`` · L, Self-Extend's group the smallest that keeps its
    distances at the target below L (:func:`~posenc.lab.remaps.self_extend_group`); PoSE's and the
    continuous remap's target f·L."""
    target = factor * length
    window = max(1, round(window_fraction * length))
    if remap == SELF_EXTEND:
        return {"name": remap, "window": window, "group": self_extend_group(target, length, window)}
    if remap == REROPE:
        return {"name": remap, "window": window}
    if remap in FINE_TUNE_ONLY:
        return {"name": remap, "target": target}
    raise ValueError(f"unknown position remap {remap!r}; valid: {', '.join(REMAPS)}")


def remapped_runs(base: RunConfig, preset: Preset, factor: int) -> list[RunConfig]:
    """The remaps' runs at ``factor`` × L from ``base``'s weights: Self-Extend and ReRoPE zero-shot and
    fine-tuned at f·L (the scalings' budget); PoSE and continuous positions fine-tuned at L with positions
    spanning f·L, as many steps of as many tokens (their zero-shot model is the unscaled one)."""
    study = preset.extension
    length = base.train_length
    target = factor * length
    at_target = finetune_budget(base.train, factor, study.finetune_fraction, study.finetune_lr_ratio)
    at_length = finetune_budget(base.train, 1, study.finetune_fraction, study.finetune_lr_ratio)
    runs = []
    for remap in study.remaps:
        settings = remap_settings(remap, factor, length, study.remap_window_fraction)
        plans = (
            [(at_length, length)]
            if remap in FINE_TUNE_ONLY
            else [(zero_shot_budget(base.train), None), (at_target, target)]
        )
        for budget, finetune in plans:
            runs.append(
                replace(
                    base,
                    train=budget,
                    eval_lengths=(length, target),
                    sliding_stride=None,
                    init_from=base.config_hash,
                    finetune_length=finetune,
                    position_remap=settings,
                )
            )
    return runs


def extended_runs(base: RunConfig, preset: Preset) -> list[RunConfig]:
    """Every (scaling or remap, factor, zero-shot | fine-tuned) run that starts from ``base``'s weights."""
    study = preset.extension
    length = base.train_length
    d_head = base.model.d_model // base.model.n_heads
    runs = []
    for factor in study.factors:
        target = factor * length
        budgets = (
            (zero_shot_budget(base.train), None),
            (finetune_budget(base.train, factor, study.finetune_fraction, study.finetune_lr_ratio), "target"),
        )
        for scaling in study.scalings:
            kwargs = {**base.encoding_kwargs, **scaling_kwargs(scaling, factor, length, d_head)}
            for budget, finetune in budgets:
                runs.append(
                    replace(
                        base,
                        encoding_kwargs=kwargs,
                        train=budget,
                        eval_lengths=(length, target),
                        sliding_stride=None,
                        init_from=base.config_hash,
                        finetune_length=target if finetune else None,
                    )
                )
        runs += remapped_runs(base, preset, factor)
    return runs


def plan_runs(
    preset: Preset,
    seeds: list[int],
    corpus_sha256: str | None,
    *,
    encodings: list[str] | None = None,
    overrides: Overrides = NO_OVERRIDES,
) -> tuple[list[RunConfig], dict[str, RunConfig]]:
    """The study's runs in the order to run them, and the base runs whose weights others start from.

    The base runs (one per seed) come first, then the encodings from scratch, then the extended runs,
    so that on several ranks the bases are trained before the runs that need them.
    ``encodings`` restricts the from-scratch encodings (the base is always run); of ``overrides``,
    the steps, training length and checkpoint interval apply (the study sets the lengths it evaluates).
    """
    study = preset.extension
    scratch = list(study.from_scratch) if encodings is None else [e for e in encodings if e != study.base]
    check_encodings([study.base, *scratch])
    factors = study.factors

    def one(encoding: str, seed: int) -> RunConfig:
        setup = preset.tasks[study.task]
        length = setup.train_length if overrides.train_length is None else overrides.train_length
        lengths = (length, *(f * length for f in factors))
        chosen = Overrides(
            steps=overrides.steps,
            train_length=overrides.train_length,
            eval_lengths=lengths,
            checkpoint_every=overrides.checkpoint_every,
        )
        return run_config(preset, study.task, encoding, seed, corpus_sha256=corpus_sha256, overrides=chosen)

    bases = [one(study.base, seed) for seed in seeds]
    runs = [*bases, *(one(encoding, seed) for encoding in scratch for seed in seeds)]
    runs += [run for base in bases for run in extended_runs(base, preset)]
    return runs, {base.config_hash: base for base in bases}
