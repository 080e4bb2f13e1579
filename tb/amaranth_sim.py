"""Running a component in Amaranth's simulator from a test bench (the cocotb benches use
ndpkit_tools.sim instead)."""
from amaranth.sim import Simulator

__all__ = ["Offer", "run_to_end"]


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


class Offer:
    """Offers ``items`` on a stream ``port`` with random gaps (valid with probability
    ``rate``), keeping an offered item valid until it is taken, as the stream rule
    asks.  Each cycle: :meth:`drive` before reading the design, :meth:`advance` after
    the cycle's inputs are set; ``i`` counts the items taken.  ``items`` may grow or be
    replaced between cycles."""

    def __init__(self, port, items, rng, rate: float = 0.7):
        self.port, self.items, self.rng, self.rate = port, items, rng, rate
        self.i, self.held = 0, False

    def drive(self, ctx):
        on = self.held or (self.i < len(self.items) and self.rng.random() < self.rate)
        ctx.set(self.port.valid, on)
        if self.items:
            ctx.set(self.port.payload, self.items[min(self.i, len(self.items) - 1)])

    def advance(self, ctx) -> bool:
        """Whether the item was taken this cycle (else it stays offered, if it was)."""
        fired = bool(ctx.get(self.port.valid) and ctx.get(self.port.ready))
        self.held = bool(ctx.get(self.port.valid)) and not fired
        self.i += fired
        return fired


class CreditSink:
    """The buffer of a producer that writes on credit (an always-ready stream ``port``
    and the room it is told, ``space``: :attr:`ndpkit_hw.bus.dma.BurstWriter.space`):
    ``capacity`` words, drained one a cycle with probability ``rate`` outside pauses of
    up to ``pause`` cycles (a bus busy elsewhere: the buffer fills and the producer must
    hold back); a word pushed past the room it was given fails the bench.  Each cycle, before the tick:
    :meth:`cycle` (sets ``space`` from the words held, takes a pushed word into
    ``words``)."""

    def __init__(self, port, space, rng, capacity: int = 32, rate: float = 0.7, pause: int = 200):
        self.port, self.space, self.rng, self.capacity, self.rate = port, space, rng, capacity, rate
        self.pause, self.paused = pause, 0
        self.held, self.words = 0, []

    def cycle(self, ctx) -> None:
        room = self.capacity - 1 - self.held          # as BurstWriter.space: one kept for its output register
        ctx.set(self.space, room)
        if ctx.get(self.port.valid):
            assert room > 0, f"a word pushed with no room (word {len(self.words)}, {self.held} held)"
            self.words.append(ctx.get(self.port.payload))
            self.held += 1
        if self.paused:
            self.paused -= 1
        elif self.rng.random() < 0.01:
            self.paused = self.rng.randrange(self.pause + 1)
        elif self.held and self.rng.random() < self.rate:
            self.held -= 1
