"""The per-rank order of the two schedules that split the backward, ZB-H1 and DualPipe, and of interleaved 1F1B as
torch.distributed.pipelining runs it (`torch_interleaved_order`).

Events are (phase, micro-batch, chunk). "F" is a forward; "B" a backward; "W" the weight gradients of a
backward whose B computed only the input gradients (the micro-batch keeps what its weight gradients read,
the inputs of its weighted ops and their output gradients, from that B until its W). A "B" with no later "W"
of the same (micro-batch, chunk) is a whole backward.

* ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, §2.1 and Figure 3, top): 1F1B with
  the W of stage i delayed by i. On stage i of PP, as the DeepSpeed port runs it with its
  `enable_zbh1_exact_semantics` option (`ZeroBubbleH1Pipeline.steps`, megatron/core/pipeline_parallel/
  deepspeed_zbh1_schedule.py: saforem2/Megatron-DeepSpeed at 40e942a; microsoft/Megatron-DeepSpeed at c84829e has
  the file without the option): PP - i - 1 warm-up forwards; i rounds of F, B; rounds of F, B, W while forwards
  remain; then B, W while backwards remain; then the last i W. Stage 0 runs whole backwards (its B and W
  together), which is 1F1B. A stage holds PP - i micro-batches between F and B, and PP between F and W.
  (Without the option the port runs whole backwards in the steady state and leaves the first i W to the end;
  sail-sg's zb-h1-quick-start branch, 95212f70, is another variant. Both hold the same counts.)
* DualPipe (DeepSeek-V3 report, arXiv 2412.19437, §3.2.1; github.com/deepseek-ai/DualPipe at 3da1bbe,
  dualpipe/dualpipe.py, `DualPipe.step`): rank r holds two chunks, chunk 0 = stage r of the micro-batches fed
  at rank 0 and chunk 1 = stage PP - 1 - r of those fed at rank PP - 1, M/2 micro-batches each way. Its eight
  steps, with h = min(r, PP - 1 - r) and phases swapped on the second half of the ranks, are followed as
  written; an overlapped F&B pair is drawn forward first (the order the repository runs it without an
  overlapped module); W pops the oldest deferred B (its WeightGradStore is a FIFO).
"""

from __future__ import annotations

from symmem.errors import SymmemError

Order = list[tuple[str, int, int]]


def zb_h1_order(stage: int, pp: int, m: int) -> Order:
    out: Order = []
    f = b = w = 0
    for _ in range(pp - stage - 1):  # warm-up forwards
        if f < m:
            out.append(("F", f, 0))
            f += 1
    for _ in range(stage):  # F, B: the W waits
        if f < m:
            out += [("F", f, 0), ("B", b, 0)]
            f, b = f + 1, b + 1
    while f < m:  # F, B, W (stage 0: a whole backward)
        out += [("F", f, 0), ("B", b, 0)] + ([("W", w, 0)] if stage else [])
        f, b, w = f + 1, b + 1, w + 1
    while b < m:  # cool-down
        out += [("B", b, 0)] + ([("W", w, 0)] if stage else [])
        b, w = b + 1, w + 1
    while stage and w < m:
        out.append(("W", w, 0))
        w += 1
    return out


def dualpipe_order(rank: int, pp: int, m: int) -> Order:
    if m < 2 * pp:
        raise SymmemError(f"microbatches = {m}: DualPipe's schedule (deepseek-ai/DualPipe) runs only with M >= "
                          f"2·PP = {2 * pp}; symmem memory gives its in-flight count at smaller M, the timeline "
                          "cannot draw an order that does not exist")
    half_ranks, half_m = pp // 2, m // 2
    h = min(rank, pp - 1 - rank)
    swap = 1 if rank >= half_ranks else 0
    out: Order = []
    nf, nb = [0, 0], [0, 0]
    deferred: list[tuple[int, int]] = []

    def fwd(phase: int) -> None:
        c = phase ^ swap
        out.append(("F", nf[c], c))
        nf[c] += 1

    def bwd(phase: int, zb: bool = False) -> None:
        c = phase ^ swap
        out.append(("B", nb[c], c))
        if zb:
            deferred.append((nb[c], c))
        nb[c] += 1

    def weight() -> None:
        mb, c = deferred.pop(0)
        out.append(("W", mb, c))

    for _ in range((half_ranks - h - 1) * 2):  # step 1: nF0
        fwd(0)
    for _ in range(h + 1):  # step 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(half_ranks - h - 1):  # step 3: nB1W1F1
        bwd(1, zb=True)
        weight()
        fwd(1)
    for _ in range(half_m - pp + h + 1):  # step 4: nF0B1F1B0
        fwd(0)
        bwd(1)
        fwd(1)
        bwd(0)
    for _ in range(half_ranks - h - 1):  # step 5: nB1F1B0
        bwd(1)
        fwd(1)
        bwd(0)
    zb = False
    for i in range(h + 1):  # step 6: nB1B0, the second half with W deferred
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(half_ranks - h - 1):  # step 7: nWB0
        weight()
        bwd(0, zb=True)
    for _ in range(h + 1):  # step 8: nW
        weight()
    return out


