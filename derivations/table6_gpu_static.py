"""Table 6: static parameters on one GPU of stages 1-14, and their BF16 bytes."""

from __future__ import annotations

from symmem.accounting.analysis import stage_params
from symmem.render.tables import Table
from symmem.units import fmt_gib

from ._common import main, match, scenario

# The paper's stated values (arXiv 2502.07846, Section 3), shown beside the derived ones; never used to derive.
PAPER = {
    "experts": 5_813_305_344,
    "moe": 5_820_645_376,
    "non_moe": 429_719_552,
    "total": 6_250_364_928,
    "total_bytes": 12_500_729_856,
    "total_gib": "11.64",
    "moe_gib": "10.84",
}


def tables() -> list[Table]:
    scn = scenario("paper")
    st = scn.stages[1]
    sp = stage_params(scn, st)
    moe_layers = sum(scn.model.layer_kinds()[i] == "moe" for i in st.layers)
    local_routed = scn.model.value("N") // scn.parallel.ep
    n_shared = scn.model.value("N_s")
    experts = sp.per_gpu["routed_expert"] + sp.per_gpu["shared_expert"]
    wb = scn.precision.weight_bytes
    rows = [
        ("experts per GPU", f"{moe_layers} x ({local_routed} routed + {n_shared} shared) = "
                            f"{moe_layers * (local_routed + n_shared)}", "", "", "132", match(
                                moe_layers * (local_routed + n_shared), 132)),
        ("expert parameters", experts, experts * wb, fmt_gib(experts * wb), f"{PAPER['experts']:,}",
         match(experts, PAPER["experts"])),
        ("router parameters", sp.per_gpu["router"], sp.per_gpu["router"] * wb, fmt_gib(sp.per_gpu["router"] * wb),
         "", ""),
        ("MoE parameters (experts + routers)", sp.moe, sp.moe * wb, fmt_gib(sp.moe * wb),
         f"{PAPER['moe']:,} ({PAPER['moe_gib']} GiB)", match(fmt_gib(sp.moe * wb), PAPER["moe_gib"]) if
         sp.moe == PAPER["moe"] else "NO"),
        ("non-MoE parameters", sp.dense, sp.dense * wb, fmt_gib(sp.dense * wb), f"{PAPER['non_moe']:,}",
         match(sp.dense, PAPER["non_moe"])),
        ("total", sp.total, sp.total * wb, fmt_gib(sp.total * wb),
         f"{PAPER['total']:,} = {PAPER['total_bytes']:,} B = {PAPER['total_gib']} GiB",
         match((sp.total, sp.total * wb, fmt_gib(sp.total * wb)),
               (PAPER["total"], PAPER["total_bytes"], PAPER["total_gib"]))),
    ]
    return [Table("table6_gpu_static", "Table 6: static parameters on one GPU of stages 1-14 (BF16 weights)",
                  ("quantity", "parameters", "bytes (BF16)", "GiB", "the paper states", "equal"), tuple(rows),
                  (f"Scenario {scn.name}: {scn.parallel.describe()}, TP convention {scn.convention}. "
                   "GiB = 2^30 bytes; the paper writes GB for these binary units.",),
                  align="lrrrll")]


if __name__ == "__main__":
    main(tables)
