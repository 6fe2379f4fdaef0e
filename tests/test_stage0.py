"""Stage 0 of the paper scenario, which the paper (arXiv 2502.07846) does not analyse: what the input embedding
keeps, and what full recomputation keeps of the first MoE layer, each case held against a formula derived by hand
from Megatron-LM's source (the citations are in `symmem/blocks/embedding.py`, `symmem/rules/paper.py` and
`symmem/model.py`, `layer_flow`)."""

import pytest
import sympy

from symmem import load_scenario
from symmem.accounting.analysis import stage_terms, to_int, values
from symmem.blocks.symbols import N_r, h
from symmem.check.quantities import derive
from symmem.scenario import with_parallel
from symmem.symbols import b, s


def _part(scn, part: str, stage: int = 0) -> sympy.Expr:
    return sympy.expand(sum((t.total for t in stage_terms(scn, scn.stages[stage]) if t.part == part),
                            sympy.Integer(0)))


# Megatron's embedding on one rank: F.embedding keeps the int64 token ids of the rank's whole sequence chunk
# (8 bytes per token, s/CP tokens: every TP rank looks up all of them), and the embedding dropout, applied after the
# reduce-scatter to the sequence-parallel region, keeps a 1-byte mask of the rank's s/(CP·t) rows of h (s/CP rows
# without sequence parallelism, where the dropout runs on the whole output).
@pytest.mark.parametrize("changes, ids, mask", [
    ({}, 8 * b * s, b * s * h / 2),  # the paper's case: t = 2, sequence parallel
    ({"tp": 4, "dp": 16}, 8 * b * s, b * s * h / 4),
    ({"sequence_parallel": False}, 8 * b * s, b * s * h),
    ({"cp": 2, "dp": 16}, 8 * b * s / 2, b * s * h / 4),
])
def test_embedding_keeps_token_ids_and_dropout_mask(paper, changes, ids, mask):
    scn = with_parallel(paper, **changes) if changes else paper
    assert _part(scn, "embedding") == sympy.expand(ids + mask)


def test_embedding_bytes_at_the_paper_sizes(paper):
    # b = 1, s = 4096, h = 7168, t = 2: 8·4096 bytes of ids and 4096·7168/2 bytes of mask.
    assert to_int(_part(paper, "embedding"), values(paper)) == 8 * 4096 + 4096 * 7168 // 2 == 14_712_832
    # the paper's own stage (stage 1, Table 10: 24,671,158,272, worked by hand in test_activations) holds no
    # embedding and is unchanged
    assert to_int(sum(t.total for t in stage_terms(paper, paper.stages[1])), values(paper)) == 24_671_158_272


def test_embedding_under_the_other_rule_sets(paper):
    # Hugging Face's DeepseekV3Model has no embedding dropout: torch-eager on its dataflow keeps the ids alone;
    # megatron-te models the measured runs' hidden_dropout = 0, whose dropout keeps nothing.
    assert _part(paper.replace(rules_name="torch-eager"), "embedding") == 8 * b * s
    assert _part(paper.replace(profile_name="megatron-te"), "embedding") == 8 * b * s


def test_gpt_embedding_keeps_both_id_tensors():
    # GPT (Korthikanti et al. 2022, TP 8, sequence parallel): word and position lookups keep their int64 ids
    # (b·s and s), the embedding dropout its mask of s/t rows (Section 4.3: sbh/t per micro-batch).
    k = load_scenario("korthikanti")
    assert _part(k, "embedding") == sympy.expand(8 * b * s + 8 * s + b * s * h / 8)


# Full recomputation keeps, per layer, the tensor the layer receives (Megatron's checkpoint saves the hidden states
# the layer is called with) and the top-k routing decision of an MoE layer. In the paper's convention a dense layer
# emits a sequence-sharded stream and an MoE layer an unsharded one (the MoE block is not sequence-sharded), so:
# a dense layer after the embedding or a dense layer keeps 2·b·(s/t)·h bytes (BF16), the first MoE layer, fed by a
# dense layer, 2·b·(s/t)·h too, an MoE layer fed by an MoE layer 2·b·s·h (the paper's 8bsh for four, Section 5);
# the top-k weights are 2·b·s·N_r per MoE layer; the embedding is not a decoder layer and keeps what it keeps
# without recomputation, 8bs + b·(s/t)·h. At t = 2:
T = 2
DENSE_CKPT = 2 * b * s * h / T
FIRST_MOE_CKPT = 2 * b * s * h / T
MOE_CKPT = 2 * b * s * h
TOPK = 2 * b * s * N_r
EMBEDDING = 8 * b * s + b * s * h / T


