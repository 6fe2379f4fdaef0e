"""Model families: one module per family, each exposing `FAMILY` (a `symmem.family.Family`).

The engine finds them by listing this package (`symmem.family.registry`); adding a family is adding a module.
"""
