"""Accounting: parameters, model states, saved activations, recomputation and the per-stage analysis, all derived
from the dataflows (`symmem.model`) under a scenario's rule set and parallel sizes."""
