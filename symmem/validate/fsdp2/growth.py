"""What the forward leaves alive beyond the saved-tensor hooks' count, predicted for the FSDP2 runner's checks
(`runner` records `head_growth`): shared by `predict` and `peak` (a module of its own, so that neither imports the
other)."""

from __future__ import annotations


def interior_block_checked(st) -> bool:
    """Whether the live bytes' growth over block 2 (0-based) measures that block's saved and held bytes: three
    blocks or more (block 0's end holds the embedding's output chain too), resharded after forward, one AC policy for
    all (the caller's hand-off of a block's input and output then cancels; under per-layer AC it does not), and
    blocks 1 and 2 of one kind (DeepSeek-V3's dense and MoE blocks gather and hand off different bytes)."""
    # DeepSeek-V3: blocks 1 and 2 are both MoE (at most one dense block) or both dense (three or more); the
    # runner's default MoESettings has one dense block
    n_dense = st.moe.n_dense_layers if st.moe is not None else 1
    same_kind = st.family != "deepseek_v3" or n_dense != 2
    return st.n_layers >= 3 and st.reshard_after_forward and not st.ac.startswith("selective-layer") and same_kind


def head_growth(scn, stage, vals) -> int:
    """The growth of the live bytes from the final norm's start to lm_head's end (the runner's `head_growth`): what
    the norm and lm_head leave for the backward, saved or only held (under TP at b = 1 the two more copies of the
    all-gather, `torchtitan._linear_tp_b1`), and the logits, less the last block's output, the norm's input, which
    the caller lets go (torchtitan/models/common/decoder.py:240-247 `h = self.norm(h)`; under TP the norm's
    sequence-sharded output is gathered at its own output, decoder_sharding.py:119-139, and the caller holds the
    gathered tensor, which lm_head saves)."""
    import sympy

    from symmem.accounting.activations import tensor_bytes
    from symmem.accounting.analysis import stage_terms
    from symmem.accounting.evaluate import ceil_int, evaluate
    from symmem.model import stage_parts

    (part,) = [p for p in stage_parts(scn.model, stage, scn.convention, scn.flow_impl) if p.name == "head"]
    ops = {op.kind: op for op in part.flow.ops}
    norm, lm_head = ops["rmsnorm"], ops["linear"]
    kept = sum(ceil_int(evaluate(t.nbytes, vals)) for t in stage_terms(scn, stage)
               if t.part == "head" and t.op in (norm.name, lm_head.name))
    axes = scn.parallel.axis_sizes()

    def size(name: str) -> int:
        return ceil_int(evaluate(tensor_bytes(part.flow.tensors[name], axes, scn.act_bytes, sympy.Integer(0)), vals))

    # under the float8 all-gather lm_head saves its weight's FP32 scale, made at the root's all-gather, before the
    # norm: alive already, no growth here
    from symmem.accounting.timeline import float8_scales

    return kept + size(lm_head.outputs[0]) - size(norm.inputs[0]) - 4 * float8_scales(scn.gathered, part)
