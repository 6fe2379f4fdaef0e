"""Helpers shared by the derivation scripts."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import lru_cache

from symmem.render.tables import Table, render_all
from symmem.scenario import Scenario, load_scenario


@lru_cache(maxsize=8)
def scenario(name: str = "paper") -> Scenario:
    return load_scenario(name)


def match(derived: int | str, stated: int | str) -> str:
    return "yes" if str(derived) == str(stated) else "NO"


def stage_label(stage) -> str:
    if not stage.layers:
        return "-"
    return f"{stage.layers[0]}-{stage.layers[-1]}" if len(stage.layers) > 1 else str(stage.layers[0])


def main(tables: Callable[[], list[Table]]) -> None:
    """Run one derivation alone: write its tables under --out."""
    from symmem.output import write_tree

    p = argparse.ArgumentParser()
    p.add_argument("--out", default="paper_tables")
    args = p.parse_args()
    from symmem.render.sources import caption_tex

    files: dict[str, str] = {}
    for t in tables():
        files.update(render_all(t, caption_tex(t.id)))
    write_tree(args.out, files)
    print(f"wrote {len(files)} files to {args.out}/")
