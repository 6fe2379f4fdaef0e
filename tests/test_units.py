import pytest

from symmem import SymmemError
from symmem.units import fmt_gb, fmt_gib, parse_size


@pytest.mark.parametrize("text, value", [
    ("80GB", 80 * 10**9), ("80GiB", 80 * 2**30), ("80e9", 80 * 10**9), ("80000000000", 80 * 10**9),
    ("141 GB", 141 * 10**9), ("0.5GiB", 2**29), ("H200", 141 * 10**9), ("h800", 80 * 10**9), (1024, 1024)])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["eighty", "80XB", "", "-5GB", "0", "GB", "1e400000GB"[:4] + "x"])
def test_not_sizes(text):
    with pytest.raises(SymmemError, match="size"):
        parse_size(text)


def test_units_named():
    assert fmt_gib(12_500_729_856) == "11.64"
    assert fmt_gb(24_671_158_272) == "24.67"
