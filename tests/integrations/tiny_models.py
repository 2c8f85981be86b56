"""Tiny random transformers causal LMs for every installed model type that uses RoPE, and the check
that posenc's rotary embedding leaves each one's answers unchanged (or is refused at patch time).

A tiny config is derived from the config class's own defaults by shrinking every size (layers, width,
heads, experts, vocabulary) and the per-layer lists that follow the layer count; models whose config
cannot be shrunk this way are reported with the reason rather than dropped.
"""

from __future__ import annotations

import dataclasses

import torch

#: Model types that are not in transformers' causal-LM mapping but are swept anyway (M-RoPE models).
EXTRA_MODEL_TYPES = {
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
}

VOCAB = 128
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
FFN = 64
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
INIT_RANGE = 0.1  # sharper attention than the usual 0.02, so that positions move the logits
MAX_PARAMETERS = 20_000_000  # a tiny model has well under 1M; anything near this missed a size
N_SPECIAL = 12  # token ids vocab-1 … vocab-12 hold the config's special tokens; inputs avoid them

# exact key -> tiny value; the keys every family spells the same way
SIZES = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "d_model": HIDDEN,
    "n_embd": HIDDEN,
    "n_inner": FFN,
    "num_attention_heads": HEADS,
    "n_heads": HEADS,
    "n_head": HEADS,
    "num_key_value_heads": KV_HEADS,
    "num_kv_heads": KV_HEADS,
    "kv_channels": HEAD_DIM,
    "head_dim": HEAD_DIM,
    "attention_head_dim": HEAD_DIM,
    "intermediate_size": FFN,
    "ffn_dim": FFN,
    "ffn_hidden_size": FFN,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "shared_experts_intermediate_size": 32,
    "expert_ffn_hidden_size": 32,
    "dense_intermediate_size": FFN,
    "intermediate_size_mlp": FFN,
    "num_experts": EXPERTS,
    "n_routed_experts": EXPERTS,
    "num_local_experts": EXPERTS,
    "moe_num_experts": EXPERTS,
    "num_experts_per_tok": EXPERTS_PER_TOKEN,
    "num_experts_per_token": EXPERTS_PER_TOKEN,
    "moe_topk": EXPERTS_PER_TOKEN,
    "moe_k": EXPERTS_PER_TOKEN,
    "n_group": 1,
    "topk_group": 1,
    "num_expert_group": 1,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "qk_head_dim": 16,
    "v_head_dim": 16,
    "index_head_dim": 16,
    "index_n_heads": 2,
    "index_topk": 8,
    "o_lora_rank": 32,
    "zero_expert_num": 2,
    "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": 8,
    "encoder_hash_byte_group_vocab": VOCAB,
    "hidden_size_global": HIDDEN,
    "embed_dim": 32,  # vision towers
    "num_heads": 2,
    "mlp_dim": FFN,
    "n_shared_experts": 1,
    # state-space and linear-attention layers of hybrids: heads × head width = 2 × HIDDEN
    "mamba_d_state": 16,
    "mamba_chunk_size": 16,
    "chunk_size": 16,
    "mamba_n_heads": 8,
    "n_mamba_heads": 8,
    "mamba_d_head": 16,
    "mamba_headdim": 16,
    "mamba_d_ssm": HIDDEN,
    "linear_num_heads": 4,
    "linear_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "num_kv_shared_layers": 0,  # Gemma 3n: KV sharing needs more layers than a tiny model has
}

