"""Board builds: board files load, bad parameters are refused before any long step,
and every Xilinx board's generated Vivado project passes the Tcl stub check (the
project Tcl runs through, creates every IP it connects, connects every interface and
port of the device, and its XDC names only ports the block design has)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ndpkit_tools.boards import BOARDS_DIR, BoardError, board_names, device_options, load_board
from ndpkit_tools.boards.tclcheck import TclCheckError, check_project
from ndpkit_tools.boards.vivado import generate

ROOT = Path(__file__).resolve().parents[2]
XILINX = ["alveo_u280", "alveo_u55c", "smartssd"]
SMARTSSD_PINS = """set_property PACKAGE_PIN A1 [get_ports pcie_refclk_clk_p]
set_property -dict {PACKAGE_PIN A2 IOSTANDARD LVCMOS18} [get_ports pcie_perstn]
set_property PACKAGE_PIN A3 [get_ports ddr4_refclk_clk_p]
set_property PACKAGE_PIN A4 [get_ports {ddr4_dq[0]}]
"""


def _local(board, tmp_path):
    """Stand-in local settings for the SmartSSD (its pinout is not public)."""
    if board.name != "smartssd":
        return None
    pins = tmp_path / "pins.xdc"
    pins.write_text(SMARTSSD_PINS)
    return {"pins": str(pins), "ddr4_part": "MT40A1G16RC-062E"}


def _project(name, tmp_path, **overrides):
    board = load_board(name)
    options = device_options(board, **overrides)
    out = tmp_path / name
    plan = generate(board, options, out, local=_local(board, tmp_path))
    return board, options, out, plan


def test_every_board_loads():
    assert set(XILINX) <= set(board_names())
    for name in XILINX:
        board = load_board(name)
        assert board.part.startswith("xc") and board.resources["lut"] > 0
        assert (board.folder / "README.md").exists() and board.file("constraints").exists()


#: the DRAM preset each board's memory is simulated on (None: the ideal memory, the ECP5's block RAM)
SIM_PRESETS = {"alveo_u55c": "hbm2_pc", "alveo_u280": "hbm2_pc", "smartssd": "ddr4_2400", "ecp5_5g": None}


@pytest.mark.parametrize("name", sorted(SIM_PRESETS))
def test_every_board_names_the_preset_its_simulation_runs_on(name):
    """``[memory] sim_preset``, and ``ndpkit.open("sim?board=<name>")`` taking it with the
    build's engine clock (the driver reads the same board file without importing the tools)."""
    from ndpkit.options import check_options
    board = load_board(name)
    assert board.sim_preset == SIM_PRESETS[name]
    sim = check_options("sim", {"board": name})
    assert sim.get("memory", "ideal") == (board.sim_preset or "ideal")
    assert sim["clock_mhz"] == device_options(board)["clock_mhz"]
    assert "engines" not in sim            # the build's engines fill the part: the sim card keeps its own
    assert set(SIM_PRESETS) == set(board_names())


def test_an_unknown_sim_preset_is_refused_naming_the_key_and_the_file(tmp_path, monkeypatch):
    import ndpkit_tools.boards as boards
    for name in ("alveo_u55c", "ecp5_5g"):
        shutil.copytree(BOARDS_DIR / name, tmp_path / name)
    toml = tmp_path / "alveo_u55c" / "board.toml"
    toml.write_text(toml.read_text().replace('sim_preset = "hbm2_pc"', 'sim_preset = "hbm3"'))
    monkeypatch.setattr(boards, "BOARDS_DIR", tmp_path)
    with pytest.raises(BoardError, match=re.escape(f"{toml}: [memory] sim_preset 'hbm3' is not a DRAM preset; "
                                                   f"presets: hbm2_pc, ddr4_2400")):
        load_board("alveo_u55c")
    toml.write_text(toml.read_text().replace('sim_preset = "hbm3"', 'sim_preset = "ideal"'))
    with pytest.raises(BoardError, match="leave the key out for the ideal memory"):
        load_board("alveo_u55c")
    assert load_board("ecp5_5g").sim_preset is None


