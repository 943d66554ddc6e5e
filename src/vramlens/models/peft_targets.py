"""What peft's IA3, LN tuning and VeRA adapt by default, per model type, and the trainable tensors that makes.

A config without ``target_modules`` takes peft's mapping for the model's ``model_type``
(src/peft/utils/constants.py, the same at huggingface/peft d787f51b, which PEFT's MetaMathQA results
ran, and in peft 0.21.2): ``TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING`` with
``TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING``, and
``TRANSFORMERS_MODELS_TO_LNTUNING_TARGET_MODULES_MAPPING``. Only the model types whose blocks vramlens
models that way are listed: LN tuning where the mapping names every norm of the block and the final
norm (Qwen2's names only ``post_attention_layernorm``, left out).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class IA3Targets:
    """peft's IA3 targets: ``scales_output`` multiply the linear's output by an (out_features,) vector
    (``result * ia3_scaling``), ``scales_input`` (the feedforward modules) its input by an (in_features,)
    vector (``x * ia3_scaling`` before the base layer): src/peft/tuners/ia3/layer.py ``Linear.forward``."""

    scales_output: tuple[str, ...]
    scales_input: tuple[str, ...]


IA3_TARGETS: dict[str, IA3Targets] = {
    "llama": IA3Targets(("k_proj", "v_proj"), ("down_proj",)),
    "mistral": IA3Targets(("k_proj", "v_proj"), ("down_proj",)),
    "qwen2": IA3Targets(("q_proj", "v_proj"), ("down_proj",)),
    "qwen3": IA3Targets(("q_proj", "v_proj"), ("down_proj",)),
}

#: The model types prefix tuning is modelled for: peft's get_prompt hands their blocks a DynamicCache of the virtual
#: tokens' keys and values (no TRANSFORMERS_MODELS_TO_PREFIX_TUNING_POSTPROCESS_MAPPING entry, no sliding layers)
PREFIX_TUNING_TYPES = ("llama", "mistral", "qwen2", "qwen3")

#: VeRA's defaults: ``TRANSFORMERS_MODELS_TO_VERA_TARGET_MODULES_MAPPING``, a copy of LoRA's mapping (src/peft/utils/
#: constants.py, the same at d787f51b and in peft 0.21.2), for the model types vramlens models that way
VERA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
}

LN_TUNING_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("input_layernorm", "post_attention_layernorm", "norm"),
    "mistral": ("input_layernorm", "post_attention_layernorm", "norm"),
}


def vera_linears(spec: ModelSpec) -> tuple[tuple[int, int], ...]:
    """(in_features, out_features) of every linear VeRA adapts in ``spec`` under peft's default targets."""
    names = VERA_TARGETS.get(spec.model_type, ())
    return tuple((k, n) for n, k in delta_linears(spec, names)) if names else ()


