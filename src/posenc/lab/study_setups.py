"""The settings each study's runs share (model, training, lengths, encodings), which the presets of
:mod:`posenc.lab.presets` put together: Kazemnejad et al.'s algorithmic protocol at CPU and GPU scale,
the grid study's encodings, the addition study and the stacks study.
"""

from __future__ import annotations

from dataclasses import replace

from posenc.lab.setups import ModelConfig, TaskSetup, TrainConfig

#: The five encodings Kazemnejad et al. (2023) compare on their algorithmic tasks; the cpu preset trains
#: these (its budget holds no more at a size where the tasks are learned), the gpu preset every one.
KAZEMNEJAD_ENCODINGS = ("nope", "t5", "alibi", "rope", "sinusoidal")


#: The grid study's encodings: those of image patches (2-D sin-cos as MAE, a learned table resampled as
#: a ViT's, axial RoPE, RoPE-Mixed, Swin v2's continuous bias), 1-D RoPE on the raster order, and of the
#: 2025 vision encodings DINOv3's RoPE (on the normalised coordinates it declares) and STRING. The other
#: encodings of 2-D coordinates (GoldenGate, LieRE, ComRoPE, Mochi's (t, h, w)) and PoPE and FoPE on the
#: raster index apply too and run when named (--encodings): the preset's 30 minutes on 2 cores hold no
#: more (docs/LAB.md, the grid section).
GRID_ENCODINGS = (
    "sinusoidal_2d",
    "learned",
    "rope_axial",
    "rope_mixed",
    "swin_v2",
    "rope",
    "dinov3",
    "string",
)


def algorithmic_setup(model: ModelConfig, train: TrainConfig, length: int, examples: int) -> TaskSetup:
    return TaskSetup(model, train, length, eval_multipliers=(1, 2, 4), eval_size=examples)


#: The cpu preset's algorithmic setup: Kazemnejad et al.'s protocol at CPU scale (train on 1 … 20
#: symbols, test up to 40), a model and budget at which copy, reverse and sort are learned at L. A peak
#: lr of 3e-3 learns them in the 1800 steps an hour holds; it needs the 400-step warm-up, without which
#: T5 fails to reverse in every seed (docs/LAB.md, "How the cpu preset was sized").
CPU_ALGORITHMIC = TaskSetup(
    ModelConfig(64, 4, 4),
    TrainConfig(1800, 16, 3e-3, 400, checkpoint_every=500),
    20,
    eval_multipliers=(1, 1.25, 1.5, 2),
    eval_size=512,
    encodings=KAZEMNEJAD_ENCODINGS,
)


#: The cpu preset's summation: Kazemnejad et al. train it on 1 … 8 symbols and test to 16 (their Figure 3),
#: not 20; its examples are short (n + 4 tokens), so a larger batch and more steps fit the budget of the
#: others, and the model learns it at L.
CPU_SUMMATION = TaskSetup(
    ModelConfig(64, 4, 4),
    TrainConfig(3000, 64, 1e-3, 100, checkpoint_every=500),
    8,
    eval_multipliers=(1, 1.25, 1.5, 2),
    eval_size=512,
    encodings=KAZEMNEJAD_ENCODINGS,
)


#: The gpu preset's algorithmic setup: the cpu preset's protocol (train on 1 … 20 symbols, test to 40)
#: with a model four times as wide and batches eight times as large, for fewer steps. A model this small
#: leaves one GPU idle between its kernels, so many runs share it (docs/LAB.md: 15 processes on an H200).
GPU_ALGORITHMIC = TaskSetup(
    ModelConfig(256, 4, 8),
    TrainConfig(1000, 128, 1e-3, 100, checkpoint_every=250, log_every=50),
    20,
    eval_multipliers=(1, 1.25, 1.5, 1.75, 2),
    eval_size=2048,
    encodings=KAZEMNEJAD_ENCODINGS,
)
#: The gpu preset's summation: trained on 1 … 8 symbols and tested to 16, as Kazemnejad et al. (trained on
#: 1 … 20, no encoding beat chance, one digit in ten).
GPU_SUMMATION = replace(GPU_ALGORITHMIC, train_length=8)

#: The addition study's layouts written with tokens alone (each read by every encoding), and those whose
#: position ids are the layout (read by the encodings their papers use, learned absolute and RoPE).
ADDITION_TOKEN_LAYOUTS = ("addition", "addition_padded", "addition_hints")
ADDITION_POSITION_LAYOUTS = ("addition_abacus", "addition_coupled")
#: The encodings that read the position-id layouts: Cho et al. and McLeish et al. embed the ids with a
#: learned table; RoPE reads them as relative positions.
ADDITION_POSITION_ENCODINGS = ("learned", "rope")

#: The addition study on CPU: trained on addends of 1 … 8 digits, tested to 16 (2L); exact match at L every
#: 250 steps records when each run learns.
CPU_ADDITION = TaskSetup(
    ModelConfig(64, 2, 4),
    TrainConfig(2000, 32, 1e-3, 100, checkpoint_every=500, curve_every=250),
    8,
    eval_multipliers=(1, 1.5, 2),
    eval_size=512,
    encodings=KAZEMNEJAD_ENCODINGS,
)
#: The addition study on one GPU: addends of 1 … 20 digits, tested to 50 (2.5L; the position-id layouts
#: hold 60 digits), the gpu preset's model and batch.
GPU_ADDITION = TaskSetup(
    ModelConfig(256, 4, 8),
    TrainConfig(10000, 128, 1e-3, 500, checkpoint_every=1000, log_every=100, curve_every=500),
    20,
    eval_multipliers=(1, 1.5, 2, 2.5),
    eval_size=2048,
    encodings=KAZEMNEJAD_ENCODINGS,
)

#: The stacks study: pure RoPE, NoPE and ALiBi, and the stack designs of posenc.lab.stacks, every one in the
#: same 4-layer model (RNoPE's pattern RRRN once).
STACKS = ("rope", "nope", "alibi", "rnope", "rnope_swa", "rnope_temperature", "fox")
