"""Exact parameter counts of real checkpoints, pinned as literals.

Each number is ``sum(p.numel() for p in model.parameters())`` of the transformers class in
architectures[0], built from the catalog config on the meta device (transformers 5.x; tied
weights once). They agree with the widely quoted figures: gpt2 124,439,808,
bert-base-uncased (BertForMaskedLM) 109,514,298, Llama-2-7b 6,738,415,616, Mistral-7B
7,241,732,096, Mixtral-8x7B 46.7B, Falcon-40B 41.3B, Qwen2.5-7B 7.61B.
"""

from __future__ import annotations

import pytest

from vramlens.models import load_model
from vramlens.models.inventory import with_task

PINNED = {
    # encoders: BertForMaskedLM has no pooler; the MLM decoder is tied to the embeddings
    "bert-base-uncased": 109_514_298,
    "bert-large-uncased": 335_174_458,
    "roberta-base": 124_697_433,
    "roberta-large": 355_412_057,
    # GPT-2: 12 h^2 L + (V + n_pos) h + 13 h L + 2 h, tied head
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    # OPT: positions have 2 extra rows; opt-350m projects 512 <-> 1024 and has no final norm
    "opt-125m": 125_239_296,
    "opt-350m": 331_196_416,
    "opt-1.3b": 1_315_758_080,
    "opt-6.7b": 6_658_473_984,
    "bloom-560m": 559_214_592,
    "bloom-7b1": 7_069_016_064,
    # Phi: biases everywhere, untied lm_head with a bias
    "phi-1_5": 1_418_270_720,
    "phi-2": 2_779_683_840,
    "phi-3-mini-4k-instruct": 3_821_079_552,
    # Llama 2: 2 V h + h + L (4 h^2 + 3 h f + 2 h) with V = 32,000
    "llama-2-7b": 6_738_415_616,  # 2*32000*4096 + 4096 + 32*(4*4096^2 + 3*4096*11008 + 2*4096)
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,  # tied embeddings
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b-v0.1": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    # Qwen2.5: q/k/v biases; 0.5B-3B tie the embeddings
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-72b": 72_706_203_648,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "qwen3-8b": 8_190_735_360,
    "qwen3-30b-a3b": 30_532_122_624,
    "gemma-7b": 8_537_680_896,
    # Gemma 2: four norms per block, head_dim 256 (128 for 27b), tied embeddings
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-27b": 27_227_128_320,
    # StarCoder: multi-query c_attn of h + 2 d_head outputs, tied head
    "starcoder": 15_517_456_384,
    "starcoderbase-1b": 1_137_207_296,
    # Falcon-7b multi-query, Falcon-40b new decoder architecture (8 kv heads)
    "falcon-7b": 6_921_720_704,
    "falcon-40b": 41_303_293_952,
    "gpt-neox-20b": 20_554_567_680,
    # T5: only block 0 of each stack has relative_attention_bias; transformers >= 5 ties
    # lm_head to `shared` even for mT5/T0 (configuration_t5.py), so their count is lower than
    # the checkpoint's by V*d_model (mt5-base 582,401,280 and T0_3B 2,849,757,184 untied).
    "t5-small": 60_506_624,
    "t5-base": 222_903_552,
    "t5-large": 737_668_096,
    "mt5-base": 390_315_264,
    "t0_3b": 2_783_959_040,
}