def test_full_recompute_checkpoint_of_stage0_first_moe_layer(paper):
    full = paper.replace(recompute_name="full")
    terms = stage_terms(full, full.stages[0])
    ckpt = {t.part: t for t in terms if t.tensor == "layer.x"}
    assert (ckpt["dense layers"].count, sympy.expand(ckpt["dense layers"].nbytes - DENSE_CKPT)) == (3, 0)
    assert (ckpt["moe layers"].count, sympy.expand(ckpt["moe layers"].nbytes - FIRST_MOE_CKPT)) == (1, 0)
    expected = sympy.expand(3 * DENSE_CKPT + FIRST_MOE_CKPT + TOPK + EMBEDDING)
    assert sympy.expand(sum(t.total for t in terms)) == expected  # 9bsh/2 + 2bsN_r + 8bs
    # b = 1, s = 4096, h = 7168, N_r = 8: four sharded checkpoints, one top-k, the embedding
    assert to_int(expected, values(full)) == 4 * 4096 * 7168 + 2 * 4096 * 8 + 8 * 4096 + 4096 * 7168 // 2
    assert to_int(expected, values(full)) == 132_218_880
    # the paper's stages keep their formula 8bsh + 8bsN_r (Section 5, Table 10: 235,143,168 bytes)
    one = sympy.expand(sum(t.total for t in stage_terms(full, full.stages[1])))
    assert one == sympy.expand(4 * (MOE_CKPT + TOPK))
    assert to_int(one, values(full)) == 235_143_168


def test_layer_quantity_of_the_first_moe_layer(paper):
    full = paper.replace(recompute_name="full")
    expr, _ = derive("layer.activations", full, stage=0, layer=3)
    assert sympy.expand(expr - (FIRST_MOE_CKPT + TOPK)) == 0
    expr, _ = derive("layer.activations", full, stage=1, layer=4)
    assert sympy.expand(expr - (MOE_CKPT + TOPK)) == 0


def test_a_stage_with_both_kinds_of_moe_layers(paper):
    # PP 8: stage 0 holds layers 0-7, three dense, MoE layer 3 fed by a dense layer, MoE layers 4-7 fed by MoE
    # layers: two parts of MoE layers, each with its own checkpoint.
    full = with_parallel(paper, pp=8, dp=64).replace(recompute_name="full")
    terms = stage_terms(full, full.stages[0])
    ckpt = {t.part: (t.count, sympy.expand(t.nbytes)) for t in terms if t.tensor == "layer.x"}
    assert ckpt == {"dense layers": (3, DENSE_CKPT), "moe layers after dense": (1, FIRST_MOE_CKPT),
                    "moe layers": (4, MOE_CKPT)}
    assert sympy.expand(sum(t.total for t in terms)) == sympy.expand(
        3 * DENSE_CKPT + FIRST_MOE_CKPT + 4 * MOE_CKPT + 5 * TOPK + EMBEDDING)


def test_sequence_sharded_moe_block_shards_every_checkpoint():
    # paper-megatron: the MoE block is sequence-sharded too, so every layer's stream is: b·(s/t)·h BF16 per layer,
    # and the top-k weights of the rank's s/t tokens.
    pm = load_scenario("paper-megatron").replace(recompute_name="full")
    for stage, dense, moe in ((0, 3, 1), (1, 0, 4)):
        total = sympy.expand(sum(t.total for t in stage_terms(pm, pm.stages[stage])))
        expected = (dense + moe) * 2 * b * s * h / T + moe * TOPK / T + (EMBEDDING if stage == 0 else 0)
        assert total == sympy.expand(expected)
