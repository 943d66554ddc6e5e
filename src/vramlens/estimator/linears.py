"""Where a block's linear sits, by its path: the groups the activation formulas and the checkpointing
policies read (a linear opening or closing the attention, opening or closing the MLP)."""

from __future__ import annotations

#: Leaf names of the linear that closes an attention block or an MLP (the others open them):
#: DistilBERT's ``attention.out_lin`` and ``ffn.lin2``, ModernBERT's ``attn.Wo`` and ``mlp.Wo``, Qwen2.5-VL's
#: vision ``attn.proj``.
ATTN_OUT = frozenset({"o_proj", "out_proj", "o", "c_proj", "dense", "out_lin", "Wo", "proj"})
MLP_OUT = frozenset({"down_proj", "fc2", "dense_4h_to_h", "wo", "c_proj", "w2", "lin2", "Wo"})
GROUPS = ("qkv", "attn_out", "mlp_in", "mlp_out")


def linear_group(path: str, leaf: str) -> str:
    """"qkv", "attn_out", "mlp_in" or "mlp_out" for the linear at ``path`` (its leaf module ``leaf``)."""
    low = path.lower()
    if "attn" in low or "attention" in low:
        return "attn_out" if leaf in ATTN_OUT else "qkv"
    return "mlp_out" if (leaf in MLP_OUT or low.endswith("output.dense")) else "mlp_in"