#: Entries added for issue 11, counted by tests/models/test_vs_transformers.py's machinery
#: (transformers 5.x on the meta device); cross-checked against published figures where
#: one exists (Pythia paper table, T5 paper, Qwen3 and Mixtral model cards).
PINNED_ISSUE_11 = {
    # embedders are the bare BertModel (with pooler); bert-large-cased/mBERT are BertForMaskedLM
    "bert-large-cased": 333_610_308,
    "bert-base-multilingual-cased": 177_974_523,
    "all-minilm-l6-v2": 22_713_216,
    "bge-small-en-v1.5": 33_360_000,
    "bge-base-en-v1.5": 109_482_240,  # = bert-base-uncased's BertModel
    "bge-large-en-v1.5": 335_141_888,
    "distilroberta-base": 82_170_201,  # roberta-base less 6 layers of 7,087,872
    "opt-30b": 29_974_540_288,
    "opt-66b": 65_719_701_504,
    "phi-1": 1_418_270_720,  # same layout as phi-1_5
    "phi-3-medium-4k-instruct": 13_960_238_080,
    # Code Llama 7b/13b: 16 infilling tokens on Llama 2's 32,000 (+16 * 2 h); Python variant has none
    "codellama-7b": 6_738_546_688,  # 6_738_415_616 + 16 * 2 * 4096
    "codellama-7b-python": 6_738_415_616,
    "codellama-13b": 13_016_028_160,  # 13_015_864_320 + 16 * 2 * 5120
    "codellama-34b": 33_743_970_304,
    "llama-3.3-70b-instruct": 70_553_706_496,  # Llama 3.1 70B's layout
    "deepseek-r1-distill-llama-8b": 8_030_261_248,
    "deepseek-r1-distill-llama-70b": 70_553_706_496,
    # SmolLM2: tied embeddings, V = 49,152
    "smollm2-135m": 134_515_008,
    "smollm2-360m": 361_821_120,
    "smollm2-1.7b": 1_711_376_384,
    "mistral-7b-instruct-v0.2": 7_241_732_096,  # v0.1's tensors; rope_theta 1e6 and no window
    "mistral-7b-v0.3": 7_248_023_552,  # V = 32,768: + 768 * 2 * 4096
    "mistral-nemo": 12_247_782_400,  # head_dim 128 with hidden 5120: q is 4096 wide
    "mistral-small-instruct-2409": 22_247_282_688,
    "mistral-small-24b": 23_572_403_200,
    "mixtral-8x22b-v0.1": 140_620_634_112,
    "mixtral-8x22b-instruct-v0.1": 140_630_071_296,  # V = 32,768: + 768 * 2 * 6144
    "qwen2.5-7b-instruct": 7_615_616_512,
    "qwen2.5-14b-instruct": 14_770_033_664,
    "qwen2.5-32b-instruct": 32_763_876_352,
    "qwen2.5-72b-instruct": 72_706_203_648,
    "deepseek-r1-distill-qwen-1.5b": 1_777_088_000,  # Qwen2.5-1.5B untied: + 151_936 * 1536
    "deepseek-r1-distill-qwen-7b": 7_615_616_512,
    "deepseek-r1-distill-qwen-14b": 14_770_033_664,
    "deepseek-r1-distill-qwen-32b": 32_763_876_352,
    "qwen3-1.7b": 1_720_574_976,  # tied; the card's 2.03B counts lm_head: + 151_936 * 2048
    "qwen3-4b": 4_022_468_096,
    "qwen3-14b": 14_768_307_200,
    "qwen3-32b": 32_762_123_264,
    "qwen3-235b-a22b": 235_093_634_560,
    # Pythia: the paper's table of total parameters, exactly
    "pythia-70m": 70_426_624,
    "pythia-410m": 405_334_016,
    "pythia-1b": 1_011_781_632,
    "pythia-1.4b": 1_414_647_808,
    "pythia-2.8b": 2_775_208_960,
    # StableLM-Base-Alpha 3B (GPT-NeoX): 16 x 201,379,840 (q/k/v 4,096 x 12,288, dense, 4,096 <-> 16,384, biases, two
    # LayerNorms) + 2 x 50,688 x 4,096 (embed_in, untied embed_out) + 8,192 (final norm)
    "stablelm-base-alpha-3b": 3_637_321_728,
    "pythia-6.9b": 6_857_302_016,
    "pythia-12b": 11_846_072_320,
    "t5-3b": 2_851_598_336,
    "t5-11b": 11_307_321_344,
    # Flan-T5 (v1.1 layout): tied by transformers >= 5, so V * d_model under the checkpoint
    "flan-t5-small": 60_511_616,  # 76_961_152 - 32_128 * 512
    "flan-t5-base": 222_903_552,  # 247_577_856 - 32_128 * 768
    "flan-t5-large": 750_251_008,  # 783_150_080 - 32_128 * 1024
    "flan-t5-xl": 2_783_959_040,  # T0_3B's layout
    "flan-t5-xxl": 11_003_736_064,  # 11_135_332_352 - 32_128 * 4096
}
PINNED.update(PINNED_ISSUE_11)

