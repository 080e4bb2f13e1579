"""``ndpkit.open`` checks every option against its schema (type, range, size units) and
names the bad one; ``sim?board=<name>`` takes the board's DRAM preset, clock and width,
the options given winning; the default model card carries every engine; the CLI defaults to the
model card, reports errors in one line, has ``--version``; the sim transport says when it
builds a card and how long the last build took."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ndpkit
from ndpkit.cli import main
from ndpkit.options import OPTIONS, OptionError, board_defaults, check_options, size
from ndpkit_spec.registry import REGISTRY


def test_sizes_take_units():
    assert [size(v) for v in ("64M", "64m", "1G", "16k", "1GiB", "2MB", 4096, "4096")] == \
        [64 << 20, 64 << 20, 1 << 30, 16 << 10, 1 << 30, 2 << 20, 4096, 4096]
    for bad in ("abc", "-1M", "1.5M", "", "M", True, None, 2.0):
        with pytest.raises(ValueError):
            size(bad)


def test_a_size_option_with_units_opens_the_card():
    with ndpkit.open("model?mem_size=64M") as dev:
        assert dev.mem_size == 64 << 20
    with ndpkit.open("model", mem_size="1M", guard="4K") as dev:
        assert dev.mem_size == 1 << 20 and dev.guard_bytes == 4096


# every case here raised a TypeError from deep inside a constructor, or was accepted
@pytest.mark.parametrize("uri, options, option, message", [
    ("model?mem_size=abc", {}, "mem_size", "'abc' is not a size"),
    ("model?mem_size=-1M", {}, "mem_size", "'-1M' is not a size"),
    ("model", {"mem_size": 0}, "mem_size", "outside 4K..1T"),
    ("model", {"mem_size": 1000}, "mem_size", "outside 4K..1T"),
    ("model", {"data_width": 100}, "data_width", "100 is not one of 64, 128, 256, 512, 1024"),
    ("sim", {"data_width": 64}, "data_width", "64 is not one of 128, 256, 512"),
    ("model?queue_depth=0", {}, "queue_depth", "outside 1..64"),
    ("model?clock_mhz=-5", {}, "clock_mhz", "outside 1..1000"),
    ("model?clock_mhz=fast", {}, "clock_mhz", "'fast' is not an integer"),
    ("model?engines=adam,warp", {}, "engines", "unknown engine 'warp'"),
    ("model?engines=graph&data_width=128", {}, "data_width", r"narrower than engine 'graph' needs \(512\)"),
    ("model?mem_size=4100", {"data_width": 512}, "mem_size", "not a whole number of 512-bit words"),
    ("model", {"mem_size": 4096 + 32, "data_width": 512}, "mem_size", "not a whole number of 512-bit words"),
    ("model?speed=3", {}, "speed", "not an option of a model card; options: clock_mhz, data_width"),
    ("sim?dma=fast", {}, "dma", "'fast' is not one of backdoor, axi"),
    ("xdma:/dev/xdma0?channel=9", {}, "channel", "outside 0..3"),
    ("xdma:/dev/xdma0?mem_size=1M", {}, "mem_size", "not an option of a xdma card"),
    ("uart:/dev/ttyUSB0?baud=0", {}, "baud", "outside 300..100000000"),
    ("sim?board=alveo_u56c", {}, "board", "'alveo_u56c' is not one of alveo_u280, alveo_u55c, ecp5_5g, smartssd"),
    ("sim", {"board": "u55c"}, "board", "'u55c' is not one of alveo_u280, alveo_u55c, ecp5_5g, smartssd"),
    ("model?board=alveo_u55c", {}, "board", "not an option of a model card"),
    # the board's preset times every access: a latency is for the ideal memory, given explicitly
    ("sim?board=alveo_u55c&read_latency=10", {}, "read_latency",
     r"memory=hbm2_pc \(board alveo_u55c's preset\) times every access itself .* or give memory=ideal"),
    ("sim?board=smartssd&memory=hbm3", {}, "memory", "'hbm3' is not one of ideal, hbm2_pc, ddr4_2400"),
])
def test_bad_options_are_named_before_anything_starts(uri, options, option, message):
    with pytest.raises(OptionError, match=message) as e:
        ndpkit.open(uri, **options)
    assert e.value.option == option and str(e.value).startswith(f"{option}: ")
    assert isinstance(e.value, ValueError) and isinstance(e.value, ndpkit.NdpkitError)


#: what ``sim?board=<name>`` adds, from each board.toml: the DRAM preset ([memory] sim_preset),
#: the engines' clock and the bus width ([device]); the ECP5 has no preset (block RAM) and a
#: width the sim card does not take (64)
BOARD_SIM = {
    "alveo_u55c": {"memory": "hbm2_pc", "clock_mhz": 225, "data_width": 512},
    "alveo_u280": {"memory": "hbm2_pc", "clock_mhz": 200, "data_width": 512},
    "smartssd": {"memory": "ddr4_2400", "clock_mhz": 200, "data_width": 512},
    "ecp5_5g": {"clock_mhz": 48},
}


@pytest.mark.parametrize("board", sorted(BOARD_SIM))
def test_a_board_gives_the_sim_card_its_preset_clock_and_width(board):
    # (not the board's engines, attention*32 on the U55C: the sim card keeps its dma_copy)
    assert check_options("sim", {"board": board}) == {"board": board, **BOARD_SIM[board]}


def test_options_given_win_over_the_board():
    assert check_options("sim", {"board": "alveo_u55c", "memory": "ideal"})["memory"] == "ideal"
    assert check_options("sim", {"board": "smartssd", "memory": "hbm2_pc"})["memory"] == "hbm2_pc"
    given = check_options("sim", {"board": "alveo_u55c", "clock_mhz": "250", "data_width": "256"})
    assert given == {"board": "alveo_u55c", "clock_mhz": 250, "data_width": 256, "memory": "hbm2_pc"}
    # on the ideal memory its latencies may be set again
    ideal = check_options("sim", {"board": "alveo_u55c", "memory": "ideal", "read_latency": "10"})
    assert ideal["memory"] == "ideal" and ideal["read_latency"] == 10
    # the same through ndpkit.open's keyword arguments (checked before anything starts)
    with pytest.raises(OptionError, match="board: 'nope' is not one of"):
        ndpkit.open("sim?memory=ideal", board="nope")
    assert board_defaults("alveo_u55c", {"memory": "ideal", "clock_mhz": 100}) == {"data_width": 512}


def test_a_board_with_attention_named_gives_its_lanes():
    """Only the engines named are on the card; with attention among them at the board's
    width, the build's MAC lanes (32 on every Xilinx board, not the sim's data_width / 8)."""
    named = check_options("sim", {"board": "alveo_u55c", "engines": "dma_copy,attention*2"})
    assert named["engines"] == ["dma_copy", "attention*2"] and named["attention_lanes"] == 32
    assert "attention_lanes" not in check_options("sim", {"board": "alveo_u55c", "engines": "attention",
                                                          "data_width": "256"})
    assert check_options("sim", {"board": "smartssd", "engines": "attention", "attention_lanes": "16"}
                         )["attention_lanes"] == 16
    assert "attention_lanes" not in check_options("sim", {"board": "smartssd", "engines": "adam"})


def test_a_board_file_with_an_unknown_preset_is_named(tmp_path, monkeypatch):
    import ndpkit.options
    path = tmp_path / "fake" / "board.toml"
    path.parent.mkdir()
    path.write_text('name = "fake"\n[memory]\nsim_preset = "hbm3"\n[device]\nclock_mhz = 100\n')
    monkeypatch.setattr(ndpkit.options, "board_files", lambda: {"fake": path})
    with pytest.raises(OptionError, match=rf"board: fake: {path}: \[memory\] sim_preset 'hbm3' is not a DRAM preset; "
                                          r"presets: hbm2_pc, ddr4_2400") as e:
        check_options("sim", {"board": "fake"})
    assert e.value.option == "board"
    path.write_text('name = "fake"\n[memory]\n[device]\nclock_mhz = 5000\n')
    with pytest.raises(OptionError, match=r"board: fake: .*\[device\] clock_mhz: 5000 is outside 1..1000"):
        check_options("sim", {"board": "fake"})
    path.write_text('name = "fake"\n[memory]\n[device]\nclock_mhz = 100\n')
    assert check_options("sim", {"board": "fake"}) == {"board": "fake", "clock_mhz": 100}     # ideal memory
    monkeypatch.setattr(ndpkit.options, "board_files", lambda: {})
    with pytest.raises(OptionError, match=r"board: 'alveo_u55c' is not one of \(none installed\)"):
        check_options("sim", {"board": "alveo_u55c"})


def test_board_lookup_imports_no_tool():
    """The driver reads the board files as the tools package's data, never importing it
    (sw/tests/test_package_layers.py)."""
    code = ("import sys, ndpkit.options as o; o.check_options('sim', {'board': 'alveo_u55c'}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ndpkit_tools', 'ndpkit_hw', 'amaranth')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_bad_uris():
    with pytest.raises(TypeError, match="uri: a device URI string"):
        ndpkit.open(123)
    for bad in ("", "xdma:", "modle", "tcp://card"):
        with pytest.raises(ValueError, match="uri: unknown device"):
            ndpkit.open(bad)


def test_every_option_is_documented():
    for kind, schema in OPTIONS.items():
        for name, option in schema.items():
            assert option.doc, f"{kind} option {name} has no description"


def test_the_default_model_card_carries_every_engine():
    with ndpkit.open("model") as dev:
        assert list(dev.engines) == list(REGISTRY)
    with ndpkit.open("model?data_width=128") as dev:      # every engine the width allows
        assert set(dev.engines) == {n for n, s in REGISTRY.items() if s.min_data_width <= 128}
    with ndpkit.open("model?engines=dma_copy") as dev:
        with pytest.raises(ndpkit.NdpkitError, match=r"no 'adam' engine.*ndpkit.open\('model\?engines=adam'\)"):
            dev.adam


def test_cli_defaults_to_the_model_card(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert '"transport": "model"' in out.replace("'", '"') or "model" in out
    assert all(name in out for name in REGISTRY)
    assert main(["selftest", "--rounds", "5", "--seed", "3"]) == 0
    assert "selftest passed" in capsys.readouterr().out


@pytest.mark.parametrize("device, message", [
    ("model?mem_size=abc", "ndpkit info: OptionError: mem_size: 'abc' is not a size"),
    ("model?mem_size=-1M", "ndpkit info: OptionError: mem_size: '-1M' is not a size"),
    ("", "ndpkit info: ValueError: uri: unknown device ''"),
    ("/dev/ndpkit-no-such-card", "ndpkit info: TransportClosed: no XDMA device at /dev/ndpkit-no-such-card"),
])
def test_cli_errors_are_one_line(capsys, device, message):
    assert main(["info", "--device", device]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err


def test_cli_version():
    out = subprocess.run([sys.executable, "-m", "ndpkit.cli", "--version"], capture_output=True, text=True, check=True)
    from importlib.metadata import version
    assert out.stdout.strip() == f"ndpkit {version('ndpkit')}"


@pytest.mark.sim
@pytest.mark.xdist_group("sim_build_messages")
def test_sim_says_when_it_builds(tmp_path):
    """A first open of a configuration prints that it is building (and, on the second
    build, how long the last one took); a cached one prints nothing."""
    env = dict(os.environ, NDPKIT_BUILD_DIR=str(tmp_path))
    code = "import ndpkit\nwith ndpkit.open('sim?mem_size=64K&data_width=128&queue_depth={q}') as d: d.cycles()"
    runs = [subprocess.run([sys.executable, "-c", code.format(q=q)], env=env, capture_output=True, text=True,
                           timeout=1200) for q in (2, 2, 3)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    first, cached, second = (r.stderr for r in runs)
    assert "ndpkit sim: building ndpkit_sim_card-" in first and "ndpkit sim: built in" in first
    assert "ndpkit sim:" not in cached
    assert "the last build took" in second


def test_the_driver_doc_lists_every_option():
    from pathlib import Path
    from ndpkit.options import options_table
    doc = (Path(__file__).resolve().parents[2] / "docs" / "driver.md").read_text()
    table = doc[doc.index("<!-- options:begin"):doc.index("<!-- options:end -->")].split("-->\n", 1)[1]
    assert table == options_table(), "docs/driver.md's option table is stale: paste ndpkit.options.options_table()"


def test_clocks_past_255_mhz_reach_the_driver():
    """The shell's clock register holds 16 bits (interface 0.4): a 450 MHz build reports
    450 (0.3's 8-bit field topped out at 255)."""
    from ndpkit_hw.device import Device
    with ndpkit.open("model?clock_mhz=450") as dev:
        assert dev.clock_mhz == 450 and dev.info()["clock_mhz"] == 450
    assert Device(clock_mhz=450, mem_size=1 << 20).clock_mhz == 450
    with pytest.raises(ValueError, match="clock_mhz must be 1..1000"):
        Device(clock_mhz=1500, mem_size=1 << 20)