def peft_vector_numels(spec: ModelSpec, method: str, size: int = 0) -> tuple[int, ...]:
    """Elements of each tensor IA3, LN tuning, prompt tuning or VeRA trains in ``spec`` (empty for the other methods);
    ``size`` is prompt tuning's virtual tokens, VeRA's rank (Workload.vector_size).

    IA3: one ``ia3_l`` per adapted linear, (out, 1) or (1, in) (``IA3Layer.update_layer``). LN tuning: a
    ``deepcopy`` of each targeted norm (``LNTuningLayer.update_layer``), whose parameters train while the
    original stays frozen beside it. Prompt tuning: ``PromptEmbedding``'s (num_virtual_tokens, token_dim)
    embedding, token_dim the model's hidden size (src/peft/tuners/prompt_tuning/model.py). VeRA: per adapted
    linear ``vera_lambda_b`` (out,) and ``vera_lambda_d`` (r,) (src/peft/tuners/vera/layer.py
    ``VeraLayer.update_layer``); the shared vera_A and vera_B are buffers.
    """
    if method == "prompt-tuning":
        return (size * spec.hidden_size,) if size else ()
    if method == "prefix-tuning":
        # PrefixEncoder (src/peft/tuners/prefix_tuning/model.py, prefix_projection False): an nn.Embedding of
        # (num_virtual_tokens, num_layers * 2 * token_dim), token_dim the keys' width: utils/other.py
        # _prepare_prompt_learning_config sets it to head_dim x num_key_value_heads for a model with kv heads
        return (size * spec.n_layers * 2 * spec.n_kv_heads * spec.head_dim,) if size else ()
    if method == "vera":
        return tuple(n for _, out in vera_linears(spec) for n in (out, size))
    if method == "ia3" and (ia3 := IA3_TARGETS.get(spec.model_type)) is not None:
        out: list[int] = []
        for t in spec.tensors:
            if t.role != "linear" or t.layer is None or not t.name.endswith(".weight"):
                continue
            if t.module in ia3.scales_output:
                out.append(t.shape[0])
            elif t.module in ia3.scales_input:
                out.append(t.shape[1])
        return tuple(out)
    if method == "ln-tuning" and (names := LN_TUNING_TARGETS.get(spec.model_type)) is not None:
        return tuple(t.numel for t in spec.tensors if t.role == "norm" and t.module in names and t.is_parameter)
    return ()


