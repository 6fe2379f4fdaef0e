"""The planner sweep: enumerate parallel configurations, derive their expressions once per structure, evaluate
them exactly and vectorised, rank them by headroom."""