#: Per model type: keys its defaults leave out (left to the checkpoint) that its modelling code reads.
SPECIAL = {
    # DbrxAttention reads attn_config.rope_theta and clamps with attn_config.clip_qkv (default None)
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "bamba": {"attn_layer_indices": [1]},  # the default has no attention layer
    "granitemoehybrid": {"layer_types": ["mamba", "attention"], "position_embedding_type": "rope"},
    "zamba2": {"use_mem_rope": True},  # RoPE in the shared attention blocks (off by default)
    "recurrent_gemma": {"num_hidden_layers": 3},  # block_types repeats (recurrent, recurrent, attention)
    "blt": {"use_cache": False},  # BltModel builds its DynamicCache from a config without layer count
    "cohere_compass_text": {  # interleaved M-RoPE: axes h and w take every third pair below 3·2
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 2, 2]}
        }
    },
    # partial_rotary_factor 0.334 of head_dim 192 rotates 64 channels; of the tiny 16, an odd 5
    "mimo_v2_flash": {
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.5},
            "sliding_attention": {"partial_rotary_factor": 0.5},
        }
    },
    # M-RoPE sections that fill the tiny rotary width (the modules' defaults fit the real head widths)
    "qwen3_5_text": {"rope_parameters": {"partial_rotary_factor": 0.75, "mrope_section": [2, 2, 2]}},
    "qwen3_5_moe_text": {"rope_parameters": {"partial_rotary_factor": 0.75, "mrope_section": [2, 2, 2]}},
    "qwen2_vl_text": {"rope_parameters": {"mrope_section": [2, 3, 3]}},  # sums to head_dim / 2
    "qwen2_5_vl_text": {"rope_parameters": {"mrope_section": [2, 3, 3]}},
    # interleaved (t, h, w): axes h and w take every third pair below 3·2, t the rest
    "qwen3_vl_text": {"rope_parameters": {"mrope_section": [4, 2, 2]}},
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": HEAD_DIM,
        "indexer_budget": 8,
        "indexer_compress_ratio": 4,
        "rope_parameters": {"mrope_section": [4, 2, 2]},
    },
}


#: Per model type: parameters a checkpoint learns but random init leaves at a value that hides RoPE.
def _zaya_key_scale(model) -> None:
    # ZayaQKNorm multiplies the keys by a learned per-head scale initialised to 0: every score would be 0
    for name, parameter in model.named_parameters():
        if name.endswith("qk_norm.temp"):
            parameter.data.fill_(1.0)


AFTER_INIT = {"zaya": _zaya_key_scale}

# keys holding the number of layers
LAYER_COUNTS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer", "depth")


class CannotBuild(Exception):
    """No tiny config could be derived for this model type (the message says why)."""


@dataclasses.dataclass
class Case:
    model_type: str
    class_name: str


def causal_lm_model_types() -> dict[str, str]:
    """model type -> class name of every causal LM in transformers' auto mapping, plus EXTRA_MODEL_TYPES
    (names only: nothing is imported)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return {**MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, **EXTRA_MODEL_TYPES}


def rope_case(model_type: str) -> Case | None:
    """The case for this model type, or None when neither its config nor a sub-config has RoPE parameters."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if not _declares_rope(CONFIG_MAPPING[model_type]):
        return None
    return Case(model_type, causal_lm_model_types()[model_type])


def rope_cases() -> list[Case]:
    """Every causal-LM model type whose config (or one of its sub-configs) carries RoPE parameters."""
    cases = [rope_case(model_type) for model_type in causal_lm_model_types()]
    return [case for case in cases if case is not None]


#: Config fields that make a model part of the sweep (RoPE parameters under any of their names).
ROPE_FIELDS = {
    "rope_parameters",
    "rope_theta",
    "rope_scaling",
    "rotary_dim",
    "rotary_pct",
    "partial_rotary_factor",
    "qk_rope_head_dim",
}


def _declares_rope(config_class) -> bool:
    """Whether the config class, its defaults or one of its sub-configs carries RoPE parameters."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    fields = set().union(*(getattr(k, "__annotations__", {}) for k in config_class.__mro__))
    if fields & ROPE_FIELDS:
        return True
    try:
        config = config_class()
    except Exception:  # a default that does not validate: its sub-config classes decide
        config = None
    if config is not None and any(getattr(c, "rope_parameters", None) for c in _configs(config)):
        return True
    subs = [sub for sub in getattr(config_class, "sub_configs", {}).values() if sub.__name__ != "AutoConfig"]
    specs = getattr(config_class, "sub_configs_defaults", {}).values()
    subs += [CONFIG_MAPPING[spec.model_type] for spec in specs if getattr(spec, "model_type", None)]
    return any(_declares_rope(sub) for sub in subs)


def _configs(config) -> list:
    """config and its sub-configs, recursively."""
    found = [config]
    for key in getattr(config, "sub_configs", {}):
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "to_dict"):
            found += _configs(sub)
    return found


def tiny_config(case: Case):
    """A small random-init config of this model type, from its config class's defaults.

    Raises:
        CannotBuild: the defaults do not validate, or the shrunk config does not.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[case.model_type]
    try:
        defaults = config_class()
    except Exception as error:
        raise CannotBuild(
            f"the default {config_class.__name__}() does not validate: {first_line(error)}"
        ) from None
    special = iter(range(VOCAB - 1, VOCAB - 1 - N_SPECIAL, -1))
    hidden_sizes = {c.to_dict().get("hidden_size") for c in _configs(defaults)} - {None}
    overrides = _shrunk(defaults, special, hidden_sizes)
    try:
        return config_class(**overrides)
    except Exception as error:
        raise CannotBuild(
            f"the shrunk {config_class.__name__} does not validate: {first_line(error)}"
        ) from None


