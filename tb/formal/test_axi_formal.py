"""Bounded formal proofs (SymbiYosys, BMC) of the AXI rules for the bus blocks every
engine is built from: the burst read and write engines and the AXI4-Lite register
block.  The environment (the other side of every channel) is constrained to the
protocol; the design's side is asserted:

- every channel the design drives: valid stays high until ready, payload stable while
  stalled;
- bursts: INCR, full-width beats, at most ``max_burst`` beats, never across a 4 KiB
  boundary, never outside the address window (whatever the command asks);
- write data: no W beat before its burst's AW, ``wlast`` exactly on the burst's last
  beat (burst length honoured);
- the register block: one response per request, never a response without one.

Depths are stated per proof (``make formal``, also part of ``make sim``): a depth of
12 cycles covers a command, its bursts (4 beats), their write data and responses with
stalls.  Small parameters (16-bit addresses, 32-bit data, 4-beat bursts, 2
outstanding) keep the state space small; the logic is the same at any width.  The
solver's time grows steeply with depth (the engines' 32-bit lengths and 48-bit byte
counters are all state): about 4 minutes for the write engine at 12.
"""
import pytest
from amaranth.hdl import Assert, Assume, Module, Signal, Mux

from ndpkit.sim.formal import ChannelMonitor, assume_stable, prove, tools_available

pytestmark = [pytest.mark.formal,
              pytest.mark.skipif(not tools_available(), reason="formal tools missing: pip install 'ndpkit[formal]'")]

DMA = dict(addr_width=16, data_width=32, id_width=1, max_burst_bytes=16, max_outstanding=2, axi_id=0)
WORD = 4
BEATS = 4


def _window_and_command_env(m, dut):
    """Static window; commands obey the stream protocol, any address and length."""
    assume_stable(m, dut.window_base, dut.window_size)
    # the shell's window lies inside the address space (card memory)
    m.d.comb += Assume(dut.window_base + dut.window_size <= (1 << 16))
    ChannelMonitor(m, "cmd", dut.cmd.valid, dut.cmd.ready, dut.cmd.payload.as_value(), role=Assume)
    ChannelMonitor(m, "status", dut.status.valid, dut.status.ready, dut.status.payload.as_value(), role=Assert)


def _burst_rules(m, bus, prefix, dut):
    valid = getattr(bus, f"{prefix}valid")
    addr, length = getattr(bus, f"{prefix}addr"), getattr(bus, f"{prefix}len")
    ChannelMonitor(m, prefix, valid, getattr(bus, f"{prefix}ready"),
                   [addr, length, getattr(bus, f"{prefix}size"), getattr(bus, f"{prefix}burst"),
                    getattr(bus, f"{prefix}id")], role=Assert)
    end = Signal(18, name=f"{prefix}_end")
    m.d.comb += end.eq(addr + (length + 1) * WORD)
    with m.If(valid):
        m.d.comb += [
            Assert(length < BEATS, f"{prefix}: burst longer than max_burst"),
            Assert(getattr(bus, f"{prefix}burst") == 1, f"{prefix}: not INCR"),
            Assert(getattr(bus, f"{prefix}size") == 2, f"{prefix}: not full-width beats"),
            Assert(addr[:2] == 0, f"{prefix}: unaligned burst"),
            Assert((addr >> 12) == ((end - 1) >> 12), f"{prefix}: burst crosses a 4 KiB boundary"),
            Assert((addr >= dut.window_base) & (end <= dut.window_base + dut.window_size),
                   f"{prefix}: burst outside the window"),
        ]


def _burst_shadow(m, addr_fire, length, data_valid, data_fire, data_last, role, what):
    """The lengths of accepted bursts whose data beats are not all through (a 2-entry
    queue, max_outstanding = 2): data only for an accepted burst, last exactly on its
    last beat (``role`` Assert: the design sends the data; Assume: the memory does).
    Returns the burst-complete strobe."""
    lens = [Signal(8, name=f"{what}_shadow_len{i}") for i in range(2)]
    count = Signal(range(3), name=f"{what}_bursts")
    beat = Signal(8, name=f"{what}_beat")
    done = data_fire & data_last
    with m.If(data_valid):
        m.d.comb += [role(count != 0, f"{what}: a beat before its burst's address"),
                     role(data_last == (beat == lens[0]), f"{what}: last not on the burst's last beat")]
    with m.If(data_fire):
        m.d.sync += beat.eq(Mux(data_last, 0, beat + 1))
    with m.If(addr_fire & done):
        m.d.sync += [lens[0].eq(Mux(count == 1, length, lens[1])), lens[1].eq(length)]
    with m.Elif(addr_fire):
        m.d.sync += count.eq(count + 1)
        with m.If(count == 0):
            m.d.sync += lens[0].eq(length)
        with m.Else():
            m.d.sync += lens[1].eq(length)
    with m.Elif(done):
        m.d.sync += [count.eq(count - 1), lens[0].eq(lens[1])]
    m.d.comb += Assert(count <= 2, "more bursts in flight than max_outstanding")
    return done


