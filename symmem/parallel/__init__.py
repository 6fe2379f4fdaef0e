"""Parallelism: the sizes (TP, PP, EP, ETP, DP, CP), the pipeline layout, the schedule and the routing models."""

from symmem.parallel.sizes import Parallel

__all__ = ["Parallel"]