@pytest.mark.parametrize("name, overrides, message", [
    ("alveo_u281", {}, "unknown board 'alveo_u281'; boards: "),
    ("alveo_u280", {"memory_ports": 33, "engines": ",".join(["dma_copy"])}, "memory_ports=33 but the board has 32 HBM"),
    # an instance next to its own pseudo-channel: no more instances than the board has
    ("alveo_u55c", {"engines": "dma_copy*30,decomp*3"}, "33 engine instances, but the board has 32 HBM "
                                                         "pseudo-channels, one memory master each: at most 32"),
    ("alveo_u280", {"memory_ports": 4, "engines": "dma_copy"}, "memory_ports=4 but the device has only 1 engine "
                                                               "instance(s) (each region needs one)"),
    ("alveo_u280", {"engines": "dma_copy*0"}, "engine 'dma_copy': instance count 0 is below 1"),
    ("alveo_u280", {"engines": "attention*64"}, "further engine instances need slots up to"),
    ("smartssd", {"memory_ports": 2}, "memory_ports=2 but the board has 1 memory controller port"),
    ("smartssd", {"attention_lanes": 3}, "attention_lanes: lanes must be a power of two of at least 4, not 3"),
    ("alveo_u280", {"attention_lanes": 4096}, "attention_lanes: 4096 lanes at 512 bits serve 64 query heads at once; "
                                              "a group has at most 16: at most 1024 lanes"),
    # the figures come from the measured resource table: the message's form is what is fixed
    ("smartssd", {"attention_lanes": 1024, "data_width": 512},
     re.compile(r"the build needs [\d,]+ (LUT|FF|DSP|BRAM36|URAM) of the xcku15p-ffva1156-2LV-e's [\d,]+ \(\d+%\), "
                r"over the 70% budget \([\d,]+\); the largest part is attention with [\d,]+ \(engines dma_copy, adam")),
    ("alveo_u280", {"engines": "dma_copy,pagerank"}, "unknown engine 'pagerank'"),
    ("smartssd", {"engines": "dma_copy,graph", "data_width": 256}, "engine 'graph' needs data_width 512, not 256"),
    ("alveo_u280", {"data_width": 96}, "data_width 96 is not one of 128, 256, 512"),
    ("ecp5_5g", {"data_width": 512}, "data_width 512 is not one of 32, 64, 128"),
    # the engines' clock: refused above what the impl report's logic depth supports, naming the engine
    ("alveo_u55c", {"clock_mhz": 250},
     re.compile(r"clock_mhz=250 is above what the evidence supports: attention supports (\d+) MHz: [\d.]+ logic "
                r"levels between registers \(its max configuration; .*\); give clock_mhz <= \1")),
    ("alveo_u280", {"clock_mhz": 5}, "clock_mhz=5: the clocking wizard cannot make it exactly from the XDMA's "
                                     "250 MHz; near it: 7, 8"),
    ("alveo_u280", {"engines": "dma_copy,sg,graph", "memory_ports": 2, "clock_mhz": 260},
     re.compile(r"graph supports \d+ MHz: [\d.]+ logic levels between registers \(its default configuration; "
                r".*\); give clock_mhz <= \d+")),
])
def test_bad_board_parameters_are_refused_with_a_clear_message(name, overrides, message):
    with pytest.raises(BoardError, match=message if isinstance(message, re.Pattern) else re.escape(message)):
        device_options(load_board(name), **overrides)


@pytest.mark.parametrize("name", XILINX)
def test_every_default_build_fits_by_the_resource_model(name):
    """The board's default build (engines at the impl report's figures plus the stated
    shell estimate) stays within 70 % of every resource of its part."""
    from ndpkit_tools.boards.resources import BUDGET, RESOURCES, totals
    board = load_board(name)
    options = device_options(board)
    result = totals(board, options)
    total = result["total"]
    for r in RESOURCES:
        assert total[r] <= BUDGET * board.resources[r], (r, total[r], board.resources[r])
    # and they carry real engines, each at its measured size, not an empty shell
    from ndpkit_spec.registry import instance_counts
    assert sum(instance_counts(options["engines"]).values()) >= 2 and all(result[e]["lut"] > 1000
                                                                          for e in options["engines"])
    if board.memory["kind"] == "hbm":
        # each instance next to its own pseudo-channel: a memory port an instance, a channel a port;
        # as many attention instances as the part holds (one more is over the budget), at least 18
        # of the 32 channels streaming attention (38.6k LUT an instance with the paged mode and the
        # lane-parallel epilogue: 19 on the U55C, 18 beside Adam on the U280)
        from ndpkit_tools.boards import channels_per_port
        from ndpkit_tools.boards.resources import binding
        counts = instance_counts(options["engines"])
        assert options["memory_ports"] == sum(counts.values()) and channels_per_port(board, options["memory_ports"]) == 1
        assert binding(board, options)["one_more"], "the default build leaves room for another attention instance"
        assert counts["attention"] >= 18