def _merged(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merged(merged.get(key) or {}, value) if isinstance(value, dict) else value
    return merged


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"[:300]


def _shrunk(config, special, hidden_sizes: set[int]) -> dict:
    """Constructor keywords that shrink `config` (sub-configs as nested dicts); `hidden_sizes`: the
    default hidden sizes anywhere in the config, which other widths may be required to equal."""
    values = config.to_dict()
    sub_keys = [k for k in getattr(config, "sub_configs", {}) if getattr(config, k, None) is not None]
    overrides = {}
    old_layers = next((values[k] for k in LAYER_COUNTS if isinstance(values.get(k), int)), None)
    keep = _kept_layers(values, old_layers) if old_layers else None
    for key, value in values.items():
        if key in sub_keys:
            sub = getattr(config, key)
            overrides[key] = {**sub.to_dict(), **_shrunk(sub, special, hidden_sizes)}
        elif key in SIZES and value is None:
            overrides[key] = SIZES[key]  # left to the checkpoint by some defaults
        elif isinstance(value, bool) or value is None:
            continue
        elif key in LAYER_COUNTS and isinstance(value, int):
            overrides[key] = len(keep)
        elif key in SIZES and isinstance(value, int):
            overrides[key] = min(value, SIZES[key]) if value > 0 else value
        elif key in SIZES and isinstance(value, list) and all(isinstance(v, int) for v in value):
            layered = _per_layer(value, old_layers, keep) if keep is not None else None
            overrides[key] = [min(v, SIZES[key]) for v in (value if layered is None else layered)]
        elif _follows_hidden_size(key, value, hidden_sizes):
            overrides[key] = HIDDEN  # widths the config requires to equal hidden_size (adapters, projections)
        elif _is_token_id(key) and isinstance(value, int | list):
            overrides[key] = [next(special) for _ in value] if isinstance(value, list) else next(special)
        elif key == "per_layer_config" and value:
            overrides[key] = {}  # per-layer exceptions name layers a tiny model does not have
        elif isinstance(value, list) and keep is not None and old_layers > len(keep):
            layered = _per_layer(value, old_layers, keep)
            if layered is not None:
                overrides[key] = layered
    if values.get("head_dim") is not None and values["head_dim"] == values.get("qk_rope_head_dim"):
        overrides["head_dim"] = SIZES["qk_rope_head_dim"]  # DeepSeek's MLA: head_dim is the RoPE part
    if values.get("num_key_value_heads") is not None and values["num_key_value_heads"] == values.get(
        "num_attention_heads"
    ):
        overrides["num_key_value_heads"] = SIZES["num_attention_heads"]  # multi-head stays multi-head
    if isinstance(values.get("initializer_range"), float):
        overrides["initializer_range"] = INIT_RANGE
    for key, value in SPECIAL.get(values.get("model_type"), {}).items():
        if isinstance(value, dict):
            value = _merged(overrides.get(key) or values.get(key) or {}, value)
        overrides[key] = value
    return overrides


def _follows_hidden_size(key: str, value, hidden_sizes: set[int]) -> bool:
    return (
        isinstance(value, int)
        and value in hidden_sizes
        and ("_dim" in key or key.endswith("_size"))
        and not any(word in key for word in ("position", "window", "vocab", "image", "patch", "chunk"))
    )


def _is_token_id(key: str) -> bool:
    return key.endswith(("token_id", "token_ids", "token_index"))


def _kept_layers(values: dict, old_layers: int) -> list[int]:
    """Layer indices kept: the first LAYERS, plus the first layer of every kind a per-layer list names
    (so a tiny hybrid still has an attention layer, a tiny Llama 4 both a RoPE and a NoPE layer)."""
    keep = set(range(min(LAYERS, old_layers)))
    for value in values.values():
        if isinstance(value, list) and len(value) == old_layers and not _is_index_list(value, old_layers):
            firsts = {}
            for index, item in enumerate(value):
                firsts.setdefault(repr(item), index)
            keep |= set(firsts.values())
    return sorted(keep)[: 2 * LAYERS]


def _is_index_list(value: list, old_layers: int) -> bool:
    return (
        bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < old_layers for v in value)
        and all(a < b for a, b in zip(value, value[1:], strict=False))
    )


