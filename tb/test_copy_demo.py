"""The `make demo` device as a test: CSR block over AXI4-Lite, reader -> writer through
the interconnect into the memory model, rejected commands, guard pages.  The cocotb
side is ndpkit.sim.demo_bench (shared with `make demo`)."""
import pytest


@pytest.mark.sim
def test_copy_demo():
    from ndpkit.sim.runner import Design, run_bench
    from ndpkit_hw.demo import CopyDemo
    params = dict(data_width=512, mem_size=1 << 20, length=64 * 1024, seed=7, read_latency=64)
    run_bench(Design(CopyDemo(data_width=512, mem_size=1 << 20, read_latency=64), "copy_demo"),
              "ndpkit.sim.demo_bench", params=params)
