"""Dimension shorthands shared by the block definitions (so that each block reads like the paper)."""

from symmem.blocks.symbols import h
from symmem.graph import D
from symmem.symbols import b, s

B = D(b)
H = D(h)
S_FULL = D(s)  # the whole sequence: inside tensor-parallel regions, after the sequence all-gather
S_SP = D(s, "sp")  # sequence-sharded under sequence parallelism (attention and dense regions)
S_MOE = D(s, "sp_moe")  # sequence-sharded inside the MoE block only where the scenario says so


def seq(axis: str):
    """The sequence dimension of a residual stream living in region `axis`."""
    return D(s, axis)
