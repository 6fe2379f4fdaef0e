"""Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198),
Table 2: activation memory per transformer layer, in bytes, as typed for symmem's formula parser (reference data
for comparison; nothing in the engine reads it). Each row with the `symmem check` flags that select it from the
built-in scenario `korthikanti`, the formula as typed for `symmem check`, and the formula in LaTeX as the paper
prints it (the parser reads both to the same expression: tests/test_gpt.py).
"""

TABLE2 = (
    ("no parallelism", ("--tp", "1", "--no-sequence-parallel", "--recompute", "none"), "sbh(34 + 5as/h)",
     r"sbh\left(34 + \frac{5as}{h}\right)"),
    ("tensor parallel (baseline)", ("--tp", "8", "--no-sequence-parallel", "--recompute", "none"),
     "sbh(10 + 24/t + 5as/(ht))", r"sbh\left(10 + \frac{24}{t} + 5\frac{as}{ht}\right)"),
    ("tensor + sequence parallel", ("--tp", "8", "--sequence-parallel", "--recompute", "none"),
     "sbh(34/t + 5as/(ht))", r"sbh\left(\frac{34}{t} + 5\frac{as}{ht}\right)"),
    ("tensor parallel + selective recomputation", ("--tp", "8", "--no-sequence-parallel", "--recompute", "selective"),
     "sbh(10 + 24/t)", r"sbh\left(10 + \frac{24}{t}\right)"),
    ("tensor + sequence parallel + selective recomputation",
     ("--tp", "8", "--sequence-parallel", "--recompute", "selective"), "34sbh/t",
     r"\frac{34sbh}{t}"),
    ("full recomputation", ("--tp", "8", "--no-sequence-parallel", "--recompute", "full"), "2sbh", r"2sbh"),
)
