"""Speculative decoding: what a draft adds to a serving engine's memory, on one rank.

A draft proposes tokens the target model verifies. What it costs, read in vLLM 0.19.0 (the wheel:
vllm/config/speculative.py, v1/spec_decode/eagle.py and draft_model.py, model_executor/models/
llama_eagle.py, llama_eagle3.py, deepseek_mtp.py) and SGLang 0.5.3 (the wheel: srt/speculative/
eagle_worker.py, standalone_worker.py, srt/models/llama_eagle*.py):

- ``ngram`` (vLLM) / ``NGRAM`` (SGLang): proposals come from the prompt itself; no weights, no cache.
- ``eagle`` / ``EAGLE``: an EAGLE head, a few decoder blocks of the draft's config.json plus ``fc``
  (a ReplicatedLinear of 2h x h: not split over TP) and a final norm; the embedding and the
  lm_head are the target's (vLLM ``EagleProposer._maybe_share_embeddings`` / ``_maybe_share_lm_head``
  share them where the checkpoint has none or the same ones; SGLang ``set_embed_and_head``).
- ``eagle3`` / ``EAGLE3``: the same with ``fc`` of 3h x h (three of the target's hidden states),
  the first block's fused qkv reading 2h (embedding and hidden state: llama_eagle3.py
  ``qkv_input_size``), and a lm_head of its own over ``draft_vocab_size`` tokens with the
  ``draft_id_to_target_id`` int64 map of the same length; the embedding is the target's.
- ``mtp`` / ``NEXTN``: the target checkpoint's own multi-token-prediction layers
  (``num_nextn_predict_layers``): per layer one decoder block like the target's, ``eh_proj``
  (nn.Linear 2h x h, not split), and three norms (enorm, hnorm, shared_head.norm); embedding and
  lm_head shared. vramlens takes the target's average block for the MTP block.
- ``draft_model`` / ``STANDALONE``: a whole smaller model with its own embedding and lm_head
  (vLLM draft_model.py: "Draft models don't share embeddings with the target model").

Every draft's attention layers keep a KV cache of their own (cells of the draft's KV heads and head
size, split over the target's TP degree: vLLM's draft_tensor_parallel_size defaults to the target's).
How each engine sizes that cache is in vramlens.serving.vllm and vramlens.serving.sglang.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.serving.common import ServedModel, kv_cell_bytes, stage_weight_bytes
from vramlens.units import DTYPE_BYTES, ceil_div

#: vLLM 0.19 ``SpeculativeConfig.method`` values modelled here (config/speculative.py ``SpeculativeMethod``
#: has more: medusa, mlp_speculator, suffix, ngram_gpu, extract_hidden_states).
VLLM_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "ngram")
#: SGLang 0.5.3 ``--speculative-algorithm`` choices (server_args.py; NEXTN becomes EAGLE in
#: ``_handle_speculative_decoding``).
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE")
#: The draft's kind for each engine's name: which weights it shares with the target.
KINDS = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram",
         "EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "NGRAM": "ngram", "STANDALONE": "draft_model"}
#: Inputs of the EAGLE heads' ``fc``, in hidden sizes (llama_eagle.py ``hidden_size * 2``,
#: llama_eagle3.py ``hidden_size * 3``) and of the MTP layers' ``eh_proj`` (deepseek_mtp.py ``hidden_size * 2``).
FC_INPUTS = {"eagle": 2, "eagle3": 3, "mtp": 2}
#: ``draft_id_to_target_id``: one int64 per draft-vocabulary token (llama_eagle3.py, torch.long).
D2T_BYTES = 8


@dataclass(frozen=True, slots=True)
class Draft:
    """What the draft holds on one rank: its weights, and the attention layers its cache adds.

    ``kv_cell`` is one token in one draft layer at the cache dtype; ``why`` the weights' arithmetic.
    """

    kind: str
    name: str
    weights_bytes: int
    kv_layers: int
    kv_cell: int
    why: str


def draft_for(kind: str, target: ServedModel, draft: ServedModel | None, *, tp: int, kv_b: int,
              fc_split: bool = False) -> Draft:
    """The draft of ``kind`` (a value of KINDS) on one of ``tp`` ranks (see the module docstring).

    ``draft`` is the draft's own inventory (EAGLE heads and draft models); None for ngram and MTP,
    whose MTP layers come from ``target``. ``fc_split``: a hybrid (Qwen3-Next) target's MTP ``fc`` is split
    over TP (vLLM 0.19.0 qwen3_next_mtp.py: ColumnParallelLinear) rather than replicated (SGLang 0.5.2-0.5.4
    models/qwen3_next_mtp.py: nn.Linear).
    """
    b = DTYPE_BYTES[target.dtype]
    h = target.hidden
    if kind == "ngram":
        return Draft(kind, "ngram (prompt lookup)", 0, 0, 0, "ngram: no draft weights, no draft cache")
    if kind == "mtp":
        n = target.mtp_layers
        fc_bytes = FC_INPUTS["mtp"] * h * h * b
        layout = target.hybrid
        if layout is None:
            block = ceil_div(sum(target.layer_bytes), target.n_layers)  # the target's average block
            w = n * (ceil_div(block, tp) + fc_bytes + 3 * h * b)
            return Draft(kind, f"{target.name} MTP layers", w, n, kv_cell_bytes(target, tp, kv_b),
                         f"{n} MTP layer(s) x (the target's average block {block:,} B / {tp} + eh_proj 2h x h "
                         f"{2 * h * h * b:,} B + 3 norms {3 * h * b:,} B) = {w:,} B; embedding and lm_head shared")
        # A hybrid (Qwen3-Next) target. vLLM 0.19.0 qwen3_next_mtp.py Qwen3NextMultiTokenPredictor: per MTP layer a
        # Qwen3NextDecoderLayer of layer_type "full_attention" (the target's attention blocks' average here), fc a
        # ColumnParallelLinear of 2h x h (split over TP, gather_output), norm, pre_fc_norm_hidden,
        # pre_fc_norm_embedding; the embedding and lm_head are the target's (Qwen3NextMTP.load_weights skips them;
        # EagleProposer shares them). SGLang 0.5.2-0.5.4 Qwen3NextForCausalLMMTP: a one-layer Qwen3NextModel with
        # full_attention_interval 1, fc an nn.Linear 2h x h (every rank), the same three norms; set_embed_and_head
        # shares the target's
        attn = [i for i in range(min(len(layout.kinds), len(target.layer_bytes))) if layout.has_kv(i)]
        block = (ceil_div(sum(target.layer_bytes[i] for i in attn), len(attn)) if attn
                 else ceil_div(sum(target.layer_bytes), target.n_layers))
        w = n * (ceil_div(block, tp) + ceil_div(fc_bytes, tp if fc_split else 1) + 3 * h * b)
        return Draft(kind, f"{target.name} MTP layers", w, n, kv_cell_bytes(target, tp, kv_b),
                     f"{n} MTP layer(s) x (the target's average full-attention block {block:,} B / {tp} + fc 2h x h "
                     f"{fc_bytes:,} B" + (f" / {tp}" if fc_split else " (every rank)")
                     + f" + 3 norms {3 * h * b:,} B) = {w:,} B; embedding and lm_head shared (qwen3_next_mtp.py)")
    assert draft is not None
    cell = kv_cell_bytes(draft, tp, kv_b)
    db = DTYPE_BYTES[draft.dtype]
    if kind == "draft_model":
        w = stage_weight_bytes(draft, tp, 1)
        return Draft(kind, draft.name, w, draft.n_layers, cell,
                     f"draft model {draft.name}: its whole inventory / {tp} = {w:,} B (nothing shared)")
    dh = draft.hidden
    blocks = sum(draft.layer_bytes)
    fc = FC_INPUTS[kind] * dh * dh * db
    norm = dh * db
    if kind == "eagle":
        w = ceil_div(blocks, tp) + fc + norm
        return Draft(kind, draft.name, w, draft.n_layers, cell,
                     f"EAGLE head {draft.name}: {draft.n_layers} block(s) {blocks:,} B / {tp} + fc 2h x h {fc:,} B "
                     f"(replicated) + norm {norm:,} B = {w:,} B; embedding and lm_head shared with the target")
    # eagle3: the first block's qkv reads 2h; a lm_head over draft_vocab_size and its int64 map
    qkv_extra = (draft.n_heads + 2 * draft.n_kv_heads) * draft.head_dim * dh * db
    vocab = draft.draft_vocab or draft.vocab
    head = vocab * dh * db
    w = ceil_div(blocks + qkv_extra + head, tp) + fc + norm + vocab * D2T_BYTES
    return Draft(kind, draft.name, w, draft.n_layers, cell,
                 f"EAGLE-3 head {draft.name}: {draft.n_layers} block(s) {blocks:,} B + 2h-wide qkv {qkv_extra:,} B + "
                 f"lm_head {vocab:,} x {dh:,} {head:,} B, / {tp}; + fc 3h x h {fc:,} B + norm {norm:,} B + "
                 f"d2t {vocab * D2T_BYTES:,} B = {w:,} B; embedding shared with the target")


def draft_problems(kind: str, target: ServedModel, draft: ServedModel | None, *, model_flag: str) -> list[str]:
    """What no engine can run: the draft's inventory missing or not fitting the method."""
    p = []
    if kind == "ngram" and draft is not None:
        p.append(f"ngram proposes tokens from the prompt and loads no draft model: drop {model_flag}")
    if kind in ("eagle", "eagle3", "draft_model") and draft is None:
        p.append(f"{kind} needs the draft's config: pass {model_flag} (a catalog name or a config.json path)")
    if kind == "mtp" and not target.mtp_layers:
        p.append(f"{target.name} has no multi-token-prediction layers (config.json num_nextn_predict_layers): "
                 "use eagle, eagle3, draft_model or ngram")
    if kind == "mtp" and draft is not None:
        p.append(f"mtp drafts with {target.name}'s own MTP layers: drop {model_flag}")
    return p
