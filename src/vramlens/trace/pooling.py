"""The sentence-transformers training step, written as sentence-transformers writes it.

``--task embedding`` traces what ``SentenceTransformer`` + ``MultipleNegativesRankingLoss``
run for a batch of (anchor, positive) pairs: the base model (``AutoModel``) once per text
column (two forwards of ``batch`` sequences, both graphs alive until backward), mean pooling
of each, and the in-batch negatives loss over the (batch, batch) cosine-similarity matrix.
sentence-transformers itself is not needed: the few lines below follow its files.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

#: MultipleNegativesRankingLoss(scale=20.0) (sentence_transformers/losses/MultipleNegativesRankingLoss.py)
SCALE = 20.0


def mean_pooling(token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """sentence_transformers/models/Pooling.py ``forward`` with ``pooling_mode_mean_tokens``.

    The mask is expanded to (b, s, h) and converted to the embeddings' dtype (a full-size
    tensor, kept by the product for backward), then the masked sum is divided by the count;
    ``torch.cat`` of the one pooled output is a copy, as in Pooling.
    """
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).to(token_embeddings.dtype)
    sum_embeddings = torch.sum(token_embeddings * input_mask_expanded, 1)
    sum_mask = input_mask_expanded.sum(1)
    sum_mask = torch.clamp(sum_mask, min=1e-9)
    return torch.cat([sum_embeddings / sum_mask], 1)


def cos_sim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sentence_transformers/util.py ``cos_sim``: normalize both, then a @ b.T."""
    a_norm = F.normalize(a, p=2, dim=1)
    b_norm = F.normalize(b, p=2, dim=1)
    return torch.mm(a_norm, b_norm.transpose(0, 1))


def multiple_negatives_ranking_loss(reps: list[torch.Tensor]) -> torch.Tensor:
    """MultipleNegativesRankingLoss ``forward``: anchors against every positive of the batch."""
    embeddings_a = reps[0]
    embeddings_b = torch.cat(reps[1:])
    scores = cos_sim(embeddings_a, embeddings_b) * SCALE
    range_labels = torch.arange(0, scores.size(0), device=scores.device)
    return F.cross_entropy(scores, range_labels)
