from vramlens.models.spec import ModelSpec, TensorInfo


def llama_config(**over):
    cfg = dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096, intermediate_size=11008,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
        max_position_embeddings=4096, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
        torch_dtype="float16",
    )
    cfg.update(over)
    return cfg


def flat_spec(n_params: int, n_tensors: int = 75, layers: int = 1) -> ModelSpec:
    """A model whose parameters are n_tensors equal matrices: exact counts for formula checks."""
    per = n_params // n_tensors
    assert per * n_tensors == n_params
    rows = 1000
    tensors = tuple(
        TensorInfo(f"layers.{i % layers}.w{i}.weight", (rows, per // rows), "linear", f"w{i}", i % layers)
        for i in range(n_tensors)
    )
    return ModelSpec(
        name="flat", model_type="llama", architecture="LlamaModel", kind="decoder", hidden_size=4096,
        n_heads=32, n_kv_heads=32, head_dim=128, ffn_size=11008, vocab_size=32000, n_decoder_layers=layers,
        norm="rmsnorm", position="rotary", gated_mlp=True, tensors=tensors,
    )
