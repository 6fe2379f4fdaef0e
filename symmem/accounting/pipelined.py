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

from fractions import Fraction

import sympy

from symmem.accounting.recompute import Policy
from symmem.accounting.timeline import (
    GATHERED,
    SAVED_EARLIER,
    SAVED_OTHER,
    STAGE_OUTPUTS,
    UNREDUCED,
    Amount,
    Event,
    _layer_weights,
    gathered_bytes,
    param_dtype_bytes,
    part_timeline,
)
from symmem.graph import AxisSizes
from symmem.model import Part
from symmem.rules import RuleSet


def pipelined_series(chunks: list[tuple[Part, ...]], rules: RuleSet, policy: Policy, axes: AxisSizes, act_bytes: int,
                     e_tok: sympy.Expr, order: list[tuple[str, int, int]], weight_bytes: int, grad_bytes: int,
                     sharded: list[int], outputs: list[int],
                     backward_extra: tuple[Amount, ...] = ()) -> list[Event]:
    """Every event of one step on one GPU holding `chunks` (each its parts, in chunk order), in the time order of
    `order` ((phase, micro-batch, chunk), "F" or "B": `Schedule.order` with torch's runtime); `sharded`: each chunk's
    sharded gradients in bytes; `outputs`: each chunk's output of one micro-batch in bytes. The last event is the
    optimizer step, holding every chunk's sharded gradients."""
    timelines = [[part_timeline(p.flow, rules, policy, axes, act_bytes, e_tok) for p in parts] for parts in chunks]
    per_mb = [sympy.Add(*[p.count * tl.saved for p, tl in zip(parts, tls, strict=True)])
              for parts, tls in zip(chunks, timelines, strict=True)]
    layer = [[_layer_weights(p, axes) for p in parts] for parts in chunks]
    whole = [sympy.Add(*[p.count * w for p, w in zip(parts, ws, strict=True)]) for parts, ws in zip(chunks, layer,
                                                                                                    strict=True)]
    whole_gathered = [sympy.Add(*[p.count * gathered_bytes(weight_bytes, p, axes) for p in parts]) for parts in chunks]
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
            base = others() + states(c)
            earlier = sympy.Integer(0)
            for p, tl in zip(parts, tls, strict=True):
                for copy in range(p.count):
                    common = base + [Amount(SAVED_EARLIER, "earlier parts and copies", earlier + copy * tl.saved)]
                    series += [Event("forward", f"{p.name} ({mb})", ev.op, tuple(common) + ev.alive)
                               for ev in tl.events if ev.phase == "forward"]
                earlier += p.count * tl.saved
            forwards[c] += 1
            held[c] += 1
            continue
        held[c] -= 1
        base = others(c) + states(c)
        first = backwards[c] == 0
        before = per_mb[c]
        later = sympy.Integer(0)  # elements of the parts (and copies) whose backward of this micro-batch is done
        for i in range(len(parts) - 1, -1, -1):
            p, tl = parts[i], tls[i]
            before -= p.count * tl.saved
            for copy in range(p.count - 1, -1, -1):
                common = base + [Amount(SAVED_EARLIER, "earlier parts and copies", before + copy * tl.saved)]
                if first and later != 0:
                    common.append(Amount(UNREDUCED, "the gradients of the parts after it, accumulated unsharded",
                                         grad_bytes * later))
                extra = list(backward_extra)
                if p.is_layers:
                    extra.append(Amount(UNREDUCED, "the layer's gradients",
                                        param_dtype_bytes(weight_bytes) * layer[c][i]))
                series += [Event("backward", f"{p.name} ({mb})", ev.op, tuple(common) + ev.alive + tuple(extra))
                           for ev in tl.events if ev.phase == "backward"]
                later += layer[c][i]
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
