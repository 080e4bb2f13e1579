"""The implementation report's parsing and fit check (ndpkit_tools.impl.flow): Yosys statistics
in either column order, and the ECP5 fit rule (a lower bound on the LUT sites)."""
from ndpkit_tools.impl.flow import ECP5_LUTS, ecp5_counts, ecp5_overflow, placed_fmax, xilinx_counts


def test_ecp5_counts_and_fit():
    stat = "   73385   LUT4\n  3986   CCU2C\n  3101   TRELLIS_DPR16X4\n  TRELLIS_FF 24004\n  12 MULT18X18D\n"
    c = ecp5_counts(stat)
    assert c == {"LUT4": 73385, "CCU2C": 3986, "TRELLIS_DPR16X4": 3101, "TRELLIS_FF": 24004, "MULT18X18D": 12}
    # LUT4 + CCU2C alone would fit (81,357); the distributed RAMs take it over the part
    assert 73385 + 2 * 3986 < ECP5_LUTS
    assert "does not fit: 87559 LUT4 + 2 x CCU2C + 2 x DPR16X4 > 83640" == ecp5_overflow(c)
    assert ecp5_overflow({"LUT4": 40000, "CCU2C": 1000, "TRELLIS_DPR16X4": 400}) is None
    assert ecp5_overflow({"LUT4": 10, "MULT18X18D": 157}).startswith("does not fit: 157 MULT18X18D")


def test_xilinx_counts():
    stat = "  1200 LUT6\n  300 LUT2\n  FDRE 900\n  12 DSP48E2\n  3 RAMB36E2\n  2 RAMB18E2\n  1 URAM288\n  40 CARRY8\n"
    assert xilinx_counts(stat) == {"LUT": 1500, "FF": 900, "DSP": 12, "BRAM": 4.0, "URAM": 1, "CARRY": 40}


def test_placed_fmax_is_the_post_placement_estimate():
    log = ("Info: Max frequency for clock 'x': 12.00 MHz (FAIL at 100.00 MHz)\n"   # before placement
           "Info: SA placement time 29.36s\n\nInfo: Max frequency for clock 'clk': 54.62 MHz (FAIL at 100.00 MHz)\n"
           "Warning: Max frequency for clock 'clk': 67.33 MHz (FAIL at 100.00 MHz)\n")
    assert placed_fmax(log) == 54.62
    assert placed_fmax("Info: routing only\n") is None