def test_burst_writer_formal(tmp_path):
    from ndpkit_hw.bus.dma import BurstWriter
    m = Module()
    m.submodules.dut = dut = BurstWriter(**DMA)
    bus = dut.bus
    _window_and_command_env(m, dut)
    ChannelMonitor(m, "data", dut.data.valid, dut.data.ready, dut.data.payload.as_value(), role=Assume)
    _burst_rules(m, bus, "aw", dut)
    ChannelMonitor(m, "w", bus.wvalid, bus.wready, [bus.wdata, bus.wstrb, bus.wlast], role=Assert)
    ChannelMonitor(m, "b", bus.bvalid, bus.bready, [bus.bresp, bus.bid], role=Assume)
    w_done = _burst_shadow(m, bus.awvalid & bus.awready, bus.awlen, bus.wvalid, bus.wvalid & bus.wready,
                           bus.wlast, Assert, "w")
    # B only for bursts whose W beats were all sent
    sent, answered = Signal(4), Signal(4)
    m.d.sync += [sent.eq(sent + w_done), answered.eq(answered + (bus.bvalid & bus.bready))]
    m.d.comb += Assume(~bus.bvalid | (sent != answered))
    ports = [dut.cmd.valid, dut.cmd.payload.as_value(), dut.data.valid, dut.data.payload.as_value(),
             dut.status.ready, dut.window_base, dut.window_size, bus.awready, bus.wready, bus.bvalid, bus.bresp,
             bus.bid]
    prove(m, ports, name="burst_writer", depth=12, work_dir=tmp_path)


def test_burst_reader_formal(tmp_path):
    from ndpkit_hw.bus.dma import BurstReader
    m = Module()
    m.submodules.dut = dut = BurstReader(**DMA)
    bus = dut.bus
    _window_and_command_env(m, dut)
    ChannelMonitor(m, "data", dut.data.valid, dut.data.ready, dut.data.payload.as_value(), role=Assert)
    _burst_rules(m, bus, "ar", dut)
    ChannelMonitor(m, "r", bus.rvalid, bus.rready, [bus.rdata, bus.rresp, bus.rlast, bus.rid], role=Assume)
    # the memory answers each accepted AR with exactly arlen + 1 beats, rlast on the last
    _burst_shadow(m, bus.arvalid & bus.arready, bus.arlen, bus.rvalid, bus.rvalid & bus.rready, bus.rlast,
                  Assume, "r")
    ports = [dut.cmd.valid, dut.cmd.payload.as_value(), dut.data.ready, dut.status.ready, dut.window_base,
             dut.window_size, bus.arready, bus.rvalid, bus.rdata, bus.rresp, bus.rlast, bus.rid]
    prove(m, ports, name="burst_reader", depth=12, work_dir=tmp_path)


def test_csr_block_formal(tmp_path):
    """AXI4-Lite: responses held until taken, one per request, none unasked."""
    from ndpkit.regs.blocks import DMA_COPY
    from ndpkit_hw.shell.csr import CSRBlock
    m = Module()
    m.submodules.dut = dut = CSRBlock(DMA_COPY)
    bus = dut.bus
    ChannelMonitor(m, "aw", bus.awvalid, bus.awready, bus.awaddr, role=Assume)
    ChannelMonitor(m, "w", bus.wvalid, bus.wready, [bus.wdata, bus.wstrb], role=Assume)
    ChannelMonitor(m, "ar", bus.arvalid, bus.arready, bus.araddr, role=Assume)
    ChannelMonitor(m, "b", bus.bvalid, bus.bready, bus.bresp, role=Assert)
    ChannelMonitor(m, "r", bus.rvalid, bus.rready, [bus.rdata, bus.rresp], role=Assert)
    for prefix, requests in (("write", [bus.awvalid & bus.awready]), ("read", [bus.arvalid & bus.arready])):
        asked, answered = Signal(4, name=f"{prefix}_asked"), Signal(4, name=f"{prefix}_answered")
        resp = (bus.bvalid & bus.bready) if prefix == "write" else (bus.rvalid & bus.rready)
        valid = bus.bvalid if prefix == "write" else bus.rvalid
        m.d.sync += [asked.eq(asked + requests[0]), answered.eq(answered + resp)]
        m.d.comb += [Assert((asked - answered)[:4] <= 1, f"{prefix}: more than one request outstanding"),
                     Assert(~valid | (asked != answered), f"{prefix}: a response nobody asked for")]
    # writes: AW and W counted apart; a B needs both
    w_count = Signal(4)
    m.d.sync += w_count.eq(w_count + (bus.wvalid & bus.wready))
    ports = [p for p in (bus.awvalid, bus.awaddr, bus.wvalid, bus.wdata, bus.wstrb, bus.bready, bus.arvalid,
                         bus.araddr, bus.rready)]
    prove(m, ports, name="csr_block", depth=16, work_dir=tmp_path)
