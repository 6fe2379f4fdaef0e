"""Pipeline layouts: which decoder layers, embedding, head and MTP modules each stage holds.

Four ways to say it: `paper` (ceil(L/PP) layers per stage, the remainder on the last: 61 layers on 16 stages
gives 4, ..., 4, 1), an explicit list of layers per stage, Megatron's first/last-stage counts
(--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers) with the rest spread evenly, and
torchtitan's split (the embedding and the norm with the output projection each weighed as one layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from symmem._cache import hash_once
from symmem.errors import SymmemError

LAYOUT_KINDS = ("paper", "even", "explicit", "megatron", "torchtitan")


@dataclass(frozen=True)
class LayoutSpec:
    """How the decoder layers are spread over the pipeline stages: `paper` (ceil(L/PP) per stage, the remainder on
    the last), `even`, `explicit` (`layers_per_stage`), `megatron` (`first`/`last` stage counts, the rest even) or
    `torchtitan` (`torchtitan_layers`)."""

    kind: str = "paper"
    layers_per_stage: tuple[int, ...] = ()  # for "explicit"
    first: int | None = None  # for "megatron": layers on the first stage
    last: int | None = None  # for "megatron": layers on the last stage

    def __post_init__(self) -> None:
        if self.kind not in LAYOUT_KINDS:
            raise SymmemError(f"layout = {self.kind!r}: unknown layout; known: {', '.join(LAYOUT_KINDS)}")
        # settings of another kind are refused, not ignored
        if self.layers_per_stage and self.kind != "explicit":
            raise SymmemError(f"layout kind = {self.kind!r}: takes no layers_per_stage (given "
                              f"{list(self.layers_per_stage)[:8]}); set kind = \"explicit\" to use them")
        if (self.first is not None or self.last is not None) and self.kind != "megatron":
            raise SymmemError(f"layout kind = {self.kind!r}: takes no first/last stage layer counts (given first = "
                              f"{self.first}, last = {self.last}); set kind = \"megatron\" to use them")


@hash_once
@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its index, its decoder layers and whether it holds the embedding, the final norm and
    head, and how many MTP modules (`Scenario.stages` builds them from the layout)."""

    index: int
    layers: tuple[int, ...]
    embedding: bool
    head: bool
    mtp: int  # MTP modules on this stage (DeepSeek-V3 puts them on the last stage)
    # decoder layers of each model chunk the stage's GPU runs, in chunk order, where they are not an even split
    # (torchtitan's interleaved stages: `build_stages`); empty otherwise
    chunk_layers: tuple[int, ...] = ()


# torchtitan 0.3.0's defaults: the embedding and the final norm with the output projection each weigh one layer
# (`pipeline_parallel_first_stage_less_layers` / `_last_stage_less_layers` = 1, torchtitan/config/configs.py:191-197)
TORCHTITAN_INPUT_WEIGHT = 1
TORCHTITAN_OUTPUT_WEIGHT = 1


def torchtitan_layers(n_layers: int, pp: int, input_weight: int = TORCHTITAN_INPUT_WEIGHT,
                      output_weight: int = TORCHTITAN_OUTPUT_WEIGHT) -> tuple[int, ...]:
    """Decoder layers per stage as torchtitan 0.3.0 splits a language model over `pp` single-stage ranks
    (torchtitan/distributed/pipeline_parallel.py:366-476, `_generate_llm_fqn_per_model_part`): L plus the two
    weights spread evenly, the first `(L + 2) mod PP` stages one more; the first stage gives `input_weight` of its
    share to the embedding, the last `output_weight` to the norm and output. Its errors, said the same way."""
    if pp == 1:
        return (n_layers,)
    effective = n_layers + input_weight + output_weight
    if pp > effective:
        raise SymmemError(f"pp = {pp}: torchtitan's split refuses more stages than the {effective} effective layers "
                          f"({n_layers} layers + {input_weight} for the embedding + {output_weight} for the output)")
    per, extra = divmod(effective, pp)
    if input_weight > per or output_weight > per:
        raise SymmemError(f"pp = {pp}: torchtitan's split gives each stage {per} effective layers, fewer than the "
                          f"embedding's weight {input_weight} or the output's {output_weight} "
                          "(pipeline_parallel.py:421-428); choose a smaller --pp")
    counts, left = [], n_layers
    for i in range(pp):
        share = per + (i < extra) - (input_weight if i == 0 else output_weight if i == pp - 1 else 0)
        take = min(share, left)
        counts.append(take)
        left -= take
    if left:  # never, by the arithmetic above; a bug, not input
        raise AssertionError("torchtitan's split left layers over")
    return tuple(counts)


