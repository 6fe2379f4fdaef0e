"""`symmem html`: one self-contained page that evaluates a scenario's derived closed forms in the browser.

What the page carries is what the compiled sweep evaluates (`symmem.sweep.compile`): for every structural case the
controls can reach (pipeline layout, recomputation policy, precision recipe, context parallelism on or off, TP 1
under a rule set whose workspaces exist only with sequence parallelism), the per-stage polynomials in b, s, t, EP,
ETP, CP (and Megatron's padded vocabulary V) of the parameters per GPU, the saved activations per micro-batch and
every candidate peak event, compiled to JavaScript over BigInt (`page_js`). The page adds what the engine adds
around them, written again in JavaScript and checked against `symmem memory --json` by tests/test_html_page.py:

* model states: `states.state_bytes` (dense over DP·CP, MoE over EDP; ZeRO 1/2/3 shard optimizer, gradients,
  weights);
* micro-batches in flight: `Schedule.in_flight` for GPipe and 1F1B (the schedules the page offers);
* the timeline peak: the model states + the profile's framework buffers + the first largest event
  ceil((k − 1) · saved + own + ZeRO extras) (`timeline.stage_peak`);
* the reserved range: ceil(peak · (1 + fragmentation)) + communication buffers (`timeline.reserved_range`), in
  the same float64 product;
* Megatron's framework buffers (megatron-te): TransformerEngine's and PyTorch's workspaces and the RoPE table per
  arrangement, linear in s (computed by the engine at s = 1, 2 and checked at 3), and the DDP buffers' padding from
  the local parameter sizes (`profiles.ddp_weights`) at the page's DP (`profiles._ddp_padding`);
* the step time, tokens/s per GPU and MFU (`symmem.steptime`): each stage's costs of one micro-batch as functions of
  b and s (`page_steptime`), turned into seconds as `steptime.model` does, for the GPUs with speed figures.

What it does not carry is refused when the page is made, in one line: profiles that lay out their own states
(torchtitan), the Hugging Face dataflow (its ops depend on b = 1 and s = 1), models whose sizes are step functions of
s (V3.2, V4), histogram routing, schedules walked in their real order (ZB-H1, DualPipe) and interleaving, FP8/FP4
recipes with quantized weight copies. The caching-allocator replay (`reserved`) is not on the page: `symmem memory`
gives it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass

from symmem.accounting.params import GROUPS
from symmem.errors import SymmemError
from symmem.render import page_js, page_steptime
from symmem.sweep.compile import Poly, compile_case, derived_parallel, stepwise_in_s

CONTROLS = ("tp", "pp", "ep", "cp", "dp", "zero", "b", "s", "global-batch-size", "recompute", "precision", "gpu")
MAX_CASES = 400  # structural cases derived for one page (each a derivation of every stage)
MAX_ARRANGEMENTS = 4096  # (PP, TP, CP, EP) combinations checked for one page
MAX_STEP_TEMPLATES = 300  # arrangements whose step-time costs a page reads (four points each, ~0.1 s)


@dataclass
class PageInput:
    """What `build` needs: `make(settings)` builds the Scenario the command line builds for those settings (the
    CLI's own parser, so that the page and `symmem memory` agree); `initial` the page's first settings; `choices`
    the values each discrete control offers; `command` the flags that fixed everything else, shown on the page."""

    make: Callable[[dict], object]
    initial: dict
    choices: dict
    command: str
    gpus: dict  # name -> capacity in bytes


def refusal(scn) -> str | None:
    """Why the page cannot carry `scn`'s kind of scenario, or None."""
    from symmem.profiles import _megatron_buffers
    from symmem.sweep.exact import needs_exact

    if scn.profile.states is not None:
        return (f"profile = {scn.profile.name!r}: lays out its own model states (FSDP2's padded shards), which the "
                "page does not compile; use symmem memory")
    if scn.flow_impl is not None:
        return ("dataflow = 'hf': Hugging Face's ops depend on whether b and s are 1, which the page does not "
                "compile; use --dataflow paper or symmem memory")
    if stepwise_in_s(scn):
        return (f"model {scn.model.name}: its sizes are step functions of s, which the page does not compile; "
                "use symmem memory")
    if scn.routing.kind == "histogram":
        return "routing = 'histogram': derived per EP, which the page does not compile; use symmem memory"
    if scn.schedule.name not in ("1f1b", "gpipe"):
        return (f"schedule = {scn.schedule.name!r}: the page offers 1F1B and GPipe (their in-flight counts are "
                "closed forms); use symmem memory")
    if scn.profile.buffers is not None and scn.profile.buffers is not _megatron_buffers:
        return (f"profile = {scn.profile.name!r}: its framework buffers are not compiled for the page (megatron-te's "
                "are); use symmem memory")
    if needs_exact(scn, (scn.schedule,)):
        return (f"precision = {scn.precision.name!r}: its quantized weight copies and scale tensors are not "
                "compiled for the page; use symmem memory")
    return None


def _is_error(x) -> bool:
    return isinstance(x, str)


class _Builder:
    def __init__(self, inp: PageInput):
        self.inp = inp
        self.functions: list[str] = []
        self.terms: list[list] = []
        self.index: dict[Poly, int] = {}
        self.cases: list[dict] = []
        self.case_index: dict[tuple, int] = {}

    def fn(self, poly: Poly) -> int:
        i = self.index.get(poly)
        if i is None:
            i = self.index[poly] = len(self.functions)
            self.functions.append(page_js.js_function(poly))
            self.terms.append(page_js.terms(poly))
        return i

    def case(self, scn) -> int:
        case = compile_case(scn)
        i = self.case_index.get(case.key)
        if i is not None:
            return i
        if len(self.cases) >= MAX_CASES:
            raise SymmemError(f"html: more than {MAX_CASES} structural cases; narrow the choices (--pp-choices, "
                              "--recompute-choices, --precision-choices, --cp-choices)")
        stage_class = [0] * case.pp
        classes = []
        for ci, c in enumerate(case.classes):
            for m in c.members:
                stage_class[m] = ci
            classes.append({
                "index": c.index, "params": [self.fn(p) for p in c.params], "activation": self.fn(c.activation),
                "saved": self.fn(c.saved),
                "events": [[e.label, self.fn(e.own), self.fn(e.zero2), self.fn(e.zero3)] for e in c.events],
            })
        self.case_index[case.key] = len(self.cases)
        self.cases.append({"pp": case.pp, "stage_class": stage_class, "classes": classes})
        return self.case_index[case.key]


def _settings_key(rc: str, prec: str) -> str:
    return f"{rc}|{prec}"


def _buffers(scn, case) -> list:
    """Per stage class: [at s = 0, per token of s, [dense n, dense total], [expert n, expert total]]: the profile's
    buffers other than the DDP padding, linear in s, and the two DDP buffers' sizes (`profiles._ddp_padding`: the
    padded length before the bucket's end is n, the parameters' sum is total)."""
    from symmem.accounting.analysis import values
    from symmem.model import stage_parts
    from symmem.profiles import _ddp_padding, ddp_padding_bytes, ddp_span, ddp_weights

    out = []
    p = scn.precision
    for c in case["classes"]:
        stage = scn.stages[c["index"]]
        parts = stage_parts(scn.model, stage, scn.convention, scn.flow_impl)
        totals = []
        for s in (1, 2, 3):
            vals = values(scn, s_value=s)
            bufs = sum(b.nbytes for b in scn.profile.buffers(scn, stage, parts, vals))
            dense, expert = ddp_weights(scn, parts, vals)
            ddp = 0
            for ws, group in ((dense, scn.parallel.dense_shard), (expert, scn.parallel.expert_dp)):
                ddp += ddp_padding_bytes(_ddp_padding(ws, group), group, p)
            totals.append((bufs - ddp, dense, expert))
        (a1, dense, expert), (a2, _, _), (a3, _, _) = totals
        if a3 - a2 != a2 - a1:
            raise SymmemError(f"profile {scn.profile.name!r}: its buffers are not linear in s; the page cannot "
                              "extend them (use symmem memory)")

        def sizes(ws):
            return [str(ddp_span(ws)), str(sum(ws))]

        out.append([str(a1 - (a2 - a1)), str(a2 - a1), sizes(dense), sizes(expert)])
    return out


def build_data(inp: PageInput) -> dict:
    """The page's data: controls, arrangements (each valid one's structural cases and buffers), cases, and the
    compiled functions with their terms."""
    b = _Builder(inp)
    ch = inp.choices
    first = inp.make(dict(inp.initial))
    why = refusal(first)
    if why:
        raise SymmemError(f"html: {why}")
    combos = list(itertools.product(ch["pp"], ch["tp"], ch["cp"], ch["ep"]))
    if len(combos) > MAX_ARRANGEMENTS:
        raise SymmemError(f"html: {len(combos):,} (PP, TP, CP, EP) combinations, more than {MAX_ARRANGEMENTS:,}; "
                          "narrow the choices")
    arrangements: dict[str, dict] = {}
    precisions: dict[str, list[int]] = {}
    # the step time's costs are read per arrangement at four (b, s) points (tens of milliseconds each): within a
    # budget of arrangements, else the page says why it has none
    valid_guess = len(combos) * len(ch["recompute"])
    step_note = None
    if valid_guess > MAX_STEP_TEMPLATES:
        step_note = (f"step time not on this page: {valid_guess:,} arrangements x recomputations, more than the "
                     f"{MAX_STEP_TEMPLATES:,} whose costs a page reads; make it with fewer choices (--tp-choices, "
                     "--pp-choices, ...), or use symmem memory --gpu NAME")
    step_budget = [0 if step_note else MAX_STEP_TEMPLATES]
    pad = first.profile.padded_vocabulary if first.model.has("V") else None
    for pp, tp, cp, ep in combos:
        key = f"{pp}/{tp}/{cp}/{ep}"
        etp = first.parallel.etp
        # a DP under which the (PP, TP, CP, EP) arrangement's own rules are checked; the page checks the DP the
        # reader sets (EP·ETP must divide DP·TP·CP) itself
        dp = ep * etp
        entry: dict = {"cases": {}, "buffers": {}}
        for rc, prec in itertools.product(ch["recompute"], ch["precision"]):
            settings = {**inp.initial, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp, "recompute": rc,
                        "precision": prec, "s": inp.initial["s"] * cp, "global-batch-size": None}
            try:
                scn = inp.make(settings)
            except SymmemError as e:
                entry["cases"][_settings_key(rc, prec)] = str(e)
                continue
            why = refusal(scn)
            if why:
                raise SymmemError(f"html: {why}")
            p = scn.precision
            precisions[p.name] = [p.weight_bytes, p.grad_bytes, p.master_bytes, p.optimizer_bytes]
            ci = b.case(scn.replace(parallel=derived_parallel(scn.parallel, scn.rules)))
            entry["cases"][_settings_key(rc, prec)] = ci
            if scn.profile.buffers is not None and str(ci) not in entry["buffers"]:
                entry["buffers"][str(ci)] = _buffers(scn, b.cases[ci])
            if step_budget[0] > 0 and str(ci) not in entry.setdefault("step", {}):
                entry["step"][str(ci)] = _step_template(scn)
                step_budget[0] -= 1
        if all(_is_error(v) for v in entry["cases"].values()):
            reasons = set(entry["cases"].values())
            arrangements[key] = {"error": next(iter(reasons))} if len(reasons) == 1 else entry
            continue
        if pad is not None:
            entry["V"] = str(pad(first.model.value("V"), tp))
        arrangements[key] = entry
    if not any("error" not in a for a in arrangements.values()):
        raise SymmemError("html: no arrangement of the choices is valid for the model; widen the choices")
    speeds = page_steptime.gpus()
    if not any(isinstance(tpl, dict) and "kernels" in tpl
               for a in arrangements.values() for tpl in a.get("step", {}).values()):
        speeds["kernels"] = {}  # no step the measured kernels time: the page need not carry their tables (47 KB)
    return {
        "controls": list(CONTROLS), "choices": ch, "initial": inp.initial, "command": inp.command,
        "model": first.model.name, "profile": first.profile.name, "rules": first.rules.name,
        "schedule": first.schedule.name, "etp": first.parallel.etp, "groups": list(GROUPS),
        "fragmentation": list(first.fragmentation), "comm_buffers": [str(x) for x in first.comm_buffers],
        "gpus": {k: str(v) for k, v in inp.gpus.items()}, "precisions": precisions,
        "padded_vocabulary": pad is not None, "step_note": step_note, "speeds": speeds,
        "ddp_padding": bool(first.profile.ddp_padding),
        "arrangements": arrangements, "cases": b.cases, "terms": b.terms,
        "latex_names": _latex_names(),
    }, b.functions


def _step_template(scn) -> dict | str:
    """The step time's costs of `scn` as the page evaluates them (`page_steptime.template`), or why not."""
    try:
        return page_steptime.template(scn)
    except SymmemError as e:
        return f"step time not on the page here: {e}"


def _latex_names() -> dict[str, str]:
    from symmem.sweep.compile import VARIABLES
    from symmem.symbols import SYMBOLS

    names = {v: SYMBOLS[v].latex if v in SYMBOLS else v for v in (*VARIABLES, "V")}
    return names


def render(inp: PageInput) -> str:
    """The whole HTML page."""
    import jinja2

    data, functions = build_data(inp)
    env = jinja2.Environment(loader=jinja2.PackageLoader("symmem.render", "templates"), autoescape=False,
                             keep_trailing_newline=True)
    # the data is JSON inside a <script> element: no raw <, > or & may reach the HTML parser ("</script>" would end
    # the element, "<!--<script>" would make the parser swallow the rest of the page); JSON's \u escapes keep the
    # same strings
    # (no NaN or Infinity: JSON.parse refuses them, and the page would not load; the inputs are bounded before this)
    payload = (json.dumps(data, separators=(",", ":"), sort_keys=True, allow_nan=False)
               .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    return env.get_template("page.html.j2").render(
        data=payload, functions=",\n".join(functions), title=f"symmem: {data['model']} ({data['profile']})")