def torch_interleaved_order(rank: int, pp: int, v: int, m: int) -> Order:
    """Interleaved 1F1B as torch.distributed.pipelining runs it (torchtitan's `Interleaved1F1B`; torch 2.13.0,
    torch/distributed/pipelining/schedules.py:2891-3004 `ScheduleInterleaved1F1B._calculate_single_rank_operations`,
    :2735-2870 `_get_1f1b_rank_ops`, :2872-2888 `_get_warmup_ops`), its idle slots left out. Rank r runs chunk k
    = stage k·PP + r. With R = max(1, M // PP) rounds of M/R micro-batches (M must divide by R): (v - 1)·M/R +
    2·(PP - 1 - r) warm-up forwards (at most M·v), then one forward and one backward, then the cool-down
    backwards; the k-th forward runs chunk (k // (M/R)) mod v, the k-th backward chunk v - 1 - (k // (M/R)) mod v,
    each chunk its micro-batches in turn. Where PP divides M this is Megatron's order (`Schedule.order`); with
    M = PP Megatron runs every forward first, torch does not."""
    per_round = m // max(1, m // pp)  # (M a multiple of the rounds: `Schedule.check`)
    warm = min((v - 1) * per_round + 2 * (pp - 1 - rank), m * v)
    done_f: dict[int, int] = {}
    done_b: dict[int, int] = {}

    def forward(k: int) -> tuple[str, int, int]:
        c = (k // per_round) % v
        done_f[c] = done_f.get(c, 0) + 1
        return ("F", done_f[c] - 1, c)

    def backward(k: int) -> tuple[str, int, int]:
        c = v - 1 - ((k - warm) // per_round) % v
        done_b[c] = done_b.get(c, 0) + 1
        return ("B", done_b[c] - 1, c)

    out = [forward(k) for k in range(warm)]
    for k in range(warm, m * v):
        out += [forward(k), backward(k)]
    return out + [backward(k) for k in range(m * v, m * v + warm)]


def torch_zero_bubble_order(rank: int, pp: int, v: int, m: int) -> Order:
    """torch.distributed.pipelining's interleaved zero bubble (torchtitan's `InterleavedZeroBubble`; torch 2.13.0,
    torch/distributed/pipelining/schedules.py:3007-3198 `ScheduleInterleavedZeroBubble`, :2735-2870
    `_get_1f1b_rank_ops` with `enable_zero_bubble`, :2872-2888 `_get_warmup_ops` with `multiply_factor=1`), idle
    slots left out (its bubbles only insert them). As torch's interleaved 1F1B (`torch_interleaved_order`) but with
    (v - 1)·M/R + (PP - 1 - r) warm-up forwards; each backward ("B") takes the input gradients only, and once r of
    them have run, each is followed by a weight backward ("W") of the oldest backward still without one; the rest
    of the "W" at the end."""
    per_round = m // max(1, m // pp)
    warm = min((v - 1) * per_round + (pp - 1 - rank), m * v)
    count: dict[tuple[str, int], int] = {}

    def act(phase: str, c: int) -> tuple[str, int, int]:
        count[phase, c] = count.get((phase, c), 0) + 1
        return (phase, count[phase, c] - 1, c)

    def backward_chunk(k: int) -> int:
        return v - 1 - ((k - warm) // per_round) % v

    out = [act("F", (k // per_round) % v) for k in range(warm)]
    backwards: list[int] = []  # the op index of each backward, in order
    weights = 0
    for k in range(warm, m * v + warm):
        if k < m * v:
            out.append(act("F", (k // per_round) % v))
        out.append(act("B", backward_chunk(k)))
        backwards.append(k)
        if k - warm >= rank:
            out.append(act("W", backward_chunk(backwards[weights])))
            weights += 1
    while weights < len(backwards):
        out.append(act("W", backward_chunk(backwards[weights])))
        weights += 1
    return out


def torch_zbv_order(rank: int, pp: int, m: int) -> Order:
    """torch.distributed.pipelining's zero bubble V (torchtitan's `ZBVZeroBubble`; torch 2.13.0,
    torch/distributed/pipelining/schedules.py:3199-3392 `ScheduleZBVZeroBubble._calculate_single_rank_operations`),
    idle slots left out. Rank r runs two stages, chunk 0 = stage r and chunk 1 = stage 2·PP - 1 - r (the "v"
    style): 2·(PP - r) - 1 forwards of chunk 0, r pairs of forwards (chunk 1, chunk 0), PP - r rounds of chunk 1's
    forward, input and weight backwards, then rounds of chunk 0's forward, input and weight backwards and chunk 1's,
    then the cool-down input backwards and the weight backwards left; the schedule is made for
    max(2·PP - 1, M) micro-batches and the actions of those beyond M dropped."""
    n = max(2 * pp - 1, m)
    out: list[tuple[str, int, int]] = []
    f = [0, 0]
    b = [0, 0]

    def add(phase: str, c: int, mb: int) -> None:
        if mb < m:
            out.append((phase, mb, c))

    def forward(c: int) -> None:
        add("F", c, f[c])
        f[c] += 1

    def both(c: int) -> None:  # an input and a weight backward of the same micro-batch
        add("B", c, b[c])
        add("W", c, b[c])
        b[c] += 1

    for _ in range(2 * (pp - rank) - 1):
        forward(0)
    for _ in range(rank):
        forward(1)
        forward(0)
    for _ in range(pp - rank):
        forward(1)
        both(1)
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            forward(0)
        both(0)
        forward(1)
        both(1)
    w = list(b)
    for _ in range(rank):
        for c in (0, 1):
            add("B", c, b[c])
            b[c] += 1
    for _ in range(pp - rank):
        add("B", 0, b[0])
        b[0] += 1
        add("W", 0, w[0])
        w[0] += 1
    for c in (1, 0):
        while w[c] < b[c]:
            add("W", c, w[c])
            w[c] += 1
    return out


def torch_dualpipev_order(rank: int, pp: int, m: int) -> Order:
    """torch.distributed.pipelining's DualPipeV (torchtitan's `DualPipeV`; torch 2.13.0,
    torch/distributed/pipelining/schedules.py:3393-3603 `ScheduleDualPipeV._calculate_single_rank_operations`), in
    time order, each overlapped forward-and-backward as its forward then its backward (the runtime performs the
    sub-actions in turn, :2632-2636). Rank r runs chunk 0 = stage r and chunk 1 = stage 2·PP - 1 - r. Phases: "F",
    "B" (input gradients only), "W" (the weights', of the oldest "B" without one) and "A" (a whole backward); M must
    be at least 2·PP."""
    out: list[tuple[str, int, int]] = []
    fwd = [0, 0]
    bwd = [0, 0]  # the input (and whole) backwards' micro-batch counters
    weights: list[tuple[int, int]] = []  # (chunk, micro-batch) of the "B" waiting for their "W"

    def act(phase: str, c: int) -> None:
        if phase == "F":
            out.append(("F", fwd[c], c))
            fwd[c] += 1
        else:
            out.append((phase, bwd[c], c))
            if phase == "B":
                weights.append((c, bwd[c]))
            bwd[c] += 1

    def weight() -> None:
        if weights:
            c, mb = weights.pop(0)
            out.append(("W", mb, c))

    for _ in range((pp - rank - 1) * 2):
        act("F", 0)
    for _ in range(rank + 1):
        act("F", 0)
        act("F", 1)
    for _ in range(pp - rank - 1):
        act("B", 1)
        weight()
        act("F", 1)
    for _ in range(m - pp * 2 + rank + 1):
        act("F", 0)
        act("A", 1)  # (the first rank of the last: a forward and a backward, not overlapped; the same order)
        act("F", 1)
        act("A", 0)
    for _ in range(pp - rank - 1):
        act("A", 1)
        act("F", 1)
        act("A", 0)
    zb = False
    steps = rank + 1
    for i in range(steps):
        if i == steps // 2 and rank % 2 == 1:
            zb = True
        act("B" if zb else "A", 1)
        if i == steps // 2 and rank % 2 == 0:
            zb = True
        act("B" if zb else "A", 0)
    for _ in range(pp - rank - 1):
        weight()
        act("B" if zb else "A", 0)
    for _ in range(rank + 1):
        weight()
    return out
