"""PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`, torch 2.13.0) as torchtitan 0.3.0 applies it: the model
states of one rank, parameter by parameter.

Each parameter is sharded on its first dimension over the shard group (FSDP, or the shard dimension of HSDP's
(replicate, shard) mesh): `torch.chunk` into chunks of c = ceil(d0 / N) rows, rank r holding rows
[r·c, min((r + 1)·c, d0)) (possibly none), and *every* rank's storage padded to c rows ("Pre-pad the sharded
parameter to avoid padding before all-gather", torch/distributed/fsdp/_fully_shard/_fsdp_param.py:297-316,
`_init_sharded_param`). So, per parameter of d0 x rest elements on rank r:

* the FP32 sharded parameter: c·rest elements (its padded storage, `_sharded_param_data`);
* its FP32 gradient: c·rest elements, a view into the reduce-scatter's output, padded as the parameter
  (_fsdp_collectives.py `foreach_reduce`: the output is allocated for the padded shards, each gradient an
  `as_strided` view of it);
* AdamW's exp_avg and exp_avg_sq: `torch.zeros_like` of the parameter's local (unpadded) shard,
  rows(r)·rest elements each, rows(r) = min(c, max(0, d0 - r·c)) (torch/optim/adamw.py -> adam.py `_init_group`);
* AdamW's `step`: a 4-byte scalar per parameter, on the device under the fused implementation torchtitan uses
  on GPUs (`implementation = "fused"`, torchtitan/components/optimizer/optimizer.py:109-111), on the host under
  the for-loop and foreach ones (adam.py `_init_group`: `torch.tensor(0.0)` unless fused or capturable).

The parameters are the model's own, as torchtitan's Llama 3 has them: q, k and v fused into one `wqkv` weight
(`fuse_qkv=True` in every llama3 flavor, torchtitan/models/llama3/__init__.py:77, :131), whose first dimension is
the three outputs stacked; a linear's weight is (out features, in features), so its first dimension is its
output; an embedding's is the vocabulary; a norm's its width. Measured to the byte on the CPU
(tests/validate/test_fsdp2.py; `symmem measure --framework fsdp2`).
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem.errors import SymmemError

QKV = ("q_proj", "k_proj", "v_proj")  # HF's names of the projections torchtitan fuses into one wqkv


@dataclass(frozen=True)
class FsdpParam:
    """One FSDP2 parameter: its name, first dimension and the product of the others (global sizes)."""

    name: str
    d0: int
    rest: int

    def rows(self, rank: int, n: int) -> int:
        c = -(-self.d0 // n)
        return min(c, max(0, self.d0 - rank * c))

    def padded(self, n: int) -> int:
        return -(-self.d0 // n) * self.rest


def fsdp_params(parts, vals: dict, fuse_qkv: bool = True, axes=None) -> list[FsdpParam]:
    """The parameters of a stage's `parts` as FSDP2 shards them (global sizes at `vals`, the scenario's values);
    q, k and v one `wqkv` parameter when `fuse_qkv` (torchtitan 0.3.0), three otherwise (torchtitan 9dec370).
    Under TP (`axes`, the scenario's axis sizes) each parameter is first its TP shard: FSDP2 shards a DTensor's local
    tensor on dim 0 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py `_init_sharded_param`: the TP-local data,
    chunked over the shard group), so rows and padding are those of the TP-local dim 0."""
    from symmem.accounting.evaluate import evaluate
    from symmem.accounting.params import weight_uses
    from symmem.graph import global_size, local_size

    def size(dims):  # a weight's elements: global, or its TP shard's under `axes`
        return global_size(dims) if axes is None else local_size(dims, axes)

    def n(expr) -> int:
        v = evaluate(expr, vals)
        if v.denominator != 1:
            raise AssertionError("a fractional parameter size")
        return int(v)

    found: list[tuple[int, int, int, FsdpParam]] = []  # (part, copy, use): torchtitan's order, below
    for i, use in enumerate(weight_uses(parts, unique=True)):
        j, part = next((j, p) for j, p in enumerate(parts) if p.name == use.part)
        op = next(o for o in part.flow.ops if o.name == use.op)
        dims = use.weight.dims
        if op.kind == "linear":  # symmem writes (in..., out...); torch's Linear.weight is (out, in), flattened
            # the weight's input dims are the input's trailing ones: x = (batch..., in...), y = (batch..., out...),
            # so in - out = len(x) - len(y) and in + out = len(w) (o_proj: (n_h, d_h, h) has two)
            x, y = (part.flow.tensors[t] for t in (op.inputs[0], op.outputs[0]))
            n_in = (len(dims) + len(x.dims) - len(y.dims)) // 2
            d0, rest = n(size(dims[n_in:])), n(size(dims[:n_in]))
        else:  # embedding (V, h), norms (h,)
            d0, rest = n(size(dims[:1])), n(size(dims[1:])) if len(dims) > 1 else 1
        found += [(j, copy, i, FsdpParam(f"{use.part}[{copy}].{use.op}", d0, rest)) for copy in range(use.count)]
    # torchtitan's order (`model.parameters()`, the optimizer's): part by part, each copy's parameters together
    ordered = [p for *_, p in sorted(found, key=lambda x: x[:3])]
    return _fuse_qkv(ordered) if fuse_qkv else ordered


def gathered_in_float8(scn, parts, params: list[FsdpParam]) -> frozenset[str]:
    """The names of the `params` FSDP2 gathers in float8 (torchao's `enable_fsdp_float8_all_gather`): each Float8
    linear's weight, a fused wqkv by its q projection's op (one Float8Linear). Empty without the flag."""
    lp = scn.precision.low_precision
    ag = lp.fsdp_float8_all_gather if lp is not None else None
    if ag is None:
        return frozenset()
    ops = {op.name: op for part in parts for op in part.flow.ops}
    out = set()
    for p in params:
        name = p.name.partition("].")[2]
        if name.endswith(".wqkv"):  # q, k and v as one parameter (`_fuse_qkv`): q's op stands for it
            name = f"{name.rsplit('.', 1)[0]}.{QKV[0]}"
        if name in ops and ag.is_float8(ops[name]):
            out.add(p.name)
    return frozenset(out)


def _fuse_qkv(params: list[FsdpParam]) -> list[FsdpParam]:
    """torchtitan's wqkv: the q, k and v projections of one layer (copy) are one parameter, outputs stacked on
    dim 0, in q's place."""
    out: list[FsdpParam] = []
    pending: list[FsdpParam] = []
    for p in params:
        if p.name.endswith(QKV):
            if pending and pending[0].name.rsplit(".", 1)[0] != p.name.rsplit(".", 1)[0]:
                raise AssertionError("a layer without all of q, k and v")
            pending.append(p)
            if len(pending) == 3:
                if len({q.rest for q in pending}) != 1:
                    raise AssertionError("q, k and v read inputs of different widths")
                out.append(FsdpParam(pending[0].name.rsplit(".", 1)[0] + ".wqkv", sum(q.d0 for q in pending),
                                     pending[0].rest))
                pending = []
        else:
            out.append(p)
    if pending:
        raise AssertionError("a layer without all of q, k and v")
    return out


@dataclass(frozen=True)
class RankStates:
    """Bytes of one rank's model states under FSDP2 + AdamW (FP32 parameters, FP32 gradients)."""

    params: int
    grads: int
    exp_avg: int
    exp_avg_sq: int
    step: int  # the AdamW step scalars (host memory unless fused: `FSDP2_STEP_ON_DEVICE`)

    @property
    def total(self) -> int:
        return self.params + self.grads + self.exp_avg + self.exp_avg_sq + self.step


def rank_states(params: list[FsdpParam], n: int, rank: int, step_on_device: bool,
                param_bytes: int = 4, grad_bytes: int = 4, moment_bytes: int = 4) -> RankStates:
    """Rank `rank` of a shard group of `n`: padded parameters and gradients, unpadded moments."""
    if not 0 <= rank < n:
        raise SymmemError(f"rank = {rank}: must be in 0..{n - 1} of the shard group")
    padded = sum(p.padded(n) for p in params)
    local = sum(p.rows(rank, n) * p.rest for p in params)
    return RankStates(param_bytes * padded, grad_bytes * padded, moment_bytes * local, moment_bytes * local,
                      4 * len(params) if step_on_device else 0)


def shard_degree(scn) -> int:
    """FSDP's shard group: DP, or DP / replicate under HSDP (`Parallel.hsdp_replicate`), times CP: torchtitan shards
    over the `dp_shard_cp` mesh, the data-parallel shards and the context-parallel ranks together
    (torchtitan/parallelisms/parallelize_llama.py:80-91 at 9dec370)."""
    par = scn.parallel
    r = getattr(par, "hsdp_replicate", 1) or 1
    if par.dp % r:
        raise SymmemError(f"hsdp_replicate = {r}: must divide DP = {par.dp} (HSDP's mesh is replicate x shard)")
    return par.dp // r * par.cp
