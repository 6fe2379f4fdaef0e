"""Whole-model parameter totals against DeepSeek's published 671B/37B, 236B/21B, 15.7B/2.4B."""

from __future__ import annotations

from symmem.accounting.analysis import model_totals
from symmem.config import load_model
from symmem.render.tables import Table

from ._common import main

# DeepSeek's published sizes (technical reports and model cards), in billions; shown for comparison only.
PUBLISHED = {"deepseek-v3": ("671", "37"), "deepseek-v2": ("236", "21"), "deepseek-v2-lite": ("15.7", "2.4")}


def _rounded(n: int, like: str) -> str:
    digits = len(like.split(".")[1]) if "." in like else 0
    return f"{n / 1e9:.{digits}f}"


def tables() -> list[Table]:
    rows = []
    for name, (tot, act) in PUBLISHED.items():
        t = model_totals(load_model(name))
        rows.append((name, t.total, _rounded(t.total, tot), tot, t.activated, _rounded(t.activated, act), act,
                     t.mtp, "yes" if (_rounded(t.total, tot), _rounded(t.activated, act)) == (tot, act) else "NO"))
    return [Table("model_totals", "Whole-model parameters against the published sizes (billions)",
                  ("model", "total", "total (B)", "published", "activated", "activated (B)", "published",
                   "MTP modules", "equal when rounded"), tuple(rows),
                  ("total: embedding, every decoder layer, final norm and output head; no MTP; parameters only "
                   "(buffers such as V3's e_score_correction_bias are not parameters).",
                   "activated: what one token passes through, by DeepSeek's convention: without the input "
                   "embedding, with the output head, N_r of the N routed experts.",
                   "MTP modules: their own parameters (embedding and head are shared with the main model)."),
                  align="lrrrrrrrl")]


if __name__ == "__main__":
    main(tables)