def delta_linears(spec: ModelSpec, targets: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """(out_features, in_features) of each block linear whose name is among ``targets`` (peft matches the module's
    name; ``all-linear`` every linear of the blocks, peft's INCLUDE_LINEAR_LAYERS_SHORTHAND leaving the output
    layer out), in the model's order."""
    every = "all-linear" in targets
    return tuple((t.shape[0], t.shape[1]) for t in spec.tensors
                 if t.role == "linear" and t.layer is not None and t.name.endswith(".weight") and len(t.shape) == 2
                 and (every or t.module in targets))


def lokr_factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """peft's LoKr ``factorization`` (src/peft/tuners/lokr/layer.py, the same at huggingface/peft 505e6fd6, which
    PEFT's MetaMathQA LoKr row ran, and in peft 0.21.2): ``(m, n)`` with ``m * n == dimension``, ``m <= n``; m is
    ``factor`` when it divides, else the divisor pair nearest the square root with m at most ``factor``."""
    if factor > 0 and dimension % factor == 0:
        return factor, dimension // factor
    if factor == -1:
        factor = dimension
    m, n = 1, dimension
    length = m + n
    while m < n:
        new_m = m + 1
        while dimension % new_m != 0:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > length or new_m > factor:
            break
        m, n = new_m, new_n
    return (n, m) if m > n else (m, n)


def lokr_shapes(out: int, k: int, rank: int, factor: int) -> tuple[tuple[int, int], tuple[int, int], bool]:
    """LoKr's (a, c) ``lokr_w1`` and (b, d) ``w2`` of an (out, in=k) linear, and whether w2 is built as
    ``lokr_w2_a @ lokr_w2_b`` ((b, r) @ (r, d): when r < max(b, d) / 2) rather than trained whole
    (``LoKrLayer.update_layer``, decompose_both False: w1 always whole)."""
    a, b = lokr_factorization(out, factor)
    c, d = lokr_factorization(k, factor)
    return (a, c), (b, d), rank < max(b, d) / 2


def oft_block(in_features: int, block_size: int) -> int:
    """The block size OFT uses on a linear of ``in_features`` inputs for a requested ``block_size`` (r 0):
    ``OFTLayer.update_layer`` moves a size that does not divide in_features (or exceeds it) to the nearer divisor
    (``adjust_oft_parameters``, the lower one on a tie) (src/peft/tuners/oft/layer.py, the same at d787f51b and in
    peft 0.21.2)."""
    if in_features % block_size == 0 and block_size <= in_features:
        return block_size
    if block_size >= in_features:
        return in_features
    higher = block_size
    while higher <= in_features and in_features % higher != 0:
        higher += 1
    lower = block_size
    while lower > 1 and in_features % lower != 0:
        lower -= 1
    return lower if block_size - lower <= higher - block_size else higher


def peft_delta_numels(spec: ModelSpec, method: str, targets: tuple[str, ...], rank: int,
                      factor: int = -1, oft_block_size: int = 32, boft_block_size: int = 4) -> tuple[int, ...]:
    """Elements of each tensor LoHa or LoKr trains in ``spec`` (empty for the other methods).

    LoHa (src/peft/tuners/loha/layer.py ``LoHaLayer.create_adapter_parameters``, the same at huggingface/peft
    d787f51b and in peft 0.21.2): per adapted (out, in) linear ``hada_w1_a`` (out, r), ``hada_w1_b`` (r, in),
    ``hada_w2_a`` (out, r) and ``hada_w2_b`` (r, in). LoKr (``LoKrLayer.create_adapter_parameters``): ``lokr_w1``
    (a, c), and ``lokr_w2_a`` (b, r) with ``lokr_w2_b`` (r, d), or ``lokr_w2`` (b, d) (lokr_shapes). OFT
    (``OFTRotationModule``): one ``weight`` (in // b, b (b - 1) / 2), the upper triangles of its skew-symmetric
    blocks, b from oft_block. BOFT (``BOFTLayer.update_layer``, boft_n_butterfly_factor 1): ``boft_R`` (1, in // b,
    b, b) and ``boft_s`` (out, 1).
    """
    if method == "boft":
        return tuple(n for n_out, k in delta_linears(spec, targets)
                     for n in (k // boft_block_size * boft_block_size ** 2, n_out))
    if method == "oft":
        blocks = [(k, oft_block(k, oft_block_size)) for _, k in delta_linears(spec, targets)]
        return tuple(k // b * (b * (b - 1) // 2) for k, b in blocks)
    if method == "loha":
        return tuple(n for n_out, k in delta_linears(spec, targets)
                     for n in (n_out * rank, rank * k, n_out * rank, rank * k))
    if method == "lokr":
        numels: list[int] = []
        for n_out, k in delta_linears(spec, targets):
            (a, c), (b, d), low_rank = lokr_shapes(n_out, k, rank, factor)
            numels += [a * c, *((b * rank, rank * d) if low_rank else (b * d,))]
        return tuple(numels)
    return ()


def peft_method_problem(spec: ModelSpec, method: str) -> str | None:
    """Why ``method`` (ia3, ln-tuning or prompt-tuning) has no estimate for ``spec``, or None."""
    if method == "prompt-tuning":
        if spec.kind == "decoder" and spec.head == "causal-lm" and spec.vlm is None and spec.audio is None:
            return None
        return (f"method=prompt-tuning is modelled for decoder-only causal LMs (peft's PeftModelForCausalLM); "
                f"{spec.name} is not one: use --method lora")
    if method == "prefix-tuning":
        # get_prompt's DynamicCache path (num_transformer_submodules 1, no post-processing): the model types whose
        # attention vramlens models over a cache prefix
        if spec.model_type in PREFIX_TUNING_TYPES and spec.head == "causal-lm" and spec.vlm is None:
            return None
        return (f"method=prefix-tuning is modelled for {', '.join(PREFIX_TUNING_TYPES)} causal LMs; {spec.name} is "
                f"{spec.model_type!r}: use --method lora")
    if method not in ("ia3", "ln-tuning", "vera"):
        return None
    types = sorted(IA3_TARGETS if method == "ia3" else LN_TUNING_TARGETS if method == "ln-tuning" else VERA_TARGETS)
    if spec.model_type in types and peft_vector_numels(spec, method, 1):
        return None
    return (f"method={method} takes peft's default targets for the model type, modelled for "
            f"{', '.join(types)}; {spec.name} is {spec.model_type!r}: use --method lora")
