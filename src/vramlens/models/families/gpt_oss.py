"""gpt-oss (openai/gpt-oss-20b, openai/gpt-oss-120b): attention sinks, alternating sliding and full
attention, a biased top-k router and biased experts with a clamped SwiGLU.

Module layouts from ``transformers/models/gpt_oss/modeling_gpt_oss.py`` (transformers 5.24):

- attention (``GptOssAttention``): ``q_proj``/``k_proj``/``v_proj``/``o_proj`` with bias
  ``attention_bias`` (true in both checkpoints) and ``sinks``, a learned (a,) parameter of the
  module itself (``named_parameters`` lists it before the projections). ``eager_attention_forward`` concatenates the sinks to the
  scores (``torch.cat([attn_weights, sinks], dim=-1)``: b x a x s x (S+1)), subtracts the row
  maximum, takes the softmax in the scores' dtype (``dtype=combined_logits.dtype``: no fp32
  upcast) and drops the sink column (``probs[..., :-1]``, a view).
- ``GptOssPreTrainedModel._supports_sdpa = False``: transformers refuses SDPA for gpt-oss and
  picks eager when no implementation is asked for; flash (kernels-community/vllm-flash-attn3)
  and flex are the other choices. vramlens runs ``--attention sdpa`` as eager (ModelSpec.sdpa).
- ``layer_types``: given by config.json, else ``"sliding_attention" if (i + 1) % 2`` (even
  blocks slide, odd blocks are full: configuration_gpt_oss.py ``__post_init__``); the window
  is ``sliding_window`` (128).
- MLP (``GptOssMLP``): ``router`` (``GptOssTopKRouter``: ``weight`` (E, h) and ``bias`` (E,),
  registered first), then ``experts`` (``GptOssExperts``): ``gate_up_proj`` (E, h, 2f),
  ``gate_up_proj_bias`` (E, 2f), ``down_proj`` (E, f, h), ``down_proj_bias`` (E, h): stored
  transposed (in, out; ``@use_experts_implementation(is_transposed=True, has_bias=True)``),
  gate and up interleaved (``gate_up[..., ::2]``, ``gate_up[..., 1::2]``). The router keeps
  top-k of the biased logits and a softmax over those k (in the compute dtype).
- the activation (``GptOssExperts._apply_gate``): ``gate.clamp(max=limit)``,
  ``up.clamp(-limit, limit)``, ``glu = gate * sigmoid(gate * alpha)``, ``(up + 1) * glu``
  (alpha ``swiglu_alpha`` 1.702, limit ``swiglu_limit`` 7.0).
- the rotary embedding (``GptOssRotaryEmbedding``) returns cos/sin of head_dim / 2 (``emb = freqs``,
  not doubled) and rotates the two halves (``_apply_rotary_emb``); ``inv_freq`` and
  ``original_inv_freq`` buffers of head_dim / 2.
- the RMSNorm (``GptOssRMSNorm``) multiplies its weight by the fp32 normalized tensor and casts
  after (``(self.weight * hidden_states).to(input_dtype)``, "main diff with Llama").
- ``_keep_in_fp32_modules`` (the norms) applies only to fp16 loads (modeling_utils.py
  ``_get_dtype_plan``: ``dtype == torch.float16``); vramlens counts the norms in the load dtype.

The checkpoints store the experts in MXFP4 (``quantization_config.quant_method: mxfp4``:
``*_blocks`` uint8 and ``*_scales`` e8m0, one per 32 values). transformers keeps MXFP4 only with
a GPU of compute capability >= 7.5, triton >= 3.4 and the ``kernels`` package
(quantizers/quantizer_mxfp4.py ``validate_environment``), and never for training
(``is_trainable`` is False); otherwise it dequantizes to bf16 at load. vramlens estimates
transformers with the dequantized bf16 experts (``assumed`` says so); the serving engines
(vLLM, SGLang) keep MXFP4 (vramlens.serving).
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind, layer_index, leaf_module
from vramlens.models.families._common import (
    Built,
    decoder_head,
    decoder_prefix,
    kv_heads_and_head_dim,
    torch_dtype,
)
from vramlens.models.spec import TensorInfo

MODEL_TYPES = ("gpt_oss",)

MXFP4_NOTE = ("gpt_oss: the MXFP4 experts of the checkpoint counted dequantized to bf16, as transformers loads "
              "them without its MXFP4 kernels (compute capability >= 7.5, triton >= 3.4 and the kernels package; "
              "never for training)")


def build_gpt_oss(r: ConfigReader, architecture: str) -> Built:
    """Inventory and facts of gpt-oss (``GptOssForCausalLM``)."""
    h = r.get_int("hidden_size")
    L = r.get_int("num_hidden_layers")
    a = r.get_int("num_attention_heads")
    V = r.get_int("vocab_size")
    f = r.get_int("intermediate_size")
    n_kv, d = kv_heads_and_head_dim(r, a, h)
    E = r.get_int("num_local_experts")
    top_k = r.get_int("num_experts_per_tok")
    if top_k > E:
        r.problem(f"num_experts_per_tok={top_k} is more than the {E} experts: fix the config")
    if d % 2:
        r.problem(f"head_dim={d} must be even: the rotary embedding rotates two halves")
    bias = r.get_bool("attention_bias")
    tied = r.get_bool("tie_word_embeddings")
    window = r.opt_int("sliding_window")
    max_pos = r.get_int("max_position_embeddings")
    dtype = torch_dtype(r)
    sliding = _sliding(r, L) if window else ()
    r.check()
    q = r.raw.get("quantization_config")
    mxfp4 = isinstance(q, dict) and q.get("quant_method") == "mxfp4"
    if mxfp4:
        r.assume(MXFP4_NOTE)

    head = head_kind(architecture)
    p = decoder_prefix(head, "model.")
    t = Tensors()
    t.embedding(f"{p}embed_tokens", V, h)
    for i in range(L):
        b = f"{p}layers.{i}."
        s = f"{b}self_attn."
        t.add(f"{s}sinks", (a,), "other")  # a parameter of the module itself: listed before its children
        t.linear(f"{s}q_proj", a * d, h, bias)
        t.linear(f"{s}k_proj", n_kv * d, h, bias)
        t.linear(f"{s}v_proj", n_kv * d, h, bias)
        t.linear(f"{s}o_proj", h, a * d, bias)
        m = f"{b}mlp."
        t.linear(f"{m}router", E, h, True, role="router")
        # stored (E, in, out): logical_shape gives the (E, out, in) the estimator reads
        _expert(t, f"{m}experts.gate_up_proj", (E, h, 2 * f), (E, 2 * f, h))
        t.add(f"{m}experts.gate_up_proj_bias", (E, 2 * f), "bias")
        _expert(t, f"{m}experts.down_proj", (E, f, h), (E, h, f))
        t.add(f"{m}experts.down_proj_bias", (E, h), "bias")
        t.norm(f"{b}input_layernorm", h, bias=False)
        t.norm(f"{b}post_attention_layernorm", h, bias=False)
    t.norm(f"{p}norm", h, bias=False)
    t.rotary(f"{p}rotary_emb.", d)
    decoder_head(t, r, head, architecture, h, V, tied)

    facts = dict(
        kind="decoder", hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=d, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation="swiglu_clamped", gated_mlp=True, norm="rmsnorm",
        position="rotary", tied_embeddings=tied, n_experts=E, experts_per_token=top_k, torch_dtype=dtype,
        sliding_window=window, sliding_layer_ids=sliding,
        # eager_attention_forward: softmax(combined_logits, dtype=combined_logits.dtype)
        softmax_fp32=False, attention_sinks=True, sdpa=False,
        # GptOssRMSNorm: ``(self.weight * hidden_states).to(input_dtype)`` on the fp32 normalized tensor
        norm_weight_fp32=True,
        router="topk_softmax", expert_gate="clamped_swiglu",
        # GptOssRotaryEmbedding: cos/sin are head_dim / 2 wide (emb = freqs)
        rotary_dim=d // 2,
        expert_format="mxfp4" if mxfp4 else None, hybrid_swa_pool=True,
    )
    return Built(facts, t.items)


def _expert(t: Tensors, name: str, shape: tuple[int, int, int], logical: tuple[int, int, int]) -> None:
    t.items.append(TensorInfo(name=name, shape=shape, role="expert", module=leaf_module(name),
                              layer=layer_index(name), logical_shape=logical))


def _sliding(r: ConfigReader, L: int) -> tuple[int, ...]:
    """The sliding blocks: config.json's ``layer_types``, else every even block (``(i + 1) % 2``,
    configuration_gpt_oss.py ``__post_init__``)."""
    types = r.raw.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) < L or not all(isinstance(x, str) for x in types):
            r.problem(f"layer_types has {len(types)} entries for num_hidden_layers={L}: give one type per layer")
            return ()
        return tuple(i for i in range(L) if types[i] == "sliding_attention")
    return tuple(i for i in range(L) if (i + 1) % 2)


BUILDERS = {mt: build_gpt_oss for mt in MODEL_TYPES}
