"""Table 1: the hyperparameters of DeepSeek-V2 and V3 (and V2-Lite), read from their HF configs."""

from __future__ import annotations

from symmem.config import load_model
from symmem.render.tables import Math, Table
from symmem.symbols import SYMBOLS

from ._common import main


def tables() -> list[Table]:
    models = [load_model(n) for n in ("deepseek-v2", "deepseek-v3", "deepseek-v2-lite")]
    rows = []
    for name, key in models[0].family.config_keys.items():
        spec = SYMBOLS[name]
        vals = [dict(m.values).get(spec.name, "none") for m in models]
        rows.append((Math(spec.latex, spec.name), spec.meaning, key, *vals))
    rows.append((Math("L_{dense}", "first_k_dense_replace"), "leading dense layers", "first_k_dense_replace",
                 *[m.option("first_k_dense") for m in models]))
    rows.append((Math("L_{MTP}", "num_nextn_predict_layers"), "MTP modules", "num_nextn_predict_layers",
                 *[m.n_mtp for m in models]))
    return [Table("table1_hyperparameters", "Table 1: hyperparameters (from the HF config.json files)",
                  ("symbol", "meaning", "HF config key", "DeepSeek-V2", "DeepSeek-V3", "DeepSeek-V2-Lite"),
                  tuple(rows), ("V2-Lite has no query latent (q_lora_rank null): its query comes from one "
                                "projection W_Q of shape h x n_h(d_h + d_hr).",),
                  align="lllrrr")]


if __name__ == "__main__":
    main(tables)
