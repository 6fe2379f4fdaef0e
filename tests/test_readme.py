"""The README's Python examples run, and say what they say (a doctest of every ```python block)."""

import doctest
import importlib
import inspect
import re
from pathlib import Path

import symmem

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 4
    text = "\n".join(blocks)
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "README.md", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 20 and result.failed == 0


NOT_YET_DOCUMENTED: set[str] = set()


def test_every_exported_name_has_a_docstring():
    missing = []
    for name in symmem.__all__:
        obj = getattr(symmem, name)
        if inspect.isclass(obj):
            doc = obj.__dict__.get("__doc__") or ""
            if not doc or doc.startswith(f"{name}("):  # a dataclass's generated signature is no docstring
                missing.append(name)
        elif callable(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(name)
        else:  # data (SYMBOLS): documented by name in its module's docstring
            module = importlib.import_module(symmem._EXPORTS[name])
            if f"`{name}`" not in (module.__doc__ or ""):
                missing.append(name)
    assert sorted(set(missing) - NOT_YET_DOCUMENTED) == []


def _cli_memory(capsys, *flags):
    import json

    from symmem.cli.main import main

    assert main(["memory", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)["stages"]


def test_python_defaults_give_the_cli_numbers(capsys):
    # Issue 9, item 5: a case built in Python from the defaults of Parallel and Scenario gave other bytes than
    # the CLI's (Parallel() sharded the MoE block over the sequence; the paper scenario does not). The same case,
    # both ways, must give identical numbers for every stage.
    from symmem import Parallel, Scenario, load_model, memory

    for tp, dp in ((2, 32), (4, 16)):
        scn = Scenario("mine", load_model("deepseek-v3"), Parallel(dp=dp, tp=tp, pp=16, ep=8, sequence_parallel=True),
                       mtp=False)
        assert not scn.parallel.moe_sp
        cli = _cli_memory(capsys, "--tp", str(tp))
        py = memory(scn)
        assert [s["allocated"] for s in cli] == [m.allocated for m in py]
        assert [(s["peak_allocated"], s["reserved_low"], s["reserved_high"]) for s in cli] == [
            (m.peak_allocated, *m.reserved) for m in py]
    # and with the MoE block sharded, asked for in both
    scn = Scenario("mine", load_model("deepseek-v3"),
                   Parallel(dp=32, tp=2, pp=16, ep=8, sequence_parallel=True, moe_sequence_parallel=True), mtp=False)
    cli = _cli_memory(capsys, "--moe-sequence-parallel")
    assert [s["allocated"] for s in cli] == [m.allocated for m in memory(scn)]


def _text_blocks() -> list[str]:
    return re.findall(r"```text\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    from symmem.cli.main import main

    code = main(argv)
    return code, capsys.readouterr().out


def test_readme_examples_are_what_the_commands_print(capsys):
    # every ```text block starts with `$ symmem ...`; each line it shows (but "...") is a line the command prints
    import shlex

    blocks = _text_blocks()
    assert len(blocks) >= 2
    for block in blocks:
        lines = block.rstrip("\n").split("\n")
        command = lines[0].removeprefix("$ ")
        shown = lines[1:]
        while command.endswith("\\"):
            command = command[:-1] + shown.pop(0).strip()
        argv = shlex.split(command)
        assert argv[0] == "symmem"
        _, out = _run(capsys, argv[1:])
        printed = out.splitlines()
        for line in shown:
            if line.strip() != "...":
                assert line in printed, (command, line)


def test_readme_figures_are_derived(capsys):
    # the first screen's numbers: the measured-run errors (the table symmem paper writes), the paper's Table 6 and 10
    from derivations.measured_runs import with_reserved

    rows = with_reserved()
    text = README.read_text(encoding="utf-8")
    assert len(rows) == 12 and len({r["case"] for r in rows}) == 10
    assert f"within {max(abs(r['error']) for r in rows):.2f} %" in text  # 0.13 %
    reserved = max(abs(r["reserved_error"]) for r in rows)
    assert f"within {reserved:.2f} % of the measured reserved on all twelve" in text
    from derivations.measured_step_times import summary

    st = summary()
    assert f"within {st['loro_mean']:.2f} % on average, {st['loro_worst']:.2f} % at worst" in text
    assert f"estimates: {st['peer_mean']:.2f} % and {st['peer_worst']:.2f} %" in text
    from symmem import load_scenario, stage_memory, stage_params

    paper = load_scenario("paper")
    weights = 2 * stage_params(paper, paper.stages[1]).total  # BF16
    activations = stage_memory(paper, paper.stages[1]).activation_per_microbatch
    assert f"{weights:,} bytes" in text and f"{activations:,}" in text