#: The encoder families of issue 11 (the class in architectures[0], or DebertaV2ForMaskedLM for
#: DeBERTa-v3, whose config.json names none).
PINNED_ENCODERS = {
    # DistilBertForMaskedLM: the base model (66,362,880) + vocab_transform 768^2 + 768 + vocab_layer_norm
    # 2 * 768 + the projector's own bias 30,522 (its weight is the tied word embeddings)
    "distilbert-base-uncased": 66_985_530,
    "distilbert-base-uncased-finetuned-sst-2-english": 66_955_010,  # + pre_classifier 768^2 + 768, classifier 2 * 769
    # XLM-R: RoBERTa's layout with V = 250,002 (the MLM head's bias alone is 250,002)
    "xlm-roberta-base": 278_295_186,
    "xlm-roberta-large": 560_142_482,
    # XLMRobertaModel with its pooler, 8,194 positions; a public 1-label XLMRobertaForSequenceClassification
    # fine-tune of it counts 567,755,777 = this - pooler (1024^2 + 1024) + dense (1024^2 + 1024) + out_proj 1,025
    "bge-m3": 567_754_752,
    # ElectraForPreTraining: discriminator_predictions dense h^2 + h and dense_prediction h + 1
    "electra-small-discriminator": 13_549_057,  # 128-wide embeddings projected to 256
    "electra-base-discriminator": 109_483_009,
    "electra-large-discriminator": 335_142_913,
    # DeBERTa-v3: 512 rel_embeddings rows (2 x 256 buckets) + their LayerNorm; no position table
    "deberta-v3-xsmall": 70_958_820,
    "deberta-v3-small": 142_024_548,
    "deberta-v3-base": 184_551_780,
    "deberta-v3-large": 435_191_908,
    # ModernBERT: no biases but the decoder's; fused Wqkv, GeGLU Wi (h -> 2f)
    "modernbert-base": 149_655_232,
    "modernbert-large": 395_881_664,
}
PINNED.update(PINNED_ENCODERS)

#: The bare base model (``--task embedding``), as the issue quotes DistilBERT's.
PINNED_BASE_MODELS = {
    # 30522*768 + 512*768 + 2*768 + 6 * (4*(768^2 + 768) + 2*2*768 + 768*3072 + 3072 + 3072*768 + 768)
    "distilbert-base-uncased": 66_362_880,
    "xlm-roberta-base": 278_043_648,
    "electra-small-discriminator": 13_483_008,
    "deberta-v3-base": 183_831_552,
    "modernbert-base": 149_014_272,
}

