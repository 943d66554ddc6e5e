"""The task head and its loss in a training step: what they keep for backward, and the logits.

Everything here reads the head facts a family sets on ModelSpec (``head``, ``num_labels``,
``mlm_transform``, ``classifier``; see :mod:`vramlens.models.heads`), never class names.
Per text column, with t = b*s tokens, h hidden size, c bytes of the compute dtype, n labels:

* ``masked-lm`` with a prediction transform (BERT, RoBERTa): dense output (kept by the
  activation), activation output and the LayerNorm (input, fp32 mean/rstd, output kept by
  the decoder) over every token; under CUDA autocast LayerNorm keeps its fp32 cast of its
  input, and the decoder its half cast of the fp32 output.
* ``sequence-classification``: ``pooler`` (BertPooler: dense on the first token keeps a view
  of the last hidden state, so all of it; tanh output; dropout mask and output kept by the
  classifier), ``dense`` (RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj
  on the first token: two masks, two dropped outputs and the tanh output; the last hidden
  state is not kept), ``score`` (a linear over every token keeps the last hidden state).
* ``token-classification``: dropout over every token (bool mask, dropped output kept by the
  classifier) instead of the last hidden state.
* ``question-answering``: qa_outputs keeps the last hidden state; the start and end logits
  are split and made contiguous, one cross-entropy each.
* ``head_transform`` (ModernBERT): token classification and QA run the prediction head (dense,
  activation, LayerNorm) over every token first; its sequence classifier (``transform``) pools
  (the first token: a view that keeps the last hidden state; or the masked mean: the product
  keeps only the bool mask, the division the int64 count) and runs the head on the b pooled rows.
* ``replaced-token-detection`` (ELECTRA's discriminator): dense and activation over every token,
  one logit per token, ``BCEWithLogitsLoss`` keeping the logits and the fp32 targets.
* ``embedding`` (sentence-transformers, MultipleNegativesRankingLoss): the base model runs
  once per text column (anchor and positive: two forwards of b sequences each, both graphs
  alive until backward); mean pooling keeps the last hidden state and the attention mask
  expanded to (b, s, h) in the compute dtype; the pooled (b, h) vectors are normalized and
  multiplied into the (b, b) similarity matrix, scaled, and fed to cross-entropy.

Classification losses call ``CrossEntropyLoss`` on the logits as they are (BERT and RoBERTa's
heads; transformers/models/bert/modeling_bert.py), so only the causal LM loss upcasts, and the
masked-LM loss of families that use transformers' ``ForMaskedLMLoss`` (``mlm_loss_upcast``).

Under CUDA autocast (fp32 weights, ``--amp``) such a ``cross_entropy`` of half logits keeps two
tensors (:func:`cross_entropy_kept`): CUDA's autocast does not list ``cross_entropy_loss``
(aten/src/ATen/autocast_mode.h), which calls ``log_softmax(x, dim, x.dtype)`` (kept in the
logits' dtype: an explicit dtype is left alone) and ``nll_loss``, which is on CUDA's fp32 list
and keeps its fp32 cast of the log-probabilities. (CPU autocast lists ``cross_entropy_loss``
itself and runs it all in fp32: the H200's events in validation/events/cuda-h200-bert.json.gz
show CUDA's way.)
"""

from __future__ import annotations

from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, round_up
from vramlens.workload import Workload

LM_HEADS = ("causal-lm", "masked-lm", "seq2seq-lm")


def _b(n: int) -> int:
    """Bytes of one tensor as the CUDA caching allocator hands them out (0 stays 0)."""
    return round_up(int(n), BLOCK) if n > 0 else 0


def has_lm_head(spec: ModelSpec) -> bool:
    """Whether the head ends in a vocabulary projection (causal, masked or seq2seq LM)."""
    return spec.head in LM_HEADS


def autocast(w: Workload) -> bool:
    """Whether the forward runs under autocast: fp32 weights with ``--amp`` (half matmul outputs),
    not FSDP2's MixedPrecisionPolicy (Workload.autocast)."""
    return w.autocast


def cross_entropy_kept(w: Workload, upcast: bool = False) -> tuple[int, int]:
    """Bytes per logit that ``cross_entropy`` keeps for backward: (its log_softmax, nll_loss's fp32 copy).

    ``upcast``: the loss calls ``logits.float()`` first (causal LMs), so log_softmax is fp32 and
    nothing is cast. Otherwise log_softmax keeps the logits' dtype (c), and under CUDA autocast
    ``nll_loss`` keeps an fp32 copy of it (see the module docstring).
    """
    if upcast:
        return 4, 0
    c = DTYPE_BYTES[w.compute_dtype]
    return c, (4 if autocast(w) and c != 4 else 0)


