"""``ndpkit.open`` checks every option against its schema (type, range, size units) and
names the bad one; the default model card carries every engine; the CLI defaults to the
model card, reports errors in one line, has ``--version``; the sim transport says when it
builds a card and how long the last build took."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ndpkit
from ndpkit.cli import main
from ndpkit.options import OPTIONS, OptionError, size
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
])
def test_bad_options_are_named_before_anything_starts(uri, options, option, message):
    with pytest.raises(OptionError, match=message) as e:
        ndpkit.open(uri, **options)
    assert e.value.option == option and str(e.value).startswith(f"{option}: ")
    assert isinstance(e.value, ValueError) and isinstance(e.value, ndpkit.NdpkitError)


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