#: Decoders added for issue 11 (new families gemma3_text, olmo2, deepseek_v2/v3), counted on the
#: meta device by tests/models/test_vs_transformers.py's machinery and checked against a
#: published figure where one exists.
PINNED_DECODERS = {
    "phi-4": 14_659_507_200,
    "phi-3.5-mini-instruct": 3_821_079_552,  # Phi-3-mini's layout (longrope changes no tensor)
    # OLMo 2 13B: the checkpoint's index gives total_size 54,864,793,600 fp32 bytes = 13,716,198,400 x 4
    "olmo-2-1124-13b": 13_716_198_400,
    "olmo-2-1124-13b-instruct": 13_716_198_400,
    # Gemma 3 (tied embeddings): keras-hub's presets count 999,885,952 (1b) and, with a 262,144-row
    # vocabulary, 3,880,099,328 (4b) and 11,765,788,416 (12b); the multimodal checkpoints' text towers
    # have 262,208 rows: + 64 x 2560 and + 64 x 3840
    "gemma-3-1b-it": 999_885_952,
    "gemma-3-4b-it": 3_880_263_168,  # 3_880_099_328 + 64 * 2560
    "gemma-3-12b-it": 11_766_034_176,  # 11_765_788_416 + 64 * 3840
    "gemma-3-27b-it": 27_009_346_304,
    "deepseek-v2-lite": 15_706_484_224,  # the model card's 15.7B
    # without the multi-token-prediction module (transformers builds none); the issue's figure
    "deepseek-v3": 671_026_404_352,
    "deepseek-r1": 671_026_404_352,
    # gpt-oss (issue 15): transformers 5.24's GptOssForCausalLM on the meta device, the experts as
    # the bf16 tensors transformers dequantizes the MXFP4 checkpoint to. 120b: the known 116.83B; per
    # test_gpt_oss_formula writes the sum out
    "gpt-oss-120b": 116_829_156_672,
    "gpt-oss-20b": 20_914_757_184,
    # Llama 4 (issue 11): the text model, transformers 5.24's Llama4ForCausalLM(text_config) on the meta device;
    # Llama4ForConditionalGeneration adds the vision tower, adapter and projector: 871,932,416 (108,641,793,536
    # and 401,583,781,376 in all: "109B" and "400B"); test_llama4_formula writes the sum out
    "llama-4-scout": 107_769_861_120,
    "llama-4-scout-instruct": 107_769_861_120,  # the base's shapes; only max_position_embeddings and rope_scaling differ
    "llama-4-maverick": 400_711_848_960,
    # Catalog additions, each equal to transformers 5.24's AutoModelForCausalLM.from_config on the meta device
    # (sum of p.numel()). DeepSeek-V2 (the card's "236B"): untied embeddings 2 * 102,400 * 5120 = 1,048,576,000;
    # MLA per block q_a 5120*1536 + 1536 + q_b 1536*128*192 + kv_a 5120*576 + 512 + kv_b 512*128*256 + o 128*128*5120
    # = 149,227,520, + 2 * 5120 norms; block 0 dense 3 * 5120 * 12288 = 188,743,680; 59 MoE blocks 160 * 3 * 5120 * 1536
    # + shared 3 * 5120 * 3072 + router 160 * 5120 = 3,822,878,720; + final norm 5120
    "deepseek-v2": 235_741_434_880,
    "deepseek-v2-chat": 235_741_434_880,
    # OLMo 2 7B: 2 * 100,352 * 4096 + 4096 + 32 * (4 * 4096^2 + 2 * 4096 (q/k norms) + 3 * 4096 * 11008 + 2 * 4096)
    "olmo-2-1124-7b": 7_298_617_344,
}
PINNED.update(PINNED_DECODERS)

#: Whisper (WhisperForConditionalGeneration, proj_out tied to embed_tokens). The encoder's sinusoidal
#: embed_positions (1500 x d) is an nn.Embedding with requires_grad_(False): model.parameters() counts it.
#: tiny: encoder conv1 384*80*3 + 384 + conv2 3*384^2 + 384 + positions 1500*384 + 4 blocks (12*384^2 + 12*384)
#: + norm 2*384 = 8,208,384; decoder 51,865*384 + 448*384 + 4 blocks (16*384^2 + 17*384) + 2*384 = 29,552,256
PINNED_WHISPER = {
    "whisper-tiny": 37_760_640,
    "whisper-base": 72_593_920,
    "whisper-small": 241_734_912,
    "whisper-medium": 763_857_920,
    "whisper-large-v2": 1_543_304_960,
    "whisper-large-v3": 1_543_490_560,  # 128 mel bins (+48 * 1280 * 3) and one more token (+1280)
    "whisper-large-v3-turbo": 808_878_080,  # 4 decoder blocks: 28 * (16 * 1280^2 + 17 * 1280) fewer
}
PINNED.update(PINNED_WHISPER)


@pytest.mark.parametrize("name,count", list(PINNED.items()), ids=list(PINNED))
def test_pinned_parameter_count(name, count):
    assert load_model(name).params == count


@pytest.mark.parametrize("name,count", list(PINNED_BASE_MODELS.items()), ids=list(PINNED_BASE_MODELS))
def test_pinned_base_model_count(name, count):
    assert with_task(load_model(name), "embedding").params == count