def cross_entropy_backward(w: Workload, kept: int, cast: int) -> int:
    """The backward transient of ``cross_entropy`` over ``kept`` bytes of log_softmax (plus ``cast``
    bytes of nll_loss's fp32 copy): nll_loss's gradient, then its cast back to the logits' dtype
    (under autocast) or log_softmax's gradient beside it."""
    if cast:
        return cast + kept  # nll_loss_backward's fp32 gradient, then ToCopyBackward's half copy of it
    return 2 * kept


def loss_upcasts(spec: ModelSpec) -> bool:
    """Whether the loss calls ``logits.float()`` first: causal LMs do (transformers/loss/loss_utils.py
    ``ForCausalLMLoss``); the masked-LM, T5 and classification heads call ``cross_entropy`` as they are."""
    return spec.head == "causal-lm" or (spec.head == "masked-lm" and spec.mlm_loss_upcast)


def columns(spec: ModelSpec, w: Workload) -> int:
    """Forward passes of the base model per step: 2 for embedding training (anchor and positive columns)."""
    return 2 if spec.head == "embedding" and w.training else 1


def classifier_dropout(spec: ModelSpec) -> float:
    """The dropout in front of the classifier: the family's (``ModelSpec.head_dropout``), else the config's
    ``classifier_dropout``, else ``hidden_dropout_prob`` (BERT, RoBERTa)."""
    if spec.head_dropout is not None:
        return spec.head_dropout
    cfg = spec.config or {}
    for key in ("classifier_dropout", "hidden_dropout_prob"):
        if cfg.get(key) is not None:
            return float(cfg[key])
    return 0.0


def keeps_last_hidden(spec: ModelSpec) -> bool:
    """Whether the head keeps the last hidden state (b, s, h) for backward.

    A linear or product reading it does; a dropout in front of the head keeps only its mask
    (token classification, RoBERTa's classification head), unless its probability is 0.
    """
    if spec.head_transform and spec.head in ("token-classification", "question-answering"):
        return True  # the prediction head's dense keeps it
    if spec.head == "sequence-classification" and spec.classifier == "transform":
        return spec.pooling == "cls"  # the first token's view; the masked mean keeps only the mask
    if spec.head in ("token-classification", "question-answering") or (
            spec.head == "sequence-classification" and spec.classifier == "dense"):
        # BERT's QA head has no dropout (head_dropout 0), DistilBERT's has qa_dropout
        return classifier_dropout(spec) == 0
    return True


def head_keeps_input(spec: ModelSpec, w: Workload) -> bool:
    """Whether the head's first op keeps the last hidden state for backward (see keeps_last_hidden).

    Under LoRA an encoder's task head is frozen (peft adapts the blocks' linears it targets), and
    a frozen linear keeps no input: its backward needs only its weight.
    """
    if not keeps_last_hidden(spec):
        return False
    if spec.head == "causal-lm" and spec.kind == "decoder":
        # a frozen output layer keeps no input (autograd saves mm's self only when the weight needs a gradient)
        return w.method == "full" or "lm_head" in w.lora_adapted
    return w.method == "full" or spec.kind != "encoder" or spec.head == "embedding"


def pooled_classifier(spec: ModelSpec) -> bool:
    """One label per sequence or image: sequence classification, and ViT's image classification
    (``classifier`` on ``sequence_output[:, 0, :]``, a view of the final norm's output that the linear
    keeps: modeling_vit.py:544-546; no dropout, CrossEntropyLoss on the (b, num_labels) logits)."""
    return spec.head in ("sequence-classification", "image-classification")


def label_bytes(spec: ModelSpec, b: int, s: int) -> int:
    """The int64 targets fed to the loss with the input ids: one per token for LM and token
    classification heads, one per sequence for a classifier, a start and an end per sequence
    for QA; the embedding case feeds each column's attention mask (b, s) instead."""
    if pooled_classifier(spec):
        return _b(8 * b)
    if spec.head == "question-answering":
        return 2 * _b(8 * b)
    return _b(8 * b * s)


