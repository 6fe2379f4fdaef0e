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
    assert fmt_gib(12_500_729_856) == "11.64"  # the paper's Table 6, both in bytes and GiB
    assert fmt_gb(24_671_158_272) == "24.67"  # Table 10: 24,671,158,272 bytes = 24.67 GB


def test_sizes_beyond_a_float_print_in_scientific_notation():
    from symmem.units import fmt_gb, fmt_gib

    # 10^160 / 2^30 = 9.3132257...e150 (2^30 = 1,073,741,824); no float holds 10^400
    assert fmt_gib(10**160) == "9.31e+150" and fmt_gib(-(10**160)) == "-9.31e+150"
    assert fmt_gb(10**400) == "1.00e+391" and fmt_gb(-(10**400), 1) == "-1.0e+391"
    assert fmt_gb(9_996 * 10**9 * 10**12) == "1.00e+16"  # 9.996e15 GB rounds up into the next power of ten
    assert fmt_gib(5 * 2**30) == "5.00" and fmt_gb(999_999_999_999_999 * 10**9) == "999999999999999.00"