def layers_per_stage(spec: LayoutSpec, n_layers: int, pp: int) -> tuple[int, ...]:
    if spec.kind == "torchtitan":
        return torchtitan_layers(n_layers, pp)
    if spec.kind == "paper":
        per = -(-n_layers // pp)
        counts = [per] * (pp - 1) + [n_layers - per * (pp - 1)]
        if pp > n_layers:
            raise SymmemError(f"pp = {pp}: more pipeline stages than the model's {n_layers} layers; choose PP at "
                              f"most {n_layers} (--pp)")
        if counts[-1] < 1:
            raise SymmemError(
                f"pp = {pp}: the paper's layout puts ceil({n_layers}/{pp}) = {per} layers on each stage, leaving "
                f"{counts[-1]} for the last; choose another PP (--pp) or give the layers per stage "
                f"(--layers-per-stage, --first-stage-layers/--last-stage-layers)")
        return tuple(counts)
    if spec.kind == "even":
        if n_layers % pp:
            raise SymmemError(f"pp = {pp}: must divide num_hidden_layers = {n_layers} for an even layout")
        return (n_layers // pp,) * pp
    if spec.kind == "explicit":
        counts = tuple(spec.layers_per_stage)
        if len(counts) != pp:
            raise SymmemError(f"layers_per_stage = {list(counts)}: has {len(counts)} stages, PP = {pp}")
        if any((not isinstance(c, int)) or isinstance(c, bool) or c < 0 for c in counts):
            raise SymmemError(f"layers_per_stage = {list(counts)}: each entry must be a non-negative integer")
        if sum(counts) != n_layers:
            raise SymmemError(
                f"layers_per_stage = {list(counts)}: sums to {sum(counts)}, the model has {n_layers} layers")
        return counts
    # megatron
    first = spec.first
    last = spec.last
    for name, v in (("first", first), ("last", last)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise SymmemError(f"layout.{name} = {v!r}: must be a non-negative integer")
    if pp == 1:
        return (n_layers,)
    middle_stages = pp - (first is not None) - (last is not None)
    rest = n_layers - (first or 0) - (last or 0)
    # the flags as the user typed them (a layout from a scenario file names its keys the same way)
    given = " and ".join(f"{flag} = {v}" for flag, v in (("--first-stage-layers", first),
                                                          ("--last-stage-layers", last)) if v is not None)
    if rest < 0:
        ends = ("first and last stages" if first is not None and last is not None
                else "first stage" if first is not None else "last stage")
        raise SymmemError(f"{given}: more layers on the {ends} than the model's {n_layers} layers")
    if middle_stages == 0 and rest != 0:  # PP 2 with both given: no stage between them takes the rest
        raise SymmemError(f"{given}: with PP = {pp} no stage lies between them, so they must add up to the model's "
                          f"{n_layers} layers (they add up to {n_layers - rest})")
    if middle_stages and rest % middle_stages:
        raise SymmemError(f"{given}: the remaining {rest} layers do not spread evenly over the {middle_stages} "
                          f"stages between (PP = {pp})")
    per = rest // middle_stages if middle_stages else 0
    counts = [per] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def build_stages(spec: LayoutSpec, n_layers: int, pp: int, n_mtp: int, chunks: int = 1,
                 style: str = "loop") -> tuple[Stage, ...]:
    """The PP stages. Under torchtitan's layout with `chunks` = v > 1 (a multi-stage schedule: interleaved 1F1B),
    torchtitan splits the layers over PP·v stages (`torchtitan_layers`; v = 2 by default,
    torchtitan/distributed/pipeline_parallel.py:262) and GPU r runs stages r, r + PP, ... (the "loop" style,
    :541-568 `_get_pp_rank_to_stage_indices_mapping`): its layers are theirs, in that order, each chunk's count in
    `Stage.chunk_layers`. With `style` "v" (ZBVZeroBubble, two stages per GPU) GPU r runs stages r and
    2·PP - 1 - r: GPU 0 holds both the embedding and the output."""
    if spec.kind == "torchtitan" and chunks > 1:
        try:
            counts = torchtitan_layers(n_layers, pp * chunks)
        except SymmemError as e:  # said of the two numbers the user gave
            why = str(e).split(": ", 1)[1].replace("choose a smaller --pp", "choose a smaller --pp or V")
            raise SymmemError(f"pp = {pp} x {chunks} stages per rank (interleaved:{chunks}) = {pp * chunks} stages: "
                              f"{why}") from None
        starts = [sum(counts[:k]) for k in range(len(counts))]
        if style == "v":
            ids = [(r, 2 * pp - 1 - r) for r in range(pp)]
            last = 0  # the GPU running the model's last stage
        else:
            ids = [tuple(range(r, pp * chunks, pp)) for r in range(pp)]
            last = pp - 1
        layers = [tuple(i for k in ids[r] for i in range(starts[k], starts[k] + counts[k])) for r in range(pp)]
        return tuple(Stage(r, layers[r], r == 0, r == last, n_mtp if r == last else 0,
                           tuple(counts[k] for k in ids[r])) for r in range(pp))
    counts = layers_per_stage(spec, n_layers, pp)
    stages = []
    start = 0
    for i, c in enumerate(counts):
        stages.append(Stage(i, tuple(range(start, start + c)), i == 0, i == pp - 1, n_mtp if i == pp - 1 else 0))
        start += c
    return tuple(stages)