def head_level_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """Bytes the head keeps for backward in one column, beyond the last hidden state (see the module docstring)."""
    t = b * s
    h = spec.hidden_size
    c = DTYPE_BYTES[w.compute_dtype]
    dropped = classifier_dropout(spec) > 0
    if spec.head in LM_HEADS and spec.mlm_transform:
        # dense output (kept by the activation); the activation's output (kept by LayerNorm), or
        # under CUDA autocast LayerNorm's fp32 cast of it (layer_norm is on CUDA's fp32 list,
        # aten/src/ATen/autocast_mode.h); fp32 mean and rstd (CUDA's acc type, b*s each); the
        # LayerNorm output kept by the decoder (under autocast the decoder's half cast of it)
        ln_in = 4 if autocast(w) else c
        m = spec.mlm_width or h  # ELECTRA's generator head and DeBERTa's legacy head work at embedding_size
        if w.method != "full":
            # frozen dense and decoder keep nothing: the dense output (kept by the activation), the
            # activation's output (the LayerNorm's input) and its fp32 mean and rstd
            return _b(c * m * t) + _b(ln_in * m * t) + 2 * _b(4 * t)
        return _b(c * m * t) + _b(ln_in * m * t) + 2 * _b(4 * t) + _b(c * m * t)
    if spec.head == "replaced-token-detection":
        # discriminator_predictions: the dense output (kept by the activation), the activation's
        # output (kept by dense_prediction when it trains)
        return (2 if w.method == "full" else 1) * _b(c * h * t)
    if spec.head_transform and spec.head in ("token-classification", "question-answering"):
        # ModernBertPredictionHead over every token: dense output (kept by the activation), its
        # output (the LayerNorm's input; under CUDA autocast LayerNorm's fp32 cast of it), fp32 mean
        # and rstd, the LayerNorm's output (the classifier's input; under autocast its half cast)
        ln_in = 4 if autocast(w) else c
        head = 2 * _b(c * h * t) + _b(ln_in * h * t) + 2 * _b(4 * t)
        if dropped:  # the classifier keeps the dropped output and dropout its bool mask
            head += _b(t * h)
        return head
    if spec.head == "sequence-classification" and spec.classifier == "transform":
        ln_in = 4 if autocast(w) else c  # as above, on the pooled rows
        head = 2 * _b(c * b * h) + _b(ln_in * b * h) + 2 * _b(4 * b) + (_b(b * h) if dropped else 0)
        if spec.pooling == "mean":
            # the product keeps the (b, s, 1) bool mask, the division its int64 count; dense keeps the pooled rows
            head += _b(b * s) + _b(8 * b) + _b(c * b * h)
        return head
    if spec.head == "sequence-classification" and spec.classifier == "pooler":
        return _b(c * b * h) + ((_b(b * h) + _b(c * b * h)) if dropped else 0)
    if spec.head == "sequence-classification" and spec.classifier == "dense":
        return _b(c * b * h) + (2 * (_b(b * h) + _b(c * b * h)) if dropped else 0)
    if spec.head in ("token-classification", "question-answering") and dropped:
        return _b(t * h) + _b(c * t * h)
    if spec.head == "embedding" and w.training:
        # the expanded mask in the compute dtype (kept by the product); the masked sum and the
        # clamped count (kept by the division); the pooled vector (torch.cat's copy)
        return _b(c * t * h) + 3 * _b(c * b * h)
    return 0


def _ce(w: Workload, n: int) -> int:
    """What cross_entropy keeps of n logits (cross_entropy_kept)."""
    sm, cast = cross_entropy_kept(w)
    return _b(sm * n) + _b(cast * n)


def loss_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int, str]:
    """(kept for backward at the loss, transient peak at the loss, explanation) of a non-LM head."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    n = max(1, spec.num_labels)
    if pooled_classifier(spec):
        logits, lsm = _b(c * b * n), _ce(w, b * n)
        return lsm, logits + lsm, f"logits and log_softmax of b x {n} labels"
    if spec.head == "token-classification":
        logits, lsm = _b(c * t * n), _ce(w, t * n)
        return lsm, logits + lsm, f"logits and log_softmax of b*s x {n} labels"
    if spec.head == "replaced-token-detection":
        # BCEWithLogitsLoss keeps the (b, s) logits and the targets, labels.float() (fp32)
        logits, target = _b(c * t), _b(4 * t)
        return logits + target, logits + target, "one logit per token and its fp32 target (binary cross-entropy)"
    if spec.head == "question-answering":
        # start and end logits made contiguous (b, s) each, one log_softmax each
        logits, lsm = _b(c * t * n) + 2 * _b(c * t), 2 * _ce(w, t)
        return lsm, logits + lsm, "start/end logits and their log_softmax (b x s each)"
    if spec.head == "embedding" and w.training:
        h = spec.hidden_size
        # F.normalize of both columns (the normalized vectors, kept by mm, and their norms),
        # the (b, b) similarity matrix, its scaled copy and log_softmax
        normed = 2 * (_b(c * b * h) + _b(c * b))
        scores = 2 * _b(c * b * b) + _ce(w, b * b)
        return normed + _ce(w, b * b), normed + scores, "in-batch negatives: normalized (b, h) vectors, b x b scores"
    return 0, 0, "no loss head"
