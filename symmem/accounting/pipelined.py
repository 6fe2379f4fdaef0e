"""One GPU's step under FSDP2 and torch.distributed.pipelining with several model chunks per GPU (torchtitan 0.3.0's
interleaved 1F1B), in time order: what each event holds beside its op's own tensors.

torch's pipeline stage runs each chunk's backwards but its last with `set_reshard_after_backward(False)` and
`set_requires_gradient_sync(False)` (torch/distributed/pipelining/stage.py:844-847), and torchtitan turns
reshard-after-forward off under PP (torchtitan/distributed/fsdp.py:54-74). So, chunk by chunk:

* its parameters are gathered (`weight_bytes` each) from its first forward until its last backward, which reshards
  them (drawn from the first forward on, whole: what the single-stage model draws, `timeline.stage_events`);
* its gradients accumulate unsharded in the reduce dtype (`grad_bytes` each; _fsdp_param.py:802-821) from its first
  backward, which holds those of the parts after the running one (the backward runs the chunk's layers last to
  first), until its last backward; a layer's own gradient in the parameters' dtype is alive while its backward runs;
* its last backward reduce-scatters them: from then on the chunk holds its sharded gradients (`sharded`), until the
  optimizer step (drawn from the end of that backward; the moment of the reduce-scatter itself is the last
  backward's, as in the single-stage model).

The other micro-batches' saved tensors are counted per chunk, as `timeline.step_series` counts them, and so are the
stage outputs torch keeps for each micro-batch between its forward and the end of its backward
(`profiles.pipeline_stage_output`: the logits on the model's last stage): those of the micro-batches in flight, and
in a backward the running micro-batch's own (`with_stage_outputs` for the single-stage candidate events).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import sympy

from symmem.accounting.recompute import Policy
from symmem.accounting.timeline import (
    GATHERED,
    SAVED_CURRENT,
    SAVED_EARLIER,
    SAVED_OTHER,
    STAGE_OUTPUTS,
    STASH,
    UNREDUCED,
    Amount,
    Event,
    _layer_weights,
    gathered_bytes,
    param_dtype_bytes,
    part_timeline,
)
from symmem.graph import FP32, AxisSizes
from symmem.model import Part
from symmem.rules import RuleSet


def pipelined_series(chunks: list[tuple[Part, ...]], rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                     e_tok: sympy.Expr, order: list[tuple[str, int, int]], weight_bytes: int, grad_bytes: int,
                     sharded: list[int], outputs: list[int],
                     backward_extra: tuple[Amount, ...] = (),
                     stash: list[list[sympy.Expr] | None] | None = None) -> list[Event]:
    """Every event of one step on one GPU holding `chunks` (each its parts, in chunk order), in the time order of
    `order` ((phase, micro-batch, chunk), "F", "B" or "W": `Schedule.order` with torch's runtime); `sharded`: each
    chunk's sharded gradients in bytes; `outputs`: each chunk's output of one micro-batch in bytes. The last event is
    the optimizer step, holding every chunk's sharded gradients.

    `stash`: zero bubble (`zero_bubble_series`): per chunk, per part, what one copy's input backward keeps until the
    weight backward; None for a chunk whose "W" runs the whole backward (the model's first stage)."""
    if stash is not None:
        return zero_bubble_series(chunks, rules, policy, axes, act_bytes, e_tok, order, weight_bytes, grad_bytes,
                                  sharded, outputs, backward_extra, stash)
    timelines, per_mb, layer, whole, whole_gathered = _chunk_amounts(chunks, rules, policy, axes, act_bytes, e_tok,
                                                                      weight_bytes)
    runs = [sum(1 for ph, _, c in order if ph == "F" and c == k) for k in range(len(chunks))]
    forwards = [0] * len(chunks)
    backwards = [0] * len(chunks)
    held = [0] * len(chunks)
    named = len(chunks) > 1
    series: list[Event] = []

    def states(c: int) -> list[Amount]:
        """What the chunks hold while chunk `c` runs (it gathered, whatever its count)."""
        gathered = sympy.Add(*[whole_gathered[k] for k in range(len(chunks))
                               if (forwards[k] or k == c) and backwards[k] < runs[k]])
        accumulated = sympy.Add(*[whole[k] for k in range(len(chunks)) if 0 < backwards[k] < runs[k]])
        done = sum(sharded[k] for k in range(len(chunks)) if backwards[k] == runs[k])
        out = [Amount(GATHERED, "the chunks' parameters (kept gathered under PP)", gathered)]
        if accumulated != 0:
            out.append(Amount(UNREDUCED, "the gradients of the chunks run backward, accumulated unsharded",
                              grad_bytes * accumulated))
        if done:
            out.append(Amount(UNREDUCED, "the sharded gradients of the chunks done", sympy.Integer(done)))
        return out

    def others(running: int | None = None) -> list[Amount]:
        """The saved tensors of the micro-batches in flight but the running one, and their stage outputs (with the
        running backward's, of chunk `running`)."""
        kept = sum(n * outputs[k] for k, n in enumerate(held)) + (outputs[running] if running is not None else 0)
        return ([Amount(SAVED_OTHER, f"{n} x saved per micro-batch" + (f" of chunk {k}" if named else ""),
                        n * per_mb[k]) for k, n in enumerate(held) if n]
                + ([Amount(STAGE_OUTPUTS, "the stage outputs of the micro-batches in flight (fwd_cache)",
                           sympy.Integer(kept))] if kept else []))

    for phase, mb_index, c in order:
        parts, tls = chunks[c], timelines[c]
        mb = f"micro-batch {mb_index}" + (f", chunk {c}" if named else "")
        if phase == "F":
            series += _forward_events(parts, tls, others() + states(c), mb)
            forwards[c] += 1
            held[c] += 1
            continue
        held[c] -= 1
        base = others(c) + states(c)
        first = backwards[c] == 0

        def around(later, earlier, base=base, first=first):
            """`later`: elements of the parts (and copies) whose backward of this micro-batch is done."""
            acc = [Amount(UNREDUCED, "the gradients of the parts after it, accumulated unsharded", grad_bytes * later)
                   ] if first and later != 0 else []
            return base + [earlier] + acc

        series += _backward_events(parts, tls, per_mb[c], layer[c], mb, around, param_dtype_bytes(weight_bytes),
                                   backward_extra)
        backwards[c] += 1
    series.append(Event("optimizer step", "", "step",
                        (Amount(UNREDUCED, "the sharded gradients (the last micro-batches' reduce-scatters)",
                                sympy.Integer(sum(sharded))),)))
    return series


def with_stage_outputs(events: list[Event], in_flight: Fraction, one: int) -> list[Event]:
    """A single-stage GPU's candidate events (`timeline.stage_events`, the running micro-batch the last of
    `in_flight`) with the stage outputs torch keeps, `one` bytes a micro-batch: the other micro-batches' at every
    event but the optimizer step, and in a backward the running one's too."""
    out = []
    for ev in events[:-1]:
        n = int(in_flight) - (ev.phase != "backward")
        kept = (Amount(STAGE_OUTPUTS, f"{n} x the stage's output (fwd_cache)", sympy.Integer(n * one)),) if n else ()
        out.append(Event(ev.phase, ev.part, ev.op, ev.amounts + kept))
    return out + list(events[-1:])


def zero_bubble_series(chunks: list[tuple[Part, ...]], rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                       e_tok: sympy.Expr, order: list[tuple[str, int, int]], weight_bytes: int, grad_bytes: int,
                       sharded: list[int], outputs: list[int], backward_extra: tuple[Amount, ...],
                       stash: list[list[sympy.Expr] | None]) -> list[Event]:
    """`pipelined_series` under torch's interleaved zero bubble (torchtitan's InterleavedZeroBubble), measured on the
    CPU (tests/validate/test_fsdp2_pipeline.py):

    * an input backward ("B") runs `autograd.grad(..., retain_graph=True)` for the stage inputs alone
      (torch/distributed/pipelining/_backward.py:177-279): the micro-batch's saved tensors and its stage output stay
      until its weight backward ("W", :281-340), and it keeps the gradient at each weight path's entry
      (`stash[c][part]` a copy);
    * FSDP2's post-backward fires in the input backward, unit by unit as it passes each block's input, before any
      weight gradient exists: it upcasts what the last "W" left on the unsharded parameters (BF16, `weight_bytes`
      each) into the FP32 accumulation (`grad_bytes`; _fsdp_param.py:802-821) and frees it; a "W" leaves BF16
      gradients again, so a chunk holds both between a "W" that follows an upcast and its next "B";
    * a chunk's last "W" reduce-scatters and reshards it, as the last backward of 1F1B does;
    * the chunk holding the model's first stage (`stash[c]` None) has no input gradient to take first: its "B" does
      nothing and its "W" runs the whole backward (pipelining/stage.py:1090-1104), as `pipelined_series`' "B";
    * DualPipeV's whole backwards ("A") are 1F1B's, their post-backward accumulating in FP32 what they make and any
      BF16 gradients a "W" before left."""
    timelines, per_mb, layer, whole, whole_gathered = _chunk_amounts(chunks, rules, policy, axes, act_bytes, e_tok,
                                                                      weight_bytes)
    stash_mb = [None if st is None else sympy.Add(*[p.count * x for p, x in zip(parts, st, strict=True)])
                for parts, st in zip(chunks, stash, strict=True)]
    # what an input backward frees at once: the saved tensors of the ops after the chunk's last weight (the loss's,
    # on the model's last stage), whose nodes nothing holds once the stage output is detached (_backward.py:267-269)
    freed = [sympy.Integer(0) if st is None else above_last_weight(parts[-1], rules, policy, axes, act_bytes, e_tok)
             for parts, st in zip(chunks, stash, strict=True)]
    pd = param_dtype_bytes(weight_bytes)
    n = len(chunks)
    runs = [sum(1 for ph, _, c in order if ph == "F" and c == k) for k in range(n)]
    forwards, weights, held, pending = [0] * n, [0] * n, [0] * n, [0] * n
    bf16, fp32 = [False] * n, [False] * n  # the BF16 gradients a "W" left; the FP32 accumulation (non-first chunks)
    series: list[Event] = []

    def states(c: int, extra_bf16: sympy.Expr | int = 0, fp32_of: dict | None = None) -> list[Amount]:
        """What the chunks hold while chunk `c` runs; `extra_bf16`: elements of BF16 gradients beside those of the
        chunks a "W" left them on; `fp32_of`: chunk -> the elements whose FP32 accumulation exists, where it is not
        all or none."""
        live = [k for k in range(n) if (forwards[k] or k == c) and weights[k] < runs[k]]
        out = [Amount(GATHERED, "the chunks' parameters (kept gathered under PP)",
                      sympy.Add(*[whole_gathered[k] for k in live]))]
        acc = sympy.Add(*[(fp32_of or {}).get(k, whole[k] if fp32[k] else 0) for k in live])
        if acc != 0:
            out.append(Amount(UNREDUCED, "the chunks' gradients, accumulated unsharded (FP32)", grad_bytes * acc))
        left = sympy.Add(*[whole[k] for k in live if bf16[k]]) + extra_bf16
        if left != 0:
            out.append(Amount(UNREDUCED, "the gradients weight backwards left on the unsharded parameters",
                              pd * left))
        done = sum(sharded[k] for k in range(n) if weights[k] == runs[k])
        if done:
            out.append(Amount(UNREDUCED, "the sharded gradients of the chunks done", sympy.Integer(done)))
        return out

    def others() -> list[Amount]:
        """The saved tensors and stage outputs of every micro-batch from its forward to its weight backward, and the
        gradients the input backwards keep for theirs."""
        kept = sum((k + pending[c]) * outputs[c] for c, k in enumerate(held))
        return ([Amount(SAVED_OTHER, f"{k} x saved per micro-batch of chunk {c}", k * per_mb[c])
                 for c, k in enumerate(held) if k]
                + [Amount(SAVED_OTHER, f"{k} x saved per micro-batch of chunk {c}, input gradients taken",
                          k * (per_mb[c] - freed[c])) for c, k in enumerate(pending) if k]
                + [Amount(STASH, f"{k} x weight-path gradients kept by input backwards of chunk {c}",
                          k * stash_mb[c]) for c, k in enumerate(pending) if k]
                + ([Amount(STAGE_OUTPUTS, "the stage outputs of the micro-batches in flight (fwd_cache, then the "
                                          "backward state)", sympy.Integer(kept))] if kept else []))

    for phase, mb_index, c in order:
        parts, tls = chunks[c], timelines[c]
        mb = f"micro-batch {mb_index}, chunk {c}"
        if phase == "F":
            series += _forward_events(parts, tls, others() + states(c), mb)
            forwards[c] += 1
            held[c] += 1
            continue
        first_stage = stash[c] is None
        if phase == "B" and first_stage:
            continue  # nothing to take: the "W" runs the whole backward
        if phase == "B":
            # the input backward, parts last to first: the micro-batch's saved tensors all stay (in `others`), the
            # ops' own transients and activation gradients come and go; the weight-path gradients gather; each
            # unit passed has its BF16 gradients upcast into the FP32 accumulation
            upcast = bf16[c]
            kept = sympy.Integer(0)
            passed = sympy.Integer(0)  # elements of the parts and copies whose input backward is done
            for i in range(len(parts) - 1, -1, -1):
                p, tl = parts[i], tls[i]
                for _copy in range(p.count):
                    if upcast:  # the units passed: FP32 (made now, or added to); the others still BF16 too
                        bf16[c] = False
                        extra, fp = whole[c] - passed, {c: whole[c] if fp32[c] else passed}
                    else:
                        extra, fp = sympy.Integer(0), None
                    base = others() + states(c, extra, fp)
                    if kept != 0:
                        base.append(Amount(STASH, "weight-path gradients, this micro-batch", kept))
                    series += [Event("backward", f"{p.name} ({mb}, input gradients)", ev.op,
                                     tuple(base) + tuple(a for a in ev.alive if a.component != SAVED_CURRENT)
                                     + tuple(backward_extra))
                               for ev in tl.events if ev.phase == "backward"]
                    kept += stash[c][i]
                    passed += layer[c][i]
                    if upcast:
                        bf16[c] = True
            if upcast:
                bf16[c], fp32[c] = False, True
            held[c] -= 1
            pending[c] += 1
            continue
        if phase == "A" or first_stage:
            # a whole backward ("A", DualPipeV's; the first stage's "W"), parts last to first, as 1F1B's: the
            # micro-batch's saved tensors go as it passes them, and each unit's post-backward accumulates its
            # gradients in FP32 (with any BF16 ones a "W" before left)
            upcast, bf16[c] = bf16[c], False
            held[c] -= 1  # this micro-batch's saved tensors: counted part by part below

            def around(passed, earlier, c=c, upcast=upcast):
                """`passed`: elements of the parts (and copies) whose backward is done: their units' FP32."""
                left = whole[c] - passed if upcast else sympy.Integer(0)
                return others() + states(c, left, {c: whole[c] if fp32[c] else passed}) + [earlier]

            series += _backward_events(parts, tls, per_mb[c], layer[c], mb, around, pd, backward_extra)
            fp32[c] = True
        else:
            # "W": the weight gradients of the micro-batch's parts, from what its input backward kept (its saved
            # tensors and the weight-path gradients): held until the end of the "W", when the graph goes; the BF16
            # gradients are made on the unsharded parameters (the addition's transient, one weight's gradient
            # where a "W" before left BF16 ones, left out)
            bf16[c] = True
            series.append(Event("backward", f"weights ({mb})", "weight gradients", tuple(others() + states(c))))
            pending[c] -= 1
        weights[c] += 1
        if weights[c] == runs[c]:  # the last: reduce-scattered, resharded
            bf16[c] = fp32[c] = False
    series.append(Event("optimizer step", "", "step",
                        (Amount(UNREDUCED, "the sharded gradients (the last micro-batches' reduce-scatters)",
                                sympy.Integer(sum(sharded))),)))
    return series


def _chunk_amounts(chunks, rules, policy, axes, act_bytes, e_tok, weight_bytes):
    """Per chunk: its parts' timelines, the bytes one micro-batch saves, each part's weights (elements of a copy),
    all its weights, and what it takes gathered."""
    timelines = [[part_timeline(p.flow, rules, policy, axes, act_bytes, e_tok) for p in parts] for parts in chunks]
    per_mb = [sympy.Add(*[p.count * tl.saved for p, tl in zip(parts, tls, strict=True)])
              for parts, tls in zip(chunks, timelines, strict=True)]
    layer = [[_layer_weights(p, axes) for p in parts] for parts in chunks]
    whole = [sympy.Add(*[p.count * w for p, w in zip(parts, ws, strict=True)]) for parts, ws in zip(chunks, layer,
                                                                                                    strict=True)]
    whole_gathered = [sympy.Add(*[p.count * gathered_bytes(weight_bytes, p, axes) for p in parts]) for parts in chunks]
    return timelines, per_mb, layer, whole, whole_gathered


def _forward_events(parts, tls, base: list[Amount], mb: str) -> list[Event]:
    """A chunk's forward events, its parts in order, each copy with the saved tensors of those before it."""
    out: list[Event] = []
    earlier = sympy.Integer(0)
    for p, tl in zip(parts, tls, strict=True):
        for copy in range(p.count):
            common = base + [Amount(SAVED_EARLIER, "earlier parts and copies", earlier + copy * tl.saved)]
            out += [Event("forward", f"{p.name} ({mb})", ev.op, tuple(common) + ev.alive)
                    for ev in tl.events if ev.phase == "forward"]
        earlier += p.count * tl.saved
    return out


def _backward_events(parts, tls, per_mb: sympy.Expr, layer: list, mb: str, around, pd: int,
                     backward_extra: tuple[Amount, ...]) -> list[Event]:
    """A chunk's whole backward, parts and copies last to first: the saved tensors of those before the running one
    alive, a layer's own gradients in the parameters' dtype (`pd` bytes) while its backward runs; `around(done,
    earlier)`: what else is alive, given the elements of the parts and copies done and the earlier saved tensors'
    amount."""
    out: list[Event] = []
    before = per_mb
    done = sympy.Integer(0)
    for i in range(len(parts) - 1, -1, -1):
        p, tl = parts[i], tls[i]
        before -= p.count * tl.saved
        for copy in range(p.count - 1, -1, -1):
            common = around(done, Amount(SAVED_EARLIER, "earlier parts and copies", before + copy * tl.saved))
            extra = list(backward_extra)
            if p.is_layers:
                extra.append(Amount(UNREDUCED, "the layer's gradients", pd * layer[i]))
            out += [Event("backward", f"{p.name} ({mb})", ev.op, tuple(common) + ev.alive + tuple(extra))
                    for ev in tl.events if ev.phase == "backward"]
            done += layer[i]
    return out


def above_last_weight(part: Part, rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                      e_tok: sympy.Expr) -> sympy.Expr:
    """One copy of `part`'s saved bytes kept by the ops after its last op with a weight (the loss's in the head)."""
    from symmem.accounting.activations import kept_tensors, tensor_bytes

    names = [op.name for op in part.flow.ops]
    last = max((i for i, op in enumerate(part.flow.ops) if op.weights), default=len(names))
    return sympy.Add(*[tensor_bytes(k.tensor, axes, act_bytes, e_tok) for k in kept_tensors(part.flow, rules, policy)
                       if k.op in names and names.index(k.op) > last])


def weight_path_gradients(part, rules: RuleSet, axes, act_bytes: int):
    """What torch's zero-bubble input backward keeps per copy of `part` until its weight backward: the gradient at
    each weight path's entry (torch/distributed/pipelining/_backward.py:218-244, `param_group["grads"]`), the
    gradient of the output of each op with a weight: a linear's in its output's dtype, a norm's weight multiply's
    in FP32 under ATen's composite rms_norm (the CPU: it multiplies the FP32 normalized input by the weight,
    measured: tests/validate/test_fsdp2_pipeline.py), in the output's dtype under the fused kernel (a GPU: one
    node). Embeddings take no input gradient (the model's first stage runs its whole backward at the weight
    backward)."""
    from symmem.accounting.activations import tensor_bytes

    total = sympy.Integer(0)
    for op in part.flow.ops:
        if not op.weights or op.weights[0].shared_with is not None or op.kind == "embedding":
            continue
        out = part.flow.tensors[op.outputs[0]]
        if op.kind == "rmsnorm" and rules.name.startswith("torchtitan-cpu"):
            out = dataclasses.replace(out, dtype=FP32)  # (the rule set torchtitan-cpu: symmem/rules/torchtitan.py)
        total += tensor_bytes(out, axes, act_bytes, sympy.Integer(0))
    return total
