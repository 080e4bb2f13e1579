"""The simulated card on a DRAM timing preset (``ndpkit.open("sim?memory=hbm2_pc")``):
the same answers as on the ideal memory, in more cycles, never above the shared bus's
peak; the options that make no sense with a preset are refused."""
import random

import numpy as np
import pytest

import ndpkit
from ndpkit.options import OptionError
from ndpkit_spec.dram import PRESETS

pytestmark = pytest.mark.xdist_group("sim-hbm2_pc")


def test_option_checks():
    with pytest.raises(OptionError, match="memory.*not one of ideal, hbm2_pc, ddr4_2400"):
        ndpkit.open("sim?memory=hbm3")
    with pytest.raises(OptionError, match="read_latency.*memory=hbm2_pc times every access"):
        ndpkit.open("sim?memory=hbm2_pc&read_latency=10")


@pytest.mark.sim
def test_copy_on_hbm2_pc_against_ideal(cards):
    rng = random.Random(7)
    length = 256 << 10
    data = np.frombuffer(rng.randbytes(length), np.uint8)
    cycles = {}
    for memory in ("ideal", "hbm2_pc"):
        dev = cards("sim" if memory == "ideal" else f"sim?memory={memory}")
        src, dst = dev.upload(data), dev.alloc(length)
        done = dev.copy(dst, src, length)
        assert done.ok and np.array_equal(dst.download(np.uint8, count=length), data)
        cycles[memory] = done.cycles
        src.free()
        dst.free()
    timing = PRESETS["hbm2_pc"]
    shared_peak = timing.peak_bytes_per_s / (dev.clock_mhz * 1e6)       # both directions together
    rate = 2 * length / cycles["hbm2_pc"]
    print(f"copy of {length} B: ideal {cycles['ideal']} cycles, hbm2_pc {cycles['hbm2_pc']} cycles "
          f"({rate:.1f} B/cycle read + written, the pseudo-channel's peak {shared_peak:.1f})")
    assert rate <= shared_peak, "more bytes a cycle than the pseudo-channel's one data bus carries"
    assert rate >= 0.6 * shared_peak, "a long sequential copy should keep the pseudo-channel mostly busy"
    assert cycles["hbm2_pc"] > cycles["ideal"]
    with pytest.raises(ValueError, match="read_latency.*hbm2_pc"):
        dev.transport.set_memory(read_latency=5)


@pytest.mark.sim
def test_a_board_build_simulates_on_its_preset(cards):
    """``sim?board=alveo_u55c``: the card on the U55C's DRAM preset (one HBM2
    pseudo-channel).  At 250 MHz here, the clock given winning over the board's 200: the
    same card, and Verilator build, as ``sim?memory=hbm2_pc`` above."""
    dev = cards("sim?board=alveo_u55c&clock_mhz=250")
    info = dev.info()
    assert (info["board"], info["memory"], info["clock_mhz"], info["engines"]) == \
        ("alveo_u55c", "hbm2_pc", 250, ["dma_copy"])       # not the board's attention*32
    length = 64 << 10
    data = np.frombuffer(random.Random(3).randbytes(length), np.uint8)
    src, dst = dev.upload(data), dev.alloc(length)
    done = dev.copy(dst, src, length)
    assert done.ok and np.array_equal(dst.download(np.uint8, count=length), data)
    # the pseudo-channel's one data bus, not the ideal memory's two directions at 64 B a cycle each
    assert 2 * length / done.cycles <= PRESETS["hbm2_pc"].peak_bytes_per_cycle(dev.clock_mhz)
    src.free()
    dst.free()
    with pytest.raises(ValueError, match="read_latency.*hbm2_pc"):
        dev.transport.set_memory(read_latency=5)
