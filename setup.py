"""The one compiled part: symmem/accounting/_callocator.c, the caching allocator's replay loop in C (the rest of
the project's metadata is pyproject.toml's). `optional=True`: without a C compiler the install goes on and symmem
replays with the Python allocator (symmem/accounting/allocator.py), the same figures, slower."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("symmem.accounting._callocator", ["symmem/accounting/_callocator.c"],
                             optional=True)])