@pytest.mark.parametrize("name", XILINX)
def test_boards_doc_and_board_file_name_what_binds_by_the_resource_model(name):
    """docs/boards.md's defaults column and the board file's comment say what
    ``resources.binding`` says (and the row, the board file's engine clock): the most used resource (and its share) and the resources one
    more attention instance would take over the budget, no other."""
    from ndpkit_tools.boards.resources import binding
    board = load_board(name)
    bound = binding(board, device_options(board))
    words = {"lut": "LUTs", "ff": "FFs", "dsp": "DSPs", "bram36": "BRAM36", "uram": "URAM"}
    row = next(line for line in (ROOT / "docs" / "boards.md").read_text().splitlines()
               if line.startswith(f"| `{name}` |"))
    m = re.search(r"\((\d+) % of the (\w+), the most used resource(?:; one more attention instance would "
                  r"exceed ([\w ,]+))?\)", row)
    assert m, row
    assert (int(m.group(1)), m.group(2)) == (round(100 * bound["share"]), words[bound["most_used"]]), row
    # (and the engines' clock the board file gives: the U55C's and U280's were once swapped here)
    assert f"engines at {device_options(board)['clock_mhz']} MHz" in row, row
    named = set(re.split(r", | and ", m.group(3))) if m.group(3) else set()
    assert named == {r.upper() for r in bound["one_more"]}, row
    comment = (BOARDS_DIR / name / "board.toml").read_text()
    if len(bound["one_more"]) != 1:
        assert "LUTs bind" not in comment and "binding resource" not in row
    if bound["most_used"] != "lut":
        assert f"{bound['most_used'].upper()} is the most used, {bound['share']:.0%}".replace("%", " %") in comment


def test_the_resource_model_follows_the_impl_report():
    """At the report's measured configurations the model gives the report's figures (the
    larger of its two mappings' counts, the cell counts' and the delay mapping's the clock
    rests on); between them it is linear in the configuration's size."""
    import json
    from ndpkit_tools.boards.resources import RESOURCES, TABLE, engine_resources
    table = json.loads(TABLE.read_text())
    report = {(r["engine"], r["config"]): r for r in json.loads((ROOT / "docs" / "impl_report.json").read_text())["rows"]}
    for engine, configs in table.items():
        for config, entry in configs.items():
            got = engine_resources(engine, entry["params"], table)
            row = report[(engine, config)]
            assert got["lut"] == max(row["xcup"]["LUT"], (row.get("xcup_delay") or {}).get("LUT", 0))
            assert got["lut"] >= row["xcup"]["LUT"]
            assert all(got[r] == entry[r] for r in RESOURCES)
    lo, hi = engine_resources("attention", {"data_width": 128, "lanes": 16}), \
        engine_resources("attention", {"data_width": 512, "lanes": 32})
    mid = engine_resources("attention", {"data_width": 512, "lanes": 16})     # size 8192 of 2048..16384
    assert mid["lut"] == pytest.approx(lo["lut"] + (8192 - 2048) / (16384 - 2048) * (hi["lut"] - lo["lut"]))


