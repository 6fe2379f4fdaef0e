"""torchtitan 0.3.0's Llama 3 and DeepSeek-V3 under pipeline parallelism x FSDP2 on the CPU (gloo), measured where
pipelining changes the bytes.

`run(settings, pp, microbatches, schedule)` spawns PP x FSDP (x TP) ranks (mesh ("pp", "dp"), or torchtitan's
ParallelDims under TP); each builds the whole model as `runner.build_model` does, keeps its stage's modules by
torchtitan's own split (`torchtitan.distributed.pipeline_parallel._generate_llm_fqn_per_model_part` and
`_split_module`), applies TP with sequence parallelism (`Module.parallelize`, the stage built with torchtitan's
`_build_get_mesh_callback` so that it re-wraps the DTensors it receives), `fully_shard`s
every block and then the stage with reshard-after-forward off (torchtitan's default under PP,
torchtitan/distributed/fsdp.py:54-74) and `MixedPrecisionPolicy(bf16, fp32)`, wraps it in
`torch.distributed.pipelining.PipelineStage` and runs two steps of `Schedule1F1B` or `ScheduleGPipe` with
torchtitan's `cross_entropy_loss`, AdamW after each; with `Interleaved1F1B` each rank keeps two stages (torchtitan's
default), rank r stages r and r + PP of torchtitan's split into 2·PP, each an FSDP root of its own, under
`ScheduleInterleaved1F1B` or `ScheduleInterleavedZeroBubble`; under `ScheduleZBVZeroBubble` and `ScheduleDualPipeV`
rank r keeps stages r and 2·PP - 1 - r (torchtitan's "v" style). Each rank returns:

* `stage_params`: the elements of its stages' parameters (global sizes), and `chunk_params` of each stage;
* `during_backward`: after each micro-batch's backward of a stage but its last
  (`PipelineStage.backward_maybe_with_nosync`), the bytes of the storages of the unsharded parameters
  (`FSDPParam._unsharded_param`) and of the accumulated unsharded gradients (`unsharded_accumulated_grad`), and
  whether any sharded gradient exists, and the gradients left on the unsharded parameters in their dtype
  (`param_dtype_grads`: zero bubble's weight backward leaves them): summed over the rank's stages, and of each
  (`per_chunk`), with the stage run (`chunk`) and the backward's type ("full", or zero bubble's "input", "weight");
  and the bytes of the stage outputs kept in `fwd_cache` for the micro-batches still to run backward
  (`cached_outputs`; the running one's is out of it, in a local of the backward);
* `recv_buffers`: the bytes of the receive buffers of every micro-batch and stage, activations and gradients;
* `states`: the sharded parameters', gradients' and AdamW's bytes after the step (`runner._state_bytes`);
* `peak`: the most bytes of live storages at any op boundary over both steps (`runner.fsdp_tracker_class`);
* `actions`: each forward and backward (zero bubble: "I" and "W") the rank ran, its stage and micro-batch, with the
  live bytes after it.
"""

from __future__ import annotations

import gc

from symmem.errors import SymmemError
from symmem.validate.fsdp2 import runner as R

