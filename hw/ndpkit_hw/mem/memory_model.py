"""AXI4 memory model in gateware, so the whole data plane stays inside Verilator.

It stands where the MIG DDR4 / HBM controller stands on a card.  Parameters:

- ``size`` bytes of storage at ``base``, one bus word wide (``ndpkit_sim_ram``, a
  small hand-written Verilog RAM in ``hw/ndpkit_hw/verilog``: simulation only);
- ``read_latency``: cycles from the AR handshake to the first R beat offered
  (at least 2: the request queue and the synchronous RAM take one each);
  ``write_latency``: cycles from the last W handshake to B offered (at least 1);
- ``max_outstanding``: AR and AW requests it queues (further ones wait on READY;
  default 16, or :data:`~ndpkit_hw.mem.dram.DRAM_PORT_QUEUE` with a DRAM timing model);
- ``bytes_per_cycle``: sustained bandwidth of each direction (a token bucket; a
  value of at least the bus width means one beat per cycle);
- ``latency_ports=True`` replaces the two latencies by input ports, so one build
  serves a latency sweep;
- ``stall_per_256``: probability (out of 256) that a channel is stalled in a given
  cycle: READY dropped on AR/AW/W, the next R/B beat held back (VALID is never
  withdrawn once offered, as AXI requires); ``seed`` seeds the xorshift generator.

Reads and writes are served in order of arrival, each direction independently: the
*ideal* memory.  With ``dram=`` a :class:`~ndpkit_spec.dram.DramTiming` (a preset of
:data:`ndpkit_spec.dram.PRESETS`), a :class:`~ndpkit_hw.mem.dram.DramChannel` decides
instead when each beat moves -- banks, rows, refresh, one data bus for both directions,
the address mapping and the controller's policy -- at the engines' clock
``engine_mhz``, and the latency/bandwidth parameters are unused.
Addresses outside ``[base, base + size)`` answer DECERR (writes are dropped), and
the ``error_base``/``error_size`` inputs name a window that answers SLVERR, or DECERR
with ``error_decerr`` high (writes dropped), so benches can inject memory errors at
run time.

Benches preload and inspect contents through the ``storage.mem`` array (VPI), see
:class:`ndpkit_tools.sim.bench.Backdoor`.
"""
from __future__ import annotations

import math

from amaranth.hdl import Module, Signal, Cat, Mux, Const, ClockSignal, Instance
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In

from ndpkit_spec.codes import AxiResp
from ndpkit_hw.bus.axi import AXI4Signature, log2_exact
from ndpkit_hw.mem.dram import DRAM_PORT_QUEUE, DramChannel

__all__ = ["AxiMemoryModel"]

TIME_WIDTH = 32


class _Xorshift32:
    """One 32-bit xorshift generator stepping every cycle; bytes of it drive stalls."""

    def __init__(self, m: Module, seed: int):
        self.state = Signal(32, init=(seed & 0xFFFFFFFF) or 0x1234567)
        x1 = self.state ^ (self.state << 13)[:32]
        x2 = x1 ^ (x1 >> 17)
        x3 = x2 ^ (x2 << 5)[:32]
        m.d.sync += self.state.eq(x3)

    def stall(self, index: int, per_256: int):
        if per_256 <= 0:
            return Const(0)
        byte = self.state.word_select(index % 4, 8)
        return byte < per_256


class _Bandwidth:
    """Token bucket: ``rate`` bytes of credit per cycle, one beat costs ``beat`` bytes."""

    def __init__(self, m: Module, rate: int, beat: int):
        self.ok = Signal()
        self.take = Signal()
        if rate >= beat:
            m.d.comb += self.ok.eq(1)
            return
        credit = Signal(range(2 * beat + rate + 1))
        m.d.comb += self.ok.eq(credit >= beat)
        nxt = credit + rate - Mux(self.take, beat, 0)
        m.d.sync += credit.eq(Mux(nxt > 2 * beat, 2 * beat, nxt))


