"""The paper's Section 5 formulas and Table 10 totals, as typed in the paper: reference data for comparison.

They are parsed by symmem's own formula parser and compared with what the dataflows derive; nothing in the
engine reads them.
"""

SECTION5 = {
    "mla": r"10bsh + 8bs(d_{cq}+d_c) + 16bsd_hn_h + 8bsd_{hr}n_h + 10bn_hs^2",
    "moe": r"20bsh + 16bsN + 8bsN_r + 4bs(N_r/N)(96h+256h_E) + 32bsh_E",
    "full": r"8bsh + 8bsN_r",
}

# Table 10 at b = 1, s = 4096 (per four-layer stage, per micro-batch), bytes.
TABLE10_B1 = {"none": 24_671_158_272, "full": 235_143_168}
