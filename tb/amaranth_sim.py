"""Running a component in Amaranth's simulator from a test bench (the cocotb benches use
ndpkit_tools.sim instead)."""
from amaranth.sim import Simulator

__all__ = ["run_to_end"]


def run_to_end(dut, bench, deadline: int = 200_000):
    """Run the async testbench ``bench(ctx)`` against ``dut`` to its end, failing if it
    has not ended after ``deadline`` cycles."""
    finished = []

    async def whole(ctx):
        await bench(ctx)
        finished.append(True)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(whole)
    # in steps, so the clock stops soon after the bench ends, not at the deadline
    step = 1000
    for end in range(step, deadline + step, step):
        sim.run_until(min(end, deadline) * 1e-8)
        if finished:
            return
    assert finished, f"the bench did not finish in {deadline} cycles"