def test_distilbert_base_formula():
    V, n_pos, h, f, L = 30_522, 512, 768, 3072, 6
    block = 4 * (h * h + h) + 2 * 2 * h + (h * f + f) + (f * h + h)
    assert with_task(load_model("distilbert-base-uncased"), "embedding").params == (V + n_pos) * h + 2 * h + L * block


def test_llama_2_7b_formula():
    V, h, f, L = 32_000, 4096, 11_008, 32
    assert load_model("llama-2-7b").params == 2 * V * h + h + L * (4 * h * h + 3 * h * f + 2 * h)


def test_gpt_oss_formula():
    """Per block: q/k/v/o with biases, the (a,) sinks, the biased router, the experts' gate_up
    (E, h, 2f) and down (E, f, h) with their biases, two norms (modeling_gpt_oss.py)."""
    V, h, f, a, kv, d = 201_088, 2880, 2880, 64, 8, 64
    for name, L, E in (("gpt-oss-120b", 36, 128), ("gpt-oss-20b", 24, 32)):
        attn = (h * a * d + a * d) + 2 * (h * kv * d + kv * d) + (a * d * h + h) + a
        moe = (E * h + E) + E * (h * 2 * f + 2 * f) + E * (f * h + h)
        assert load_model(name).params == 2 * V * h + h + L * (attn + moe + 2 * h), name


def test_llama4_formula():
    """Per block: q/k/v/o, two norms, and either the MoE (experts' gate_up (E, h, 2f) and down (E, f, h), the
    router (E, h), the shared expert's gated MLP of f) or a dense gated MLP of intermediate_size_mlp
    (modeling_llama4.py); untied embeddings and lm_head. Active per token (top-1 of E): about 17B."""
    V, h, f, f_mlp, a, kv, d, L = 202_048, 5120, 8192, 16_384, 40, 8, 128, 48
    attn = h * a * d + 2 * h * kv * d + a * d * h
    for name, E, n_moe in (("llama-4-scout", 16, 48), ("llama-4-maverick", 128, 24)):
        moe = E * 3 * h * f + E * h + 3 * h * f
        dense = 3 * h * f_mlp
        total = 2 * V * h + h + L * (attn + 2 * h) + n_moe * moe + (L - n_moe) * dense
        assert load_model(name).params == total, name
    # Scout's active parameters: attention, norms, router, shared and one routed expert per block
    active = 2 * V * h + h + L * (attn + 2 * h + 16 * h + 2 * 3 * h * f)
    assert active == 17_172_894_720  # 15,103,918,080 in the 48 blocks + 2 x 1,034,485,760 + 5,120


def test_t5_untied_difference_is_the_lm_head():
    # what transformers 4.x counted for the untied checkpoints
    assert load_model("mt5-base").params + 250_112 * 768 == 582_401_280
    assert load_model("t0_3b").params + 32_128 * 2048 == 2_849_757_184


def whisper_formula(d: int, L_enc: int, L_dec: int, V: int, mels: int) -> int:
    """Whisper's count by hand (modeling_whisper.py): ffn 4d, positions 1500 and 448."""
    enc = (d * mels * 3 + d) + (3 * d * d + d) + 1500 * d + L_enc * (12 * d * d + 12 * d) + 2 * d
    dec = V * d + 448 * d + L_dec * (16 * d * d + 17 * d) + 2 * d
    return enc + dec


def test_whisper_formula():
    assert whisper_formula(384, 4, 4, 51_865, 80) == PINNED["whisper-tiny"] == load_model("whisper-tiny").params
    assert whisper_formula(1280, 32, 4, 51_866, 128) == load_model("whisper-large-v3-turbo").params
    # 1_543_490_560 - 808_878_080 = 734_612_480 = 28 * (16 * 1280^2 + 17 * 1280)
    assert PINNED["whisper-large-v3"] - PINNED["whisper-large-v3-turbo"] == 28 * (16 * 1280**2 + 17 * 1280)
