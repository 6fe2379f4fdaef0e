"""Dimension shorthands shared by the block definitions (so that each block reads like the paper)."""

from symmem.blocks.symbols import h
from symmem.graph import D
from symmem.symbols import b, s

B = D(b)
H = D(h)
# Context parallelism (`cp`) splits every sequence dimension of a rank's activations; sequence parallelism splits it
# further outside tensor-parallel regions.
S_FULL = D(s, "cp")  # the rank's whole sequence chunk: inside TP regions, after the sequence all-gather
S_SP = D(s, "cp", "sp")  # sequence-sharded under sequence parallelism (attention and dense regions)
S_MOE = D(s, "cp", "sp_moe")  # sequence-sharded inside the MoE block only where the scenario says so
# The keys an attention score row runs over: the whole sequence. Under CP a rank scores its s/CP queries against
# all s keys (ring exchange, Megatron --cp-comm-type p2p) or all s queries of its heads/CP (all-to-all, a2a): the
# score matrix holds heads·s²/(t·CP) elements either way.
S_KV = D(s)


def seq(axis: str):
    """The sequence dimension of a residual stream living in region `axis`."""
    return D(s, "cp", axis)