SCHEDULES = ("1F1B", "GPipe", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
MULTI = ("Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")  # two stages per rank
V_STYLE = ("ZBVZeroBubble", "DualPipeV")  # those whose rank r runs stages r and 2·PP - 1 - r
CHUNKS = 2  # stages per rank of a multi-stage schedule: torchtitan's default (pipeline_parallel.py:262)


def _fsdp_params(module):
    """The FSDPParams of every FSDP unit inside `module` (torch 2.13.0's `fully_shard.state`)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    out = []
    for mod in module.modules():
        if isinstance(mod, FSDPModule):
            group = fully_shard.state(mod)._fsdp_param_group
            if group is not None:
                out.extend(group.fsdp_params)
    return out


def _step(rank: int, job) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import (
        Schedule1F1B,
        ScheduleDualPipeV,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
        ScheduleInterleavedZeroBubble,
        ScheduleZBVZeroBubble,
    )
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.distributed.pipeline_parallel import (
        _build_get_mesh_callback,
        _generate_llm_fqn_per_model_part,
        _split_module,
    )

    st, pp, m, schedule = job
    torch.manual_seed(st.seed)
    whole = R.build_model(st)
    if st.tp > 1:  # torchtitan's meshes (pp, fsdp, tp), TP applied to the stage's modules before FSDP
        pd = _parallel_dims(st, pp)
        pp_mesh, dp_mesh = pd.get_mesh("pp"), pd.get_mesh("fsdp")
        get_mesh = _build_get_mesh_callback(pd)  # DTensor stage outputs, re-wrapped on receipt
    else:
        mesh = init_device_mesh("cpu", (pp, st.world // pp), mesh_dim_names=("pp", "dp"))
        pp_mesh, dp_mesh, get_mesh = mesh["pp"], mesh["dp"], None
    pp_rank = pp_mesh.get_local_rank()
    v = CHUNKS if schedule in MULTI else 1
    fqns = _generate_llm_fqn_per_model_part(pp * v, st.n_layers)
    if schedule in V_STYLE:  # torchtitan's "v" style: rank r runs stages r and 2 PP - 1 - r
        ids = [pp_rank, 2 * pp - 1 - pp_rank]
    else:
        ids = [pp_rank + k * pp for k in range(v)]  # torchtitan's "loop" style (pipeline_parallel.py:541-568)
    models = [_split_module(whole, fqns[i]) for i in ids]
    del whole
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for model in models:
        if st.tp > 1:
            model.parallelize(pd)
        for _id, block in model.layers.items():
            fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
        fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
    chunk_params = [sum(p.numel() for p in model.parameters()) for model in models]
    optimizer = torch.optim.AdamW([p for model in models for p in model.parameters()], lr=1e-4, foreach=False)
    stages = [PipelineStage(model, i, pp * v, torch.device("cpu"), group=pp_mesh.get_group(), get_mesh=get_mesh)
              for model, i in zip(models, ids, strict=True)]
    if v > 1:
        cls = {"Interleaved1F1B": ScheduleInterleaved1F1B, "InterleavedZeroBubble": ScheduleInterleavedZeroBubble,
               "ZBVZeroBubble": ScheduleZBVZeroBubble, "DualPipeV": ScheduleDualPipeV}[schedule]
        sched = cls(stages, n_microbatches=m, loss_fn=cross_entropy_loss, scale_grads=False)
    else:
        sched_class = Schedule1F1B if schedule == "1F1B" else ScheduleGPipe
        sched = sched_class(stages[0], n_microbatches=m, loss_fn=cross_entropy_loss, scale_grads=False)

    fsdp_params = [_fsdp_params(model) for model in models]
    during: list[dict] = []

    def chunk_state(params) -> dict:  # (under TP, the local tensors of the DTensors)
        return {"unsharded_params": sum(R._plain(p._unsharded_param).untyped_storage().nbytes() for p in params),
                "accumulated_grads": sum(R._plain(p.unsharded_accumulated_grad).untyped_storage().nbytes()
                                         for p in params if p.unsharded_accumulated_grad is not None),
                "sharded_grads_exist": any(p.sharded_param.grad is not None for p in params),
                # the gradients left on the unsharded parameters, in their dtype (zero-bubble's weight backward)
                "param_dtype_grads": sum(R._plain(p._unsharded_param.grad).untyped_storage().nbytes()
                                         for p in params if p._unsharded_param.grad is not None)}

    def cached_outputs() -> int:
        """Bytes of the stage outputs the rank's stages keep in `fwd_cache` (distinct storages)."""
        seen = {}
        for stage in stages:
            for outputs, _inputs in stage.fwd_cache.values():
                for t in outputs:
                    if isinstance(t, torch.Tensor):
                        stg = R._plain(t).untyped_storage()
                        seen[stg.data_ptr()] = stg.nbytes()
        return sum(seen.values())

    def measured(k: int, backward):
        def measured_backward(backward_type, bwd_kwargs, last_backward=False):
            out = backward(backward_type, bwd_kwargs, last_backward=last_backward)
            if not last_backward:
                chunks = [chunk_state(params) for params in fsdp_params]
                during.append({"chunk": k, "type": backward_type, "per_chunk": chunks,
                               "cached_outputs": cached_outputs(),
                               **{key: sum(c[key] for c in chunks) for key in ("unsharded_params",
                                                                               "accumulated_grads")},
                               "sharded_grads_exist": any(c["sharded_grads_exist"] for c in chunks)})
            return out
        return measured_backward

    for k, stage in enumerate(stages):
        stage.backward_maybe_with_nosync = measured(k, stage.backward_maybe_with_nosync)
    actions: list = []  # (action, stage, micro-batch, the live bytes after it)
    live: list = []  # the tracker, once made

    def logged(kind: str, k: int, fn):
        def wrapper(mb, *args, **kwargs):
            out = fn(mb, *args, **kwargs)
            full = kwargs.get("full_backward", True)
            actions.append(("I" if kind == "B" and not full else kind, ids[k], mb, live[0].live_bytes()))
            return out
        return wrapper

    for k, stage in enumerate(stages):
        stage.forward_one_chunk = logged("F", k, stage.forward_one_chunk)
        stage.backward_one_chunk = logged("B", k, stage.backward_one_chunk)
        stage.backward_weight_one_chunk = logged("W", k, stage.backward_weight_one_chunk)
    g = torch.Generator().manual_seed(st.seed + 1 + dp_mesh.get_local_rank())  # TP ranks: the same data
    tokens = torch.randint(0, st.vocab, (st.b * m, st.s + 1), generator=g)
    inputs, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    tracker = R.fsdp_tracker_class()()
    live.append(tracker)
    gc.collect()
    with tracker:
        tracker.add_tensors(o for o in gc.get_objects() if isinstance(o, torch.Tensor))
        for step in (1, 2):
            tracker.phase = f"step {step}"
            gc.disable()  # as the runner: a cycle collected or not moves a peak
            try:
                args = (inputs,) if 0 in ids else ()  # the ranks of the model's first and last stages
                target = labels if pp * v - 1 in ids else None
                sched.step(*args, target=target, losses=[] if target is not None else None, return_outputs=False)
            finally:
                gc.enable()
            tracker.phase = f"optimizer step {step}"
            optimizer.step()
            optimizer.zero_grad()
            gc.collect()
            tracker._check("(end)")

    def buffers(infos) -> int:
        return sum(i.buffer.untyped_storage().nbytes() for per_mb in infos.values() for i in per_mb
                   if i.buffer is not None)

    return {"rank": rank, "stage": pp_rank, "stage_params": sum(chunk_params), "chunk_params": chunk_params,
            "during_backward": during,
            "recv_buffers": {"activations": sum(buffers(s.args_recv_info) for s in stages),
                             "gradients": sum(buffers(s.grad_recv_info) for s in stages)},
            "states": R._state_bytes(torch.nn.ModuleList(models), optimizer)["total"], "peak": tracker.peak,
            "peak_phase": tracker.peak_phase, "actions": actions}


def _parallel_dims(st: R.Settings, pp: int):
    """torchtitan's ParallelDims with PP beside FSDP and TP, on the CPU, DTensor TP (as `runner.parallel_dims`)."""
    import torchtitan.distributed.parallel_dims as pdm
    import torchtitan.distributed.utils as du
    from torchtitan.distributed import ParallelDims

    pdm.device_type = "cpu"
    du.set_spmd_backend("partial_dtensor")
    pd = ParallelDims(dp_replicate=1, dp_shard=st.world // (pp * st.tp), cp=1, tp=st.tp, pp=pp, ep=1,
                      world_size=st.world, spmd_backend="partial_dtensor")
    pd.build_mesh()
    return pd


def run(st: R.Settings, pp: int, microbatches: int, schedule: str = "1F1B") -> list[dict]:
    """Spawn `st.world` ranks (PP x FSDP), run two steps on each, return their measurements ordered by rank."""
    R.require()
    if schedule not in SCHEDULES:
        raise SymmemError(f"schedule = {schedule!r}: one of {', '.join(SCHEDULES)}")
    if pp < 2 or st.world % (pp * st.tp):
        raise SymmemError(f"pp = {pp}, tp = {st.tp}: PP at least 2, PP x TP dividing the world of {st.world}")
    if st.replicate != 1 or st.ac != "none":
        raise SymmemError("the pipeline runner runs torchtitan's models under FSDP (and TP), without AC or HSDP")
    from symmem.validate._spawn import spawn

    return spawn(_step, (st, pp, microbatches, schedule), st.world, "PP x FSDP2")


def expected(scn, rank: int, steps: int = 2) -> dict:
    """What `run` should measure on pipeline rank `rank`, from symmem's model of the `torchtitan-cpu` scenario `scn`
    (its stage `rank`): each stage's parameters (global elements); after every backward of a stage but its last, over
    `steps` steps in the order symmem derives for torch (`Schedule.order`, runtime "torch"), each stage's unsharded
    BF16 parameters (from its first forward to its last backward), its FP32 accumulated gradients (from its first
    backward to its last), whether its sharded gradients exist (from its last), and the stage outputs kept in
    `fwd_cache` for the micro-batches still to run backward (`profiles.pipeline_stage_output`); the receive buffers;
    the states; the peak."""
    from symmem.accounting.analysis import stage_chunks, stage_memory, stage_params
    from symmem.profiles import pipeline_stage_output

    stage = scn.stages[rank]
    chunks = stage_chunks(scn, stage)
    local = [sum(stage_params(scn, ch).per_gpu.values()) for ch in chunks]
    outputs = [pipeline_stage_output(scn, ch.head) for ch in chunks]
    during = []
    for _step in range(steps):
        started, done = [0] * len(chunks), [0] * len(chunks)
        for phase, _mb, c in scn.schedule.order(rank, scn.parallel.pp, scn.m, scn.schedule_runtime):
            (started if phase == "F" else done)[c] += 1
            if phase == "F" or done[c] == scn.m:
                continue
            during.append({"per_chunk": [{"unsharded_params": 0 if done[k] == scn.m else scn.gather_bytes * n,
                                          "accumulated_grads": 4 * n if 0 < done[k] < scn.m else 0,
                                          "sharded_grads_exist": done[k] == scn.m,
                                          # a full backward leaves none: FSDP2's post-backward moves each BF16
                                          # gradient into the FP32 accumulation (_fsdp_param.py:802-821)
                                          "param_dtype_grads": 0}
                                         for k, n in enumerate(local)],
                           "cached_outputs": sum((started[k] - done[k]) * outputs[k] for k in range(len(chunks)))})
    one = pipeline_stage_output(scn, last=False)  # a receive buffer: the stage before's output
    m = stage_memory(scn, stage)
    return {"chunk_params": [sum(stage_params(scn, ch).whole.values()) for ch in chunks], "during_backward": during,
            "recv_buffers": {"activations": (len(chunks) - stage.embedding) * scn.m * one,
                             "gradients": (len(chunks) - stage.head) * scn.m * one},
            "states": m.states.weights + m.states.optimizer, "peak": m.peak_allocated}


def compare(measured: dict, want: dict) -> dict:
    """Each byte-exact quantity of `expected` against a rank's measurement: {name: equal}; the peak is its own."""
    seen = [{"per_chunk": b["per_chunk"], "cached_outputs": b["cached_outputs"]} for b in measured["during_backward"]]
    return {"stage parameters": measured["chunk_params"] == want["chunk_params"],
            "after each backward (gathered, accumulated, sharded, stage outputs)": seen == want["during_backward"],
            "receive buffers": measured["recv_buffers"] == want["recv_buffers"],
            "states": measured["states"] == want["states"]}
