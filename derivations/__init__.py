"""One script per generated table or figure of `paper_tables/`, each built from the engine.

Run one alone (`python -m derivations.table4_stage_params --out DIR`) or all through `symmem paper`.
The order here is the order of the index.
"""

MODULES = (
    "table1_hyperparameters",
    "table2_weight_shapes",
    "layer_params",
    "table4_stage_params",
    "table6_gpu_static",
    "convention_difference",
    "table8_zero",
    "model_totals",
    "section5_formulas",
    "table10_activations",
    "activations_per_stage",
    "stage0_activations",
    "peak_stage",
    "hypotheses",
    "rules_comparison",
    "korthikanti_table2",
    "deepseek_generations",
    "precision_recipes",
    "measured_runs",
    "measured_step_times",
    "torchtitan_configs",
    "torchtitan_published",
)
