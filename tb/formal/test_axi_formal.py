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
from amaranth.hdl import Assert, Assume, Cat, Module, Signal, Mux

from ndpkit_tools.formal import ChannelMonitor, assume_stable, prove, tools_available

pytestmark = [pytest.mark.formal,
              pytest.mark.skipif(not tools_available(), reason="formal tools missing: pip install 'ndpkit[formal]'")]

DMA = dict(addr_width=16, data_width=32, id_width=1, max_burst_bytes=16, max_outstanding=2, axi_id=0)
WORD = 4
BEATS = 4
INTERCONNECT_DEPTH = 12


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


def _burst_shadow(m, addr_fire, length, data_valid, data_fire, data_last, role, what, *, depth=2,
                  bound_role=Assert):
    """The lengths of accepted bursts whose data beats are not all through (a queue of
    ``depth``): data only for an accepted burst, last exactly on its last beat
    (``role`` Assert: the design sends the data; Assume: the other side does), at most
    ``depth`` bursts in flight (``bound_role``).  Returns (burst-complete strobe,
    bursts in flight)."""
    lens = [Signal(8, name=f"{what}_shadow_len{i}") for i in range(depth)]
    count = Signal(range(depth + 2), name=f"{what}_bursts")
    beat = Signal(8, name=f"{what}_beat")
    done = data_fire & data_last
    with m.If(data_valid):
        m.d.comb += [role(count != 0, f"{what}: a beat before its burst's address"),
                     role(data_last == (beat == lens[0]), f"{what}: last not on the burst's last beat")]
    with m.If(data_fire):
        m.d.sync += beat.eq(Mux(data_last, 0, beat + 1))
    for k in range(depth):
        following = lens[k + 1] if k + 1 < depth else 0
        with m.If(done):                          # the head leaves; a new burst lands behind the rest
            m.d.sync += lens[k].eq(Mux(addr_fire & (count == k + 1), length, following))
        with m.Elif(addr_fire & (count == k)):
            m.d.sync += lens[k].eq(length)
    m.d.sync += count.eq(count + addr_fire - done)
    m.d.comb += bound_role(count <= depth, f"{what}: more bursts in flight than {depth}")
    return done, count


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
    w_done, _ = _burst_shadow(m, bus.awvalid & bus.awready, bus.awlen, bus.wvalid, bus.wvalid & bus.wready,
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
    from ndpkit_spec.engines.dma_copy import BLOCK as DMA_COPY
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


def test_interconnect_formal(tmp_path):
    """The N:1 interconnect (2 masters): every channel it drives keeps the handshake
    rules; a request reaches the shared port unchanged with its master's index on its
    ID (payload preserved, so the engines' burst rules carry over); W bursts reach the
    shared port whole, in AW order, wlast on each burst's last beat; every R/B goes
    back to the master that asked, none to one that did not.  The masters obey the
    protocol (W after their own AW, at most 2 bursts each in flight); the memory
    answers only IDs it was asked for and takes W after AW (as ours does)."""
    from ndpkit_hw.bus.interconnect import AxiInterconnect
    m = Module()
    m.submodules.dut = dut = AxiInterconnect(num_masters=2, addr_width=16, data_width=32, id_width=1,
                                             w_route_depth=2)
    down = dut.m
    ports = [dut.s0, dut.s1]
    inputs = []
    for i, s in enumerate(ports):
        for ch, fields in (("ar", ["addr", "len", "size", "burst", "id"]), ("aw", ["addr", "len", "size", "burst", "id"])):
            payload = [getattr(s, f"{ch}{f}") for f in fields]
            ChannelMonitor(m, f"s{i}_{ch}", getattr(s, f"{ch}valid"), getattr(s, f"{ch}ready"), payload, role=Assume)
            inputs += [getattr(s, f"{ch}valid")] + payload
            # the shared port carries the last request this master handed over, with its index on the ID
            held = Signal(len(Cat(*payload)), name=f"s{i}_{ch}_last")
            with m.If(getattr(s, f"{ch}valid") & getattr(s, f"{ch}ready")):
                m.d.sync += held.eq(Cat(*payload))
            down_payload = Cat(*[getattr(down, f"{ch}{f}") for f in fields[:-1]], getattr(down, f"{ch}id")[:1])
            with m.If(getattr(down, f"{ch}valid") & (getattr(down, f"{ch}id")[1:] == i)):
                m.d.comb += Assert(down_payload == held, f"{ch}: master {i}'s request changed on the way")
        ChannelMonitor(m, f"s{i}_w", s.wvalid, s.wready, [s.wdata, s.wstrb, s.wlast], role=Assume)
        _burst_shadow(m, s.awvalid & s.awready, s.awlen, s.wvalid, s.wvalid & s.wready, s.wlast, Assume,
                      f"s{i}_w", bound_role=Assume)
        ChannelMonitor(m, f"s{i}_r", s.rvalid, s.rready, [s.rdata, s.rresp, s.rlast, s.rid], role=Assert)
        ChannelMonitor(m, f"s{i}_b", s.bvalid, s.bready, [s.bresp, s.bid], role=Assert)
        inputs += [s.wvalid, s.wdata, s.wstrb, s.wlast, s.rready, s.bready]
    ChannelMonitor(m, "m_ar", down.arvalid, down.arready, [down.araddr, down.arlen, down.arid], role=Assert)
    ChannelMonitor(m, "m_aw", down.awvalid, down.awready, [down.awaddr, down.awlen, down.awid], role=Assert)
    ChannelMonitor(m, "m_w", down.wvalid, down.wready, [down.wdata, down.wstrb, down.wlast], role=Assert)
    ChannelMonitor(m, "m_r", down.rvalid, down.rready, [down.rdata, down.rresp, down.rlast, down.rid], role=Assume)
    ChannelMonitor(m, "m_b", down.bvalid, down.bready, [down.bresp, down.bid], role=Assume)
    # W on the shared port: whole bursts in AW order (checked as it is taken: a slave may
    # see W before AW, ours waits for AW before taking W)
    w_fire = down.wvalid & down.wready
    _, in_flight = _burst_shadow(m, down.awvalid & down.awready, down.awlen, w_fire, w_fire, down.wlast, Assert,
                                 "m_w", depth=6, bound_role=Assert)
    m.d.comb += Assume(~down.wready | (in_flight != 0))
    # responses: the memory answers only (ID-wise) outstanding requests; each reaches its master
    for ch, req_fire, resp_valid, resp_fire, last in (
            ("r", down.arvalid & down.arready, down.rvalid, down.rvalid & down.rready, down.rlast),
            ("b", down.awvalid & down.awready, down.bvalid, down.bvalid & down.bready, 1)):
        req_id = getattr(down, "arid" if ch == "r" else "awid")
        resp_id = getattr(down, f"{ch}id")
        for ident in range(4):
            pending = Signal(4, name=f"m_{ch}_pending{ident}")
            m.d.sync += pending.eq(pending + (req_fire & (req_id == ident)) - (resp_fire & last & (resp_id == ident)))
            with m.If(resp_valid & (resp_id == ident)):
                m.d.comb += Assume(pending != 0)
            s = ports[ident >> 1]
            asked, answered = Signal(4, name=f"s{ident >> 1}_{ch}_asked{ident & 1}"), \
                Signal(4, name=f"s{ident >> 1}_{ch}_answered{ident & 1}")
            s_req = getattr(s, "arvalid" if ch == "r" else "awvalid") & getattr(s, "arready" if ch == "r" else "awready") \
                & (getattr(s, "arid" if ch == "r" else "awid") == (ident & 1))
            s_valid = getattr(s, f"{ch}valid") & (getattr(s, f"{ch}id") == (ident & 1))
            s_fire = s_valid & getattr(s, f"{ch}ready") & (getattr(s, "rlast") if ch == "r" else 1)
            m.d.sync += [asked.eq(asked + s_req), answered.eq(answered + s_fire)]
            m.d.comb += Assert(~s_valid | (asked != answered), f"{ch}: a response master {ident >> 1} did not ask for")
        inputs += [resp_valid, resp_id, getattr(down, f"{ch}resp")]
    inputs += [down.arready, down.awready, down.wready, down.rdata, down.rlast]
    prove(m, inputs, name="interconnect", depth=INTERCONNECT_DEPTH, work_dir=tmp_path)