class _RamPort:
    """The signals of one port of ``ndpkit_sim_ram`` (hw/ndpkit_hw/verilog)."""

    def __init__(self, depth: int, width: int, name: str):
        self.addr = Signal(range(max(2, depth)), name=f"{name}_addr")
        self.data = Signal(width, name=f"{name}_data")
        self.en = Signal(1 if name == "rd" else width // 8, name=f"{name}_en")


class AxiMemoryModel(wiring.Component):
    def __init__(self, *, size: int = 1 << 20, base: int = 0, addr_width: int = 32,
                 data_width: int = 512, id_width: int = 4, read_latency: int = 16,
                 write_latency: int = 16, max_outstanding: int | None = None, bytes_per_cycle: int | None = None,
                 stall_per_256: int = 0, seed: int = 1, latency_ports: bool = False, dram=None,
                 engine_mhz: float = 250.0, mapping: str | None = None, crossing: int = 0):
        self.data_bytes = data_width // 8
        self.word_shift = log2_exact(self.data_bytes, "data_width/8")
        if size % self.data_bytes or size <= 0:
            raise ValueError(f"size must be a positive multiple of {self.data_bytes} bytes")
        if base % size and base % 4096:
            raise ValueError("base must be 4 KiB aligned")
        if base + size > 2 ** addr_width:
            raise ValueError(f"memory [{base:#x}, {base + size:#x}) does not fit in {addr_width} address bits")
        if read_latency < 2 or write_latency < 1:
            raise ValueError("read_latency must be at least 2 cycles (a synchronous RAM behind a queue) "
                             "and write_latency at least 1")
        if not 0 <= stall_per_256 < 256:
            raise ValueError("stall_per_256 must be in 0..255")
        self.size, self.base, self.addr_width, self.data_width, self.id_width = \
            size, base, addr_width, data_width, id_width
        self.read_latency_cycles, self.write_latency_cycles = read_latency, write_latency
        if max_outstanding is None:
            max_outstanding = 16 if dram is None else DRAM_PORT_QUEUE
        self.max_outstanding = max_outstanding
        self.bytes_per_cycle = bytes_per_cycle if bytes_per_cycle is not None else self.data_bytes
        if self.bytes_per_cycle < 1:
            raise ValueError("bytes_per_cycle must be at least 1")
        self.stall_per_256, self.seed = stall_per_256, seed
        self.depth = size // self.data_bytes
        self.latency_ports = latency_ports
        #: the DRAM timing model, or None for the ideal memory
        self.dram = None
        if dram is not None:
            if bytes_per_cycle is not None and bytes_per_cycle < self.data_bytes:
                raise ValueError("bytes_per_cycle limits the ideal memory only; a DRAM timing model sets its own rate")
            self.dram = DramChannel(dram, engine_mhz=engine_mhz, beat_bytes=self.data_bytes, base=base, size=size,
                                    addr_width=addr_width, mapping=mapping, crossing=crossing,
                                    read_queue=max(32, 2 * max_outstanding))
            self.bytes_per_cycle = self.data_bytes
        #: bench statistics: R and W beats through the port
        self.stat_read_beats = Signal(40, name="stat_read_beats")
        self.stat_write_beats = Signal(40, name="stat_write_beats")
        members = {
            "bus": In(AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)),
            "error_base": In(addr_width),
            "error_size": In(addr_width + 1),
            "error_decerr": In(1),
        }
        if latency_ports:
            # Run-time latencies (a sweep needs no rebuild); values below the minimum act
            # as the minimum.  The constructor's latencies are then unused.
            members["read_latency"] = In(16)
            members["write_latency"] = In(16)
        super().__init__(members)

    def _beat_resp(self, m: Module, addr):
        resp = Signal(2)
        in_memory = addr < self.base + self.size
        if self.base:
            in_memory = in_memory & (addr >= self.base)
        in_error = (addr >= self.error_base) & (addr - self.error_base < self.error_size)
        with m.If(~in_memory):
            m.d.comb += resp.eq(AxiResp.DECERR)
        with m.Elif(in_error):
            m.d.comb += resp.eq(Mux(self.error_decerr, AxiResp.DECERR, AxiResp.SLVERR))
        return resp

    def _controller_queue(self, m, name, push, addr, length, valid, head_addr, head_beats, pop):
        """The DRAM controller's own copy of one direction's requests: those it has not
        scheduled yet (it runs ahead of the data path's queue); returns its room."""
        queue = fifo.SyncFIFO(width=self.addr_width + 8, depth=self.max_outstanding)
        m.submodules[name] = queue
        m.d.comb += [
            queue.w_en.eq(push),
            queue.w_data.eq(Cat(addr, length)),
            valid.eq(queue.r_rdy),
            head_addr.eq(queue.r_data[:self.addr_width]),
            head_beats.eq(queue.r_data[self.addr_width:] + 1),
            queue.r_en.eq(pop),
        ]
        return queue.w_rdy

    def _word_index(self, addr):
        return (addr - self.base)[self.word_shift:]

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        read_port = _RamPort(self.depth, self.data_width, "rd")
        write_port = _RamPort(self.depth, self.data_width, "wr")
        m.submodules.storage = Instance(
            "ndpkit_sim_ram", p_WIDTH=self.data_width, p_DEPTH=self.depth, p_ABITS=len(read_port.addr),
            i_clk=ClockSignal(), i_rd_en=read_port.en, i_rd_addr=read_port.addr, o_rd_data=read_port.data,
            i_wr_en=write_port.en, i_wr_addr=write_port.addr, i_wr_data=write_port.data)

        now = Signal(TIME_WIDTH)
        m.d.sync += now.eq(now + 1)
        rng = _Xorshift32(m, self.seed)
        stall = {name: rng.stall(i, self.stall_per_256) for i, name in enumerate(("ar", "aw", "w", "r", "b"))}

        def due(t):  # wrap-safe "now >= t"
            return (now - t)[TIME_WIDTH - 1] == 0

        dram = self.dram
        if dram is not None:
            m.submodules.dram = dram
            # reads: data at once from the calendar's records; writes: posted, B after the ack time
            read_wait = 1
            write_wait = max(0, math.ceil((dram.u(dram.timing.write_ack) + dram.crossing * dram.u_per_cycle)
                                          / dram.u_per_cycle) - 1)
        elif self.latency_ports:
            read_wait = Mux(self.read_latency < 2, 1, self.read_latency - 1)
            write_wait = Mux(self.write_latency < 1, 0, self.write_latency - 1)
        else:
            read_wait, write_wait = self.read_latency_cycles - 1, self.write_latency_cycles - 1

        aw_width = self.addr_width
        req_width = self.id_width + aw_width + 8 + TIME_WIDTH

        # ---- read path ----------------------------------------------------------
        m.submodules.ar_queue = ar_queue = fifo.SyncFIFO(width=req_width, depth=self.max_outstanding)
        ar_room = ar_queue.w_rdy
        if dram is not None:
            ar_room = ar_queue.w_rdy & self._controller_queue(
                m, "ar_sched", bus.arvalid & bus.arready, bus.araddr, bus.arlen,
                dram.rd_valid, dram.rd_addr, dram.rd_beats, dram.rd_pop)
        m.d.comb += [
            bus.arready.eq(ar_room & ~stall["ar"]),
            ar_queue.w_en.eq(bus.arvalid & bus.arready),
            ar_queue.w_data.eq(Cat(bus.arid, bus.araddr, bus.arlen, (now + read_wait)[:TIME_WIDTH])),
        ]
        ar_id = ar_queue.r_data[:self.id_width]
        ar_addr = ar_queue.r_data[self.id_width:self.id_width + aw_width]
        ar_len = ar_queue.r_data[self.id_width + aw_width:][:8]
        ar_time = ar_queue.r_data[self.id_width + aw_width + 8:]

        r_beat = Signal(8)
        r_addr = ar_addr + (r_beat << self.word_shift)
        r_bw = _Bandwidth(m, self.bytes_per_cycle, self.data_bytes)
        # Stage A picks the next beat and reads the memory; stage B holds it on R.
        b_valid = Signal()
        b_resp = Signal(2)
        b_id = Signal(self.id_width)
        b_last = Signal()
        consumed = bus.rvalid & bus.rready
        advance = Signal()
        data_due = due(ar_time) & r_bw.ok if dram is None else dram.rd_beat_ready
        m.d.comb += advance.eq(ar_queue.r_rdy & data_due & ~stall["r"] & (~b_valid | consumed))
        if dram is not None:
            m.d.comb += dram.rd_beat_take.eq(advance)
        beat_resp = self._beat_resp(m, r_addr)
        m.d.comb += [
            r_bw.take.eq(advance),
            read_port.en.eq(advance),
            read_port.addr.eq(self._word_index(r_addr)),
            ar_queue.r_en.eq(advance & (r_beat == ar_len)),
            bus.rvalid.eq(b_valid),
            bus.rdata.eq(Mux(b_resp == AxiResp.OKAY, read_port.data, 0)),
            bus.rresp.eq(b_resp),
            bus.rid.eq(b_id),
            bus.rlast.eq(b_last),
        ]
        with m.If(advance):
            m.d.sync += [b_valid.eq(1), b_resp.eq(beat_resp), b_id.eq(ar_id), b_last.eq(r_beat == ar_len),
                         r_beat.eq(Mux(r_beat == ar_len, 0, r_beat + 1))]
        with m.Elif(consumed):
            m.d.sync += b_valid.eq(0)

        # ---- write path ---------------------------------------------------------
        m.submodules.aw_queue = aw_queue = fifo.SyncFIFO(width=self.id_width + aw_width + 8,
                                                         depth=self.max_outstanding)
        m.submodules.b_queue = b_queue = fifo.SyncFIFO(width=self.id_width + 2 + TIME_WIDTH,
                                                       depth=self.max_outstanding)
        aw_room, w_room = aw_queue.w_rdy, Const(1)
        if dram is not None:
            aw_room = aw_queue.w_rdy & self._controller_queue(
                m, "aw_sched", bus.awvalid & bus.awready, bus.awaddr, bus.awlen,
                dram.wr_valid, dram.wr_addr, dram.wr_beats, dram.wr_pop)
            w_room = dram.wr_space
        m.d.comb += [
            bus.awready.eq(aw_room & ~stall["aw"]),
            aw_queue.w_en.eq(bus.awvalid & bus.awready),
            aw_queue.w_data.eq(Cat(bus.awid, bus.awaddr, bus.awlen)),
        ]
        aw_id = aw_queue.r_data[:self.id_width]
        aw_addr = aw_queue.r_data[self.id_width:self.id_width + aw_width]
        w_beat = Signal(8)
        w_addr = aw_addr + (w_beat << self.word_shift)
        w_bw = _Bandwidth(m, self.bytes_per_cycle, self.data_bytes)
        w_resp_acc = Signal(2)
        w_fire = Signal()
        beat_resp_w = self._beat_resp(m, w_addr)
        burst_resp = Signal(2)
        m.d.comb += [
            bus.wready.eq(aw_queue.r_rdy & b_queue.w_rdy & w_bw.ok & w_room & ~stall["w"]),
            w_fire.eq(bus.wvalid & bus.wready),
            w_bw.take.eq(w_fire),
            *([dram.wr_beat_in.eq(w_fire)] if dram is not None else []),
            write_port.addr.eq(self._word_index(w_addr)),
            write_port.data.eq(bus.wdata),
            write_port.en.eq(Mux(w_fire & (beat_resp_w == AxiResp.OKAY), bus.wstrb, 0)),
            # The burst's response is the worst of its beats (DECERR > SLVERR > OKAY).
            burst_resp.eq(Mux(beat_resp_w > w_resp_acc, beat_resp_w, w_resp_acc)),
            aw_queue.r_en.eq(w_fire & bus.wlast),
            b_queue.w_en.eq(w_fire & bus.wlast),
            b_queue.w_data.eq(Cat(aw_id, burst_resp, (now + write_wait)[:TIME_WIDTH])),
        ]
        with m.If(w_fire):
            with m.If(bus.wlast):
                m.d.sync += [w_beat.eq(0), w_resp_acc.eq(0)]
            with m.Else():
                m.d.sync += [w_beat.eq(w_beat + 1), w_resp_acc.eq(burst_resp)]

        b_time = b_queue.r_data[self.id_width + 2:]
        offered = Signal()
        m.d.comb += [
            bus.bvalid.eq(b_queue.r_rdy & due(b_time) & (offered | ~stall["b"])),
            bus.bid.eq(b_queue.r_data[:self.id_width]),
            bus.bresp.eq(b_queue.r_data[self.id_width:self.id_width + 2]),
            b_queue.r_en.eq(bus.bvalid & bus.bready),
        ]
        m.d.sync += offered.eq(bus.bvalid & ~bus.bready)
        # bench statistics (cocotb reads them by name): beats through the AXI port
        m.d.sync += [self.stat_read_beats.eq(self.stat_read_beats + advance),
                     self.stat_write_beats.eq(self.stat_write_beats + w_fire)]
        return m
