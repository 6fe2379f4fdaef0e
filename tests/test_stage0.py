"""Stage 0 of the paper scenario, which the paper (arXiv 2502.07846) does not analyse: what the input embedding
keeps, each case held against a formula derived by hand from Megatron-LM's source (the citations are in
`symmem/blocks/embedding.py` and `symmem/rules/paper.py`)."""

import pytest
import sympy

from symmem import load_scenario
from symmem.accounting.analysis import stage_terms, to_int, values
from symmem.blocks.symbols import h
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
    # the paper's own stage (stage 1, Table 10) holds no embedding and is unchanged
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