def _per_layer(value: list, old_layers: int, keep: list[int]) -> list | None:
    """A per-layer list (one entry per layer) or a list of layer indices, restricted to `keep`."""
    if _is_index_list(value, old_layers):
        return [keep.index(v) for v in value if v in keep]
    if len(value) == old_layers:
        return [value[i] for i in keep]
    return None


def tiny_model(model_type: str):
    """The tiny model of a model type with RoPE (CannotBuild when there is none)."""
    case = rope_case(model_type)
    if case is None:
        raise CannotBuild(f"{model_type} has no RoPE parameters")
    return build(case, tiny_config(case))


def build(case: Case, config):
    """The model, random-init with a fixed seed, in eval mode.

    Raises:
        CannotBuild: the model class cannot be built from the tiny config (the message says why).
    """
    import transformers

    def construct():
        if case.model_type in EXTRA_MODEL_TYPES:
            return getattr(transformers, case.class_name)(config)
        return transformers.AutoModelForCausalLM.from_config(config)

    try:
        with torch.device("meta"):  # count first: a size the shrinking missed must not fill the memory
            size = sum(p.numel() for p in construct().parameters())
        if size > MAX_PARAMETERS:
            raise CannotBuild(f"the shrunk config still has {size:,} parameters (sizes it does not shrink)")
        torch.manual_seed(0)
        model = construct()
        AFTER_INIT.get(case.model_type, lambda model: None)(model)
    except CannotBuild:
        raise
    except Exception as error:
        raise CannotBuild(
            f"{case.class_name} cannot be built from the tiny config: {first_line(error)}"
        ) from None
    return model.eval()


SEQ = 12
PAD = 4  # left padding of the second row
OFFSET = 5  # added to every position of the logits check
STEPS = 20
LOGITS_RTOL = 1e-5


@dataclasses.dataclass
class Answers:
    logits: torch.Tensor  # [b, s, vocab] at the real (unpadded) tokens, others zero
    tokens: torch.Tensor  # [b, STEPS] greedy continuation


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """input ids [2, SEQ] and an attention mask that left-pads the second row by PAD tokens."""
    ids = torch.randint(0, VOCAB - N_SPECIAL, (2, SEQ), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :PAD] = 0
    return ids, mask


@torch.no_grad()
def shifted_logits(model) -> torch.Tensor:
    """float32 logits ``[b, s, vocab]`` of the left-padded batch at positions shifted by OFFSET (zero at
    the padding)."""
    import inspect

    ids, mask = inputs()
    kwargs = {"attention_mask": mask}
    if "position_ids" in inspect.signature(model.forward).parameters:
        kwargs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0) + OFFSET  # [b, s]
    return model(ids, **kwargs).logits.float() * mask[..., None]


@torch.no_grad()
def greedy_tokens(model) -> torch.Tensor:
    """STEPS greedy tokens ``[b, STEPS]`` from the left-padded batch (generate, with its KV cache)."""
    ids, mask = inputs()
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=STEPS,
        min_new_tokens=STEPS,
        do_sample=False,
        pad_token_id=VOCAB - 1,
    )[:, SEQ:]


def answers(model) -> Answers:
    return Answers(shifted_logits(model), greedy_tokens(model))


def logits_difference(before: torch.Tensor, after: torch.Tensor) -> str | None:
    """None when `after` is within LOGITS_RTOL of the scale of `before`, else by how much it is not."""
    scale = before.abs().max()
    error = (after - before).abs().max()
    if not torch.isfinite(after).all() or error > LOGITS_RTOL * scale:
        return f"logits differ by {float(error):.3g} at a logit scale of {float(scale):.3g}"
    return None


def difference(before: Answers, after: Answers) -> str | None:
    """None when the answers agree (logits within LOGITS_RTOL of their scale, same tokens), else how not."""
    logits = logits_difference(before.logits, after.logits)
    if logits is not None:
        return logits
    if not torch.equal(after.tokens, before.tokens):
        agree = float((after.tokens == before.tokens).float().mean())
        return f"greedy tokens differ (agreement {agree:.0%})"
    return None