def test_make_bitstream_prints_the_configuration_and_its_resources(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ndpkit_tools.bitstream", "alveo_u55c", "--engines",
                           "dma_copy,decomp", "--memory-ports", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert "alveo_u55c (xcu55c-fsvh2892-2L-e): engines dma_copy, decomp; 512-bit" in proc.stdout
    assert "  decomp" in proc.stdout and "  shell" in proc.stdout and "  total" in proc.stdout
    assert "of the part" in proc.stdout and "(budget 70%" in proc.stdout


def test_smartssd_without_its_local_settings_stops_before_generating(tmp_path):
    if (BOARDS_DIR / "smartssd" / "local.toml").exists():
        pytest.skip("this machine has the SmartSSD's local.toml")
    proc = subprocess.run([sys.executable, "-m", "ndpkit_tools.bitstream", "smartssd", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "local.toml is missing" in proc.stderr and "not public" in proc.stderr
    assert not any(tmp_path.iterdir()), "files were generated before the check"


@pytest.mark.parametrize("name", XILINX)
def test_generated_project_passes_the_tcl_stub_check(name, tmp_path):
    board, options, out, plan = _project(name, tmp_path, engines="dma_copy*2,decomp*2",
                                         memory_ports=4 if board_is_hbm(name) else 1)
    summary = check_project(out)
    assert summary["part"] == board.part
    kinds = {v.split(":")[2] if not v.startswith("module:") else v for v in summary["cells"].values()}
    assert {"xdma", "module:ndpkit_device", "smartconnect"} <= kinds
    assert ("hbm" if board_is_hbm(name) else "ddr4") in kinds
    assert summary["device_interfaces"] == sorted(["s_axil", "s_axi"] + plan["memory_ports"])
    assert {"pcie_refclk_clk_p", "pcie_perstn"} <= set(summary["constrained_ports"])
    if board_is_hbm(name):
        # four regions of eight pseudo-channels: each port enters at its first and maps exactly its eight
        assert plan["hbm_pseudo_channels"] == [list(range(8 * k, 8 * k + 8)) for k in range(4)]
        assert summary["address_map"] == {f"m_axi_mem{k}": list(range(8 * k, 8 * k + 8)) for k in range(4)}
        assert "hbm_cattrip" in summary["constrained_ports"]
        suffix = board.memory.get("axi_suffix", "")
        tcl = (out / "project.tcl").read_text()
        assert all(f"hbm/SAXI_{group[0]:02d}{suffix}]" in tcl for group in plan["hbm_pseudo_channels"])
        assert "CONFIG.USER_SWITCH_ENABLE_00 {TRUE}" in tcl         # within a region's group only
    else:
        assert summary["address_map"] == {"m_axi_mem": []}
    assert json.loads((out / "plan.json").read_text())["part"] == board.part
    # the engines in their own clock domain, made from the XDMA's clock at the options' frequency
    assert summary["clocks"] == {"device": options["clock_mhz"], "source": ["xdma/axi_aclk"]}
    assert plan["clock_mhz"] == {"engines": options["clock_mhz"], "xdma": board.pcie["axi_clock_mhz"]}


def test_default_clock_is_within_the_evidence_and_the_evidence_bounds_it():
    """Every Xilinx board's default engine clock is at most what its engines' logic
    depth supports, and one MHz above that bound is refused."""
    from ndpkit_tools.boards.resources import clock_limit
    for name in XILINX:
        board = load_board(name)
        options = device_options(board)
        limit = clock_limit(options)
        assert options["clock_mhz"] <= limit.mhz
        device_options(board, clock_mhz=limit.mhz)
        with pytest.raises(BoardError, match=f"clock_mhz={limit.mhz + 1} is above"):
            device_options(board, clock_mhz=limit.mhz + 1)


def board_is_hbm(name):
    return load_board(name).memory["kind"] == "hbm"


@pytest.fixture(scope="session")      # (a module's fixture is set up again when xdist interleaves modules)
def small_u280(tmp_path_factory):
    """One generated and checked project, copied by each test that breaks it."""
    _, _, out, _ = _project("alveo_u280", tmp_path_factory.mktemp("u280"), engines="dma_copy", memory_ports=1)
    check_project(out)
    return out


@pytest.mark.parametrize("mutation, message", [
    (("xdma/usr_irq_ack]", "xdma/usr_irq_acknowledge]"), "has no 'usr_irq_acknowledge'"),
    (("[get_bd_intf_pins ndpkit/s_axil]", "[get_bd_intf_pins ndpkit/s_axil_x]"), "has no 's_axil_x'"),
    (("connect_bd_net [get_bd_pins ndpkit/usr_irq_req] [get_bd_pins irq_sync/device_irq_req]\n", ""),
     "device port usr_irq_req is not connected"),
    (("create_bd_cell -type ip -vlnv xilinx.com:ip:util_ds_buf:2.2 pcie_refclk_buf\n", ""),
     "'pcie_refclk_buf' (does not exist|was never created)"),
    (("assign_bd_address -offset", "assign_bd_addresses -offset"), "did not run through"),
    # the host port reaching half of card memory
    (("-range 8G -target_address_space [get_bd_addr_spaces xdma/M_AXI]",
      "-range 4G -target_address_space [get_bd_addr_spaces xdma/M_AXI]"), "the host port does not see all of card"),
    # the device back on the XDMA's clock: no crossing, the clock not as stated
    (("connect_bd_net [get_bd_pins clock_wizard/clk_out1] [get_bd_pins device_reset/slowest_sync_clk] "
      "[get_bd_pins ndpkit/clk]", "connect_bd_net [get_bd_pins xdma/axi_aclk] [get_bd_pins device_reset/"
      "slowest_sync_clk] [get_bd_pins ndpkit/clk]"), "the device clock is driven by \\['xdma/axi_aclk'\\]"),
    (("CONFIG.CLKOUT1_REQUESTED_OUT_FREQ {200}", "CONFIG.CLKOUT1_REQUESTED_OUT_FREQ {250}"),
     "the device clock pin declares 200000000 Hz but clock_wizard makes 250 MHz"),
    (("[get_bd_pins clock_wizard/clk_out1] [get_bd_pins mem_sc0/aclk]", "[get_bd_pins xdma/axi_aclk] "
      "[get_bd_pins mem_sc0/aclk]"), "mem_sc0 \\(device interface m_axi_mem\\) does not cross"),
], ids=lambda v: "" if isinstance(v, tuple) else re.sub(r"\W+", "_", str(v))[:40])
@pytest.mark.xdist_group("small_u280")
def test_tcl_check_catches_a_broken_project(small_u280, tmp_path, mutation, message):
    _check_mutated(small_u280, tmp_path, mutation, message)


def _check_mutated(project, tmp_path, mutation, message):
    """A copy of ``project`` with one text of its Tcl replaced: the check fails with ``message``."""
    out = Path(shutil.copytree(project, tmp_path / "project"))
    tcl = out / "project.tcl"
    text = tcl.read_text()
    assert mutation[0] in text
    tcl.write_text(text.replace(mutation[0], mutation[1], 1))
    with pytest.raises(TclCheckError, match=message):
        check_project(out)


@pytest.fixture(scope="session")
def per_channel_u55c(tmp_path_factory):
    """A project with a memory port per instance, each on its own pseudo-channel (20
    dma_copy instances: 20 ports by default, pseudo-channels 20-31 unused)."""
    _, options, out, plan = _project("alveo_u55c", tmp_path_factory.mktemp("u55c"), engines="dma_copy*20")
    assert options["memory_ports"] == 20 and options["mem_size"] == 20 * (512 << 20)
    summary = check_project(out)
    assert summary["address_map"] == {f"m_axi_mem{k}": [k] for k in range(20)}
    assert plan["memory"]["host_range"] == 16 << 30         # 10 GiB of card memory in a 16 GiB window
    tcl = (out / "project.tcl").read_text()
    assert "CONFIG.USER_SWITCH_ENABLE_00 {FALSE}" in tcl and "CONFIG.USER_SWITCH_ENABLE_01 {FALSE}" in tcl
    assert "CONFIG.USER_SAXI_19 {true}" in tcl and "CONFIG.USER_SAXI_20 {false}" in tcl
    return out


@pytest.mark.parametrize("mutation, message", [
    # port 5 given pseudo-channel 6's addresses
    (("-offset 0xa0000000 -range 512M -target_address_space [get_bd_addr_spaces ndpkit/m_axi_mem5] "
      "[get_bd_addr_segs hbm/SAXI_05_8HI/HBM_MEM05]", "-offset 0xc0000000 -range 512M -target_address_space "
      "[get_bd_addr_spaces ndpkit/m_axi_mem5] [get_bd_addr_segs hbm/SAXI_05_8HI/HBM_MEM05]"),
     r"memory port m_axi_mem5 maps \[\('0xc0000000', '0x20000000'\)\], not its region \[0xa0000000"),
    # port 7's segment behind another channel's port (a lateral switch hop)
    (("[get_bd_addr_spaces ndpkit/m_axi_mem7] [get_bd_addr_segs hbm/SAXI_07_8HI/HBM_MEM07]",
      "[get_bd_addr_spaces ndpkit/m_axi_mem7] [get_bd_addr_segs hbm/SAXI_08_8HI/HBM_MEM07]"),
     r"memory port m_axi_mem7 reaches \['hbm/SAXI_07_8HI'\], but its segment hbm/SAXI_08_8HI/HBM_MEM07"),
    # a pseudo-channel clocked by the XDMA's 250 MHz (not the channel's full rate)
    (("connect_bd_net [get_bd_pins hbm_clock_wizard/clk_out1] [get_bd_pins hbm/AXI_03_ACLK]",
      "connect_bd_net [get_bd_pins xdma/axi_aclk] [get_bd_pins hbm/AXI_03_ACLK]"),
     "hbm/AXI_03_ACLK is not its SmartConnect's far clock at >= 450 MHz"),
    # the switch left on although every port has its own channel
    (("CONFIG.USER_SWITCH_ENABLE_01 {FALSE}", "CONFIG.USER_SWITCH_ENABLE_01 {TRUE}"),
     "every memory port has one pseudo-channel, but the HBM switch of stack 01 is not off"),
    # the host port seeing less than card memory
    (("-range 16G -target_address_space [get_bd_addr_spaces xdma/M_AXI]",
      "-range 8G -target_address_space [get_bd_addr_spaces xdma/M_AXI]"), "the host port does not see all of card"),
], ids=lambda v: "" if isinstance(v, tuple) else re.sub(r"\W+", "_", str(v))[:40])
@pytest.mark.xdist_group("per_channel_u55c")
def test_tcl_check_catches_a_wrong_channel_map(per_channel_u55c, tmp_path, mutation, message):
    _check_mutated(per_channel_u55c, tmp_path, mutation, message)


@pytest.mark.xdist_group("small_u280")
def test_tcl_check_catches_an_xdc_port_that_does_not_exist(small_u280, tmp_path):
    out = Path(shutil.copytree(small_u280, tmp_path / "project"))
    xdc = out / "constraints.xdc"
    xdc.write_text(xdc.read_text().replace("get_ports hbm_cattrip]", "get_ports hbm_catrip]", 1))
    with pytest.raises(TclCheckError, match="get_ports 'hbm_catrip': no such top-level port"):
        check_project(out)


def test_bitstream_without_vivado_generates_checks_and_exits_3(tmp_path):
    env = dict(os.environ, PATH=os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not (Path(p) / "vivado").exists()))
    proc = subprocess.run([sys.executable, "-m", "ndpkit_tools.bitstream", "alveo_u280", "--engines", "dma_copy*2",
                           "--memory-ports", "2", "--out", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Vivado is not on PATH" in proc.stdout and "Tcl check:" in proc.stdout
    for f in ("ndpkit_device.v", "project.tcl", "build.tcl", "constraints.xdc", "plan.json"):
        assert (tmp_path / f).exists()


@pytest.mark.long
@pytest.mark.parametrize("name", XILINX)
def test_default_card_build_passes_the_tcl_stub_check(name, tmp_path):
    """The board's own device (every engine, its lane counts and memory ports)."""
    board, options, out, plan = _project(name, tmp_path)
    summary = check_project(out)
    assert len(plan["memory_ports"]) == options["memory_ports"]
    assert summary["device_interfaces"] == sorted(["s_axil", "s_axi"] + plan["memory_ports"])


def test_ecp5_build_names_a_missing_tool_before_starting(monkeypatch):
    from ndpkit_tools.impl import ecp5_build
    monkeypatch.setitem(ecp5_build.TOOLS, "ECPPACK", "yowasp-ecppack-that-does-not-exist")
    with pytest.raises(BoardError, match="not installed: .*yowasp-ecppack-that-does-not-exist"):
        ecp5_build.build(load_board("ecp5_5g"), device_options(load_board("ecp5_5g")), Path("/nonexistent"))


@pytest.mark.long
def test_ecp5_bitstream_builds_and_meets_timing(tmp_path):
    """A real bitstream: yowasp synthesis, place and route and pack of the UART card."""
    from ndpkit_tools.impl.ecp5_build import build
    board = load_board("ecp5_5g")
    result = build(board, device_options(board), tmp_path)
    assert Path(result["bitstream"]).stat().st_size > 100_000
    assert result["meets_timing"], result["fmax_mhz"]
    assert result["used"]["TRELLIS_COMB"] > 1000 and result["used"]["DP16KD"] >= 32     # 64 KiB of block RAM
