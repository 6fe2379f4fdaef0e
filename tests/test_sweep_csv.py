"""Issue 45, defects 7 and 8: the time-ranked CSV carries its ranking key (time_s) and what goes with it (tokens/s,
MFU, the global batch, the replayed reserved bytes), sorted by it; the text header says "MoE sequence-sharded" and
"MTP" only of a model that has an MoE block and MTP modules."""

from __future__ import annotations

import csv
import io

from symmem.cli.main import main

SWEEP = ["sweep", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "H100", "-s", "4096", "--profile", "megatron-te"]


def test_time_ranked_csv_carries_its_key(capsys):
    assert main([*SWEEP, "--rank-by", "time", "--global-batch-size", "64", "--top", "5", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and {"time_s", "tokens_per_s_per_gpu", "mfu", "global_batch_size", "reserved"} <= set(rows[0])
    times = [float(r["time_s"]) for r in rows]
    assert times == sorted(times) and all(r["global_batch_size"] == "64" for r in rows)
    assert all(int(r["reserved"]) >= int(r["peak_allocated"]) for r in rows if r["reserved"])


def test_header_names_only_what_the_model_has(capsys):
    assert main([*SWEEP, "--top", "1"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "SP on;" in head and "MoE" not in head and "MTP" not in head
    assert main(["sweep", "--model", "deepseek-v2-lite", "--gpus", "8", "--gpu", "H100", "-s", "4096",
                 "--profile", "megatron-te", "--top", "1"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "MoE sequence-sharded" in head
