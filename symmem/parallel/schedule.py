"""Pipeline schedules: how many micro-batches of activations stage i of PP holds at its peak, with M micro-batches.

These multiply the per-micro-batch activations of a stage; every per-GPU figure names its schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from symmem._numbers import MAX_CHUNKS, MAX_MICROBATCHES
from symmem.errors import SymmemError
from symmem.parallel.orders import (
    dualpipe_order,
    torch_dualpipev_order,
    torch_interleaved_order,
    torch_zbv_order,
    torch_zero_bubble_order,
    zb_h1_order,
)

SCHEDULES = ("gpipe", "1f1b", "zb1p", "interleaved", "dualpipe")
# torch.distributed.pipelining's zero bubbles (torchtitan's InterleavedZeroBubble, ZBVZeroBubble, DualPipeV), as
# symmem spells them: each is interleaved with a `Schedule.torch_zb` of its name
TORCH_ZERO_BUBBLES = ("interleaved-zb", "zbv", "dualpipev")
CHUNKED = ("interleaved", "interleaved-zb")  # the spellings that take :V (virtual stages per GPU)
# whose pipeline runtime orders a schedule: Megatron's, or torch.distributed.pipelining's (torchtitan's); they differ in
# interleaved 1F1B alone (`Schedule.order`)
RUNTIMES = ("megatron", "torch")
# schedules whose stage peak is walked in their real order, not counted from micro-batches in flight
# (symmem.accounting.analysis.walked_schedule; the compiled sweep leaves them to symmem.sweep.exact)
WALKED = ("zb1p", "dualpipe")


@dataclass(frozen=True)
class Schedule:
    """The pipeline schedule, which says how many micro-batches each stage keeps in flight: `gpipe`, `1f1b`,
    `zb1p`, `interleaved` (with `chunks` virtual stages per GPU) or `dualpipe`."""

    name: str = "1f1b"
    chunks: int = 1  # virtual stages per GPU, for "interleaved"
    # interleaved only, one of TORCH_ZERO_BUBBLES or "": torch.distributed.pipelining's zero bubble, its backwards
    # taking the input gradients, a "W" the weights' later: "interleaved-zb" (torchtitan's InterleavedZeroBubble,
    # `torch_zero_bubble_order`), "zbv" (ZBVZeroBubble: two stages per GPU, r and 2·PP - 1 - r, the "v" style,
    # `torch_zbv_order`) or "dualpipev" (DualPipeV: the "v" style, forwards overlapped with whole backwards,
    # `torch_dualpipev_order`)
    torch_zb: str = ""

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise SymmemError(f"schedule = {self.name!r}: unknown schedule; known: {', '.join(SCHEDULES)}")
        if isinstance(self.chunks, bool) or not isinstance(self.chunks, int) or not 1 <= self.chunks <= MAX_CHUNKS:
            raise SymmemError(f"chunks = {self.chunks!r}: must be a positive integer up to {MAX_CHUNKS:,}")
        if self.name == "interleaved" and self.chunks < 2:
            raise SymmemError(f"chunks = {self.chunks}: interleaved 1F1B needs at least 2 virtual stages per GPU")
        if self.torch_zb not in ("", *TORCH_ZERO_BUBBLES):
            raise SymmemError(f"torch_zb = {self.torch_zb!r}: one of {', '.join(TORCH_ZERO_BUBBLES)}")
        if self.v_shape and self.chunks != 2:
            raise SymmemError(f"chunks = {self.chunks}: {self.torch_zb} runs two stages per GPU")
        if self.zero_bubble and self.name != "interleaved":
            raise SymmemError(f"schedule = {self.name!r}: zero bubble is torch's interleaved schedule's "
                              "(interleaved-zb:V); Megatron's is zb1p")

    @property
    def zero_bubble(self) -> bool:
        return bool(self.torch_zb)

    @property
    def v_shape(self) -> bool:
        """Two stages per GPU, r and 2·PP - 1 - r (torchtitan's "v" style)."""
        return self.torch_zb in ("zbv", "dualpipev")

    @property
    def dualpipe_v(self) -> bool:
        return self.torch_zb == "dualpipev"

    def check(self, pp: int, m: int, runtime: str = "megatron") -> None:
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_MICROBATCHES:
            raise SymmemError(f"microbatches = {m!r}: must be a positive integer up to {MAX_MICROBATCHES:,}")
        if runtime not in RUNTIMES:
            raise SymmemError(f"schedule runtime = {runtime!r}: one of {', '.join(RUNTIMES)}")
        if self.torch_zb and pp < 2:  # one stage has no pipeline to schedule: not answered as no pipeline at all
            raise SymmemError(f"schedule {self.label}: a pipeline schedule needs pipeline stages; give PP 2 or more "
                              "(--pp)")
        if self.zero_bubble and runtime != "torch":
            raise SymmemError(f"schedule {self.label}: torch.distributed.pipelining's (torchtitan's), run under a "
                              "torchtitan profile (--profile torchtitan); Megatron's zero bubble is zb1p")
        if self.dualpipe_v:
            if m < 2 * pp:  # torch/distributed/pipelining/schedules.py:3430-3434
                raise SymmemError(f"microbatches = {m}: DualPipeV needs at least as many micro-batches as stages, "
                                  f"2·PP = {2 * pp} (--microbatches, or --global-batch-size; the default is PP)")
        elif self.v_shape:
            pass  # torch makes ZBV's order for max(2·PP - 1, M) micro-batches and drops those beyond M: any M
        elif self.name == "interleaved" and runtime == "torch":
            rounds = max(1, m // pp)
            if m % rounds:
                raise SymmemError(f"microbatches = {m}: torch's interleaved 1F1B needs a multiple of its {rounds} "
                                  "rounds (max(1, M // PP); torch/distributed/pipelining/schedules.py:2935-2942)")
        elif self.name == "interleaved" and (m < pp or m % pp):
            raise SymmemError(f"microbatches = {m}: interleaved 1F1B needs a multiple of PP = {pp}")
        if self.name == "dualpipe":
            if pp % 2:
                raise SymmemError(f"pp = {pp}: DualPipe needs an even number of stages")
            # deepseek-ai/DualPipe@3da1bbe dualpipe/dualpipe.py:333: num_chunks % 2 == 0 and num_chunks >=
            # num_ranks * 2
            if m < 2 * pp or m % 2:
                raise SymmemError(f"microbatches = {m}: DualPipe needs an even M >= 2·PP = {2 * pp} "
                                  "(deepseek-ai/DualPipe asserts it)")

    def in_flight(self, stage: int, pp: int, m: int, runtime: str = "megatron") -> Fraction:
        """Micro-batches of the whole stage's activations held at stage `stage`'s peak (`runtime`: whose
        interleaved 1F1B, Megatron's or torch.distributed.pipelining's, `order`)."""
        self.check(pp, m, runtime)
        if self.name == "interleaved" and runtime == "torch":  # the most chunk forwards held, in whole stages
            held = most = 0
            # (zero bubble: a micro-batch's saved tensors stay from its forward to its weight backward)
            frees = ("W", "A") if self.zero_bubble else ("B",)  # ("A": DualPipeV's whole backward)
            # the most is reached within the steady state's first repeats (`walk_microbatches`)
            for phase, _mb, _c in self.order(stage, pp, self.walk_microbatches(pp, m), runtime):
                held += 1 if phase == "F" else -1 if phase in frees else 0
                most = max(most, held)
            return Fraction(most, self.chunks)
        if self.name == "gpipe":
            return Fraction(m)
        if self.name in ("1f1b", "zb1p"):
            # 1F1B warms up with PP - i - 1 forwards, then one more before its first backward.
            return Fraction(min(m, pp - stage))
        if self.name == "interleaved":
            # Megatron: (PP - i - 1)·2 + (v - 1)·PP warm-up chunk forwards, plus one; each chunk is 1/v of a stage.
            # With M = PP Megatron runs every forward first (num_warmup_microbatches = all M·v chunks).
            v = self.chunks
            if m == pp:
                return Fraction(m)
            return Fraction(min(m * v, (pp - stage - 1) * 2 + (v - 1) * pp + 1), v)
        # DualPipe (DeepSeek-V3 report, Table 2): PP + 1 micro-batches of activations on every device (M >= 2·PP)
        return Fraction(pp + 1)

    # torch's interleaved 1F1B runs R = max(1, M // PP) rounds of M / R micro-batches: its warm-up and cool-down span
    # fewer than V + 1 rounds, and between them each round repeats the last, with the same micro-batches held per
    # chunk and every chunk gathered and accumulated; so V + 2 rounds of the same size reach every state the whole
    # step does. torch's V-shaped schedules (ZBVZeroBubble, DualPipeV) run each rank's two chunks in a warm-up of
    # fewer than 2 PP forwards per chunk, a steady state in which every step repeats the one before with the next
    # micro-batch (the same micro-batches in flight per chunk, the same gradients left by the weight backwards), and
    # a cool-down of fewer than 2 PP backwards; so V_WALK_PP x PP + V_WALK_EXTRA micro-batches reach every state.
    # tests/test_torchtitan_pipeline.py holds both walks' peaks equal to the whole step's for every small M.
    V_WALK_PP, V_WALK_EXTRA = 4, 4

    def walk_microbatches(self, pp: int, m: int) -> int:
        """The micro-batches a walk of torch's order for this schedule takes to reach every state of the whole step
        of M (its cost then no longer grows with M); M itself for the schedules not walked in torch's order."""
        if self.v_shape:
            return min(m, self.V_WALK_PP * pp + self.V_WALK_EXTRA)
        if self.name == "interleaved":
            rounds = max(1, m // pp)
            return m // rounds * min(rounds, self.chunks + 2)
        return m

    def default_microbatches(self, pp: int) -> int:
        """M when none is given: PP (the paper's case), 2·PP for DualPipe, the least it runs with."""
        return 2 * pp if self.name == "dualpipe" else pp

    def order(self, stage: int, pp: int, m: int, runtime: str = "megatron") -> list[tuple[str, int, int]]:
        """The step of pipeline stage `stage` in time order: ("F", "B" or "W", micro-batch, chunk).

        * `gpipe`: every forward, then every backward;
        * `1f1b`: PP - stage - 1 warm-up forwards (at most M), then one forward and one backward, then the
          cool-down backwards (Megatron's forward_backward_pipelining_without_interleaving);
        * `interleaved`: Megatron's interleaved 1F1B over M·v chunk passes (forward_backward_pipelining_with_
          interleaving): (PP - stage - 1)·2 + (v - 1)·PP warm-up forwards (all M·v when M = PP), then one forward
          and one backward; the k-th forward runs chunk (k // PP) mod v of micro-batch (k // (PP·v))·PP + k mod PP,
          the k-th backward chunk v - 1 - (k // PP) mod v of the same micro-batch; with `runtime` "torch", as
          torch.distributed.pipelining runs it (torchtitan: `symmem.parallel.orders.torch_interleaved_order`);
        * `zb1p`: ZB-H1, with "W" events: the weight gradients of a backward whose "B" computed only the input
          gradients (symmem.parallel.orders);
        * `dualpipe`: DualPipe as deepseek-ai/DualPipe runs it, chunk 0 the stage's own and chunk 1 stage
          PP - 1 - stage run the other way, with "W" events (symmem.parallel.orders; needs M >= 2·PP).
        """
        self.check(pp, m, runtime)
        if self.name == "gpipe":
            return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
        if self.dualpipe_v:
            return torch_dualpipev_order(stage, pp, m)
        if self.v_shape:
            return torch_zbv_order(stage, pp, m)
        if self.zero_bubble:
            return torch_zero_bubble_order(stage, pp, self.chunks, m)
        if self.name == "interleaved" and runtime == "torch":
            return torch_interleaved_order(stage, pp, self.chunks, m)
        if self.name == "interleaved":
            v = self.chunks
            total = m * v
            warm = total if m == pp else min(total, (pp - stage - 1) * 2 + (v - 1) * pp)

            def at(k: int, forward: bool) -> tuple[str, int, int]:
                group = (k // pp) % v
                mb = (k // (pp * v)) * pp + k % pp
                return ("F", mb, group) if forward else ("B", mb, v - 1 - group)

            out = [at(k, True) for k in range(warm)]
            for j in range(total - warm):
                out += [at(warm + j, True), at(j, False)]
            return out + [at(k, False) for k in range(total - warm, total)]
        if self.name == "zb1p":
            return zb_h1_order(stage, pp, m)
        if self.name == "dualpipe":
            return dualpipe_order(stage, pp, m)
        warm = math.ceil(self.in_flight(stage, pp, m)) - 1  # 1F1B
        return ([("F", i, 0) for i in range(warm)]
                + [x for i in range(m - warm) for x in (("F", warm + i, 0), ("B", i, 0))]
                + [("B", i, 0) for i in range(m - warm, m)])

    def held_stages(self, stage: int, pp: int) -> tuple[int, ...]:
        """The pipeline stages whose model states GPU `stage` holds: its own, and under DualPipe also stage
        PP - 1 - i, the chunk it runs for the micro-batches going the other way (deepseek-ai/DualPipe@3da1bbe
        examples/example_dualpipe.py builds `full_modules[rank]` and `full_modules[pp - 1 - rank]`; the DeepSeek-V3
        report, section 3.2.1: two copies of the model parameters)."""
        return (stage, pp - 1 - stage) if self.name == "dualpipe" and pp > 1 else (stage,)

    def check_layout(self, layers_per_stage: tuple[int, ...]) -> None:
        """Interleaving splits each GPU's layers into v chunks: every stage's layer count must divide by v."""
        if self.name != "interleaved":
            return
        for i, n in enumerate(layers_per_stage):
            if n % self.chunks:
                raise SymmemError(f"chunks = {self.chunks}: stage {i} has {n} layers, which interleaved 1F1B "
                                  f"cannot split into {self.chunks} chunks; give a layout whose stages divide")

    @classmethod
    def named(cls, name: str, chunks: int | None = None) -> Schedule:
        """The schedule symmem spells `name` ("1f1b", "interleaved", "interleaved-zb", "zbv", ...), with `chunks`
        virtual stages per GPU (default: 2 where it interleaves, else 1; the "v" style always 2)."""
        if name in TORCH_ZERO_BUBBLES:
            v = 2 if name != "interleaved-zb" or chunks is None else chunks
            return cls("interleaved", v, torch_zb=name)
        return cls(name, chunks if chunks is not None else 2 if name == "interleaved" else 1)

    @classmethod
    def from_label(cls, text: str) -> Schedule:
        """The schedule a sweep record names (`spelled`): "1f1b", "interleaved:V", "interleaved-zb:V", "zbv", ..."""
        name, _, v = text.partition(":")
        return cls.named(name, int(v) if v else None)

    @property
    def spelled(self) -> str:
        """How symmem's flags spell it (`from_label` reads it back)."""
        if self.v_shape:
            return self.torch_zb
        if self.name == "interleaved":
            return f"{self.torch_zb or 'interleaved'}:{self.chunks}"
        return self.name

    @property
    def label(self) -> str:
        if self.dualpipe_v:
            return "DualPipeV"
        if self.v_shape:
            return "zero bubble V"
        if self.zero_bubble:
            return f"interleaved zero bubble (v={self.chunks})"
        return f"interleaved 1F1B (v={self.chunks})" if self.name == "interleaved" else {
            "gpipe": "GPipe", "1f1b": "1F1B", "zb1p": "ZB-1P", "dualpipe": "DualPipe"}[self.name]
