"""UART to AXI bridge: the host link of a card with no PCIe (the ECP5 board).

The host's ``uart`` transport (:mod:`ndpkit.transport.uart`, which defines the
protocol) sends requests; the bridge answers each with one reply:

==========  ================================  ==========================================
request     bytes after the opcode            reply
==========  ================================  ==========================================
REG_WRITE   offset (4), value (4)             REG_WRITE|0x80, resp
REG_READ    offset (4)                        REG_READ|0x80, resp, value (4)
MEM_WRITE   address (4), words (2), data      MEM_WRITE|0x80, resp (after the last B)
MEM_READ    address (4), words (2)            MEM_READ|0x80, data (4 per word), resp
==========  ================================  ==========================================

Little-endian throughout.  Registers go to the device's AXI4-Lite port (BAR0);
memory words are single-beat AXI4 accesses on the device's host DMA port, 32 bits
of a bus word selected with WSTRB (writes) or by the address (reads).  ``resp`` is
the first non-OKAY response of the request (0 if none).  An unknown opcode is
answered with ``BAD_OPCODE`` and ignored, so the host can resynchronise.  Received
bytes go through a FIFO, so the host may stream a MEM_WRITE's data without pauses.
"""

from amaranth.hdl import Module, Signal, Cat, Const, Mux
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.bridge import BAD_OPCODE, MEM_READ, MEM_WRITE, REG_READ, REG_WRITE
from ndpkit_spec.codes import AxiResp
from ndpkit_spec.shell import BAR0_SIZE
from ndpkit_hw.bus.axi import AXI4LiteSignature, AXI4Signature, log2_exact

__all__ = ["UartRx", "UartTx", "UartBridge"]


class UartRx(wiring.Component):
    """8N1 receiver; ``divisor`` clock cycles per bit.  Bytes leave as a stream
    with no back-pressure (``valid`` for one cycle): the consumer must take them."""
    rx: In(1, init=1)
    data: Out(stream.Signature(8, always_ready=True))

    def __init__(self, divisor: int):
        if divisor < 4:
            raise ValueError("divisor must be at least 4 clock cycles per bit")
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        sync_rx = Signal(2, init=0b11)
        m.d.sync += sync_rx.eq(Cat(self.rx, sync_rx[0]))
        line = sync_rx[1]
        timer = Signal(range(self.divisor * 3 // 2 + 1))
        bits = Signal(3)
        shift = Signal(8)
        m.d.sync += self.data.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):                    # start bit: sample mid-bit from here on
                    m.d.sync += timer.eq(self.divisor // 2)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer == 0):
                    with m.If(line):                 # a glitch, not a start bit
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [timer.eq(self.divisor - 1), bits.eq(0)]
                        m.next = "DATA"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [shift.eq(Cat(shift[1:], line)), bits.eq(bits + 1), timer.eq(self.divisor - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(line):                 # a framing error drops the byte
                        m.d.sync += [self.data.payload.eq(shift), self.data.valid.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
        return m


class UartTx(wiring.Component):
    """8N1 transmitter; ``divisor`` clock cycles per bit."""
    tx: Out(1, init=1)
    data: In(stream.Signature(8))

    def __init__(self, divisor: int):
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        frame = Signal(10, init=0x3FF)           # start, 8 data bits LSB first, stop
        left = Signal(range(11))
        m.d.comb += [self.tx.eq(frame[0]), self.data.ready.eq(left == 0)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [frame.eq(Cat(Const(0, 1), self.data.payload, Const(1, 1))), left.eq(10),
                         timer.eq(self.divisor - 1)]
        with m.Elif(left != 0):
            with m.If(timer == 0):
                m.d.sync += [frame.eq(Cat(frame[1:], Const(1, 1))), left.eq(left - 1), timer.eq(self.divisor - 1)]
            with m.Else():
                m.d.sync += timer.eq(timer - 1)
        return m


def write_states(m: Module, prefix: str, bus) -> None:
    """FSM states ``<prefix>_AW`` (enter here), ``_W``, ``_AW_ONLY``: AW and W offered
    together, each held until taken (a slave may take them in either order), then on
    to ``<prefix>_B``, which the caller writes."""
    with m.State(f"{prefix}_AW"):
        m.d.comb += [bus.awvalid.eq(1), bus.wvalid.eq(1)]
        with m.If(bus.awready & bus.wready):
            m.next = f"{prefix}_B"
        with m.Elif(bus.awready):
            m.next = f"{prefix}_W"
        with m.Elif(bus.wready):
            m.next = f"{prefix}_AW_ONLY"
    with m.State(f"{prefix}_W"):
        m.d.comb += bus.wvalid.eq(1)
        with m.If(bus.wready):
            m.next = f"{prefix}_B"
    with m.State(f"{prefix}_AW_ONLY"):
        m.d.comb += bus.awvalid.eq(1)
        with m.If(bus.awready):
            m.next = f"{prefix}_B"


class UartBridge(wiring.Component):
    """``regs``: AXI4-Lite master to the device's BAR0 (``reg_addr_width`` bits; a
    register offset beyond them is answered DECERR, not sent aliased); ``mem``: AXI4
    master to the device's host DMA port (``data_width`` bits)."""

    def __init__(self, *, divisor: int, data_width: int = 32, addr_width: int = 32, id_width: int = 4,
                 reg_addr_width: int = (BAR0_SIZE - 1).bit_length(), rx_fifo_depth: int = 64):
        self.divisor, self.data_width, self.reg_addr_width = divisor, data_width, reg_addr_width
        self.lane_bits = log2_exact(data_width // 32, "data_width/32")
        self.rx_fifo_depth = rx_fifo_depth
        super().__init__({
            "rx": In(1, init=1), "tx": Out(1, init=1),
            "regs": Out(AXI4LiteSignature(addr_width=reg_addr_width)),
            "mem": Out(AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.receiver = receiver = UartRx(self.divisor)
        m.submodules.transmitter = transmitter = UartTx(self.divisor)
        m.submodules.rx_fifo = rx_fifo = fifo.SyncFIFOBuffered(width=8, depth=self.rx_fifo_depth)
        m.d.comb += [receiver.rx.eq(self.rx), self.tx.eq(transmitter.tx),
                     rx_fifo.w_data.eq(receiver.data.payload), rx_fifo.w_en.eq(receiver.data.valid)]
        regs, mem = self.regs, self.mem

        opcode = Signal(8)
        header = Signal(48)                      # offset/address and count, little-endian
        need = Signal(range(7))
        position = Signal(range(7))
        value = Signal(32)
        got = Signal(range(5))
        words = Signal(16)
        resp = Signal(2)
        address = Signal(32)
        reply = Signal(48)                       # bytes to send, first in the low byte
        reply_left = Signal(range(7))
        lane = address[2:2 + self.lane_bits] if self.lane_bits else Const(0, 1)

        def send(nbytes, payload):
            return [reply.eq(payload), reply_left.eq(nbytes)]

        def first_error(new):
            return resp.eq(Mux(resp != 0, resp, new))

        take = Signal()
        m.d.comb += [rx_fifo.r_en.eq(take), transmitter.data.payload.eq(reply[:8]),
                     transmitter.data.valid.eq(reply_left != 0)]
        with m.If(transmitter.data.valid & transmitter.data.ready):
            m.d.sync += [reply.eq(reply >> 8), reply_left.eq(reply_left - 1)]

        # fixed AXI fields
        size = log2_exact(self.data_width // 8, "data_width/8")
        m.d.comb += [mem.awlen.eq(0), mem.awsize.eq(size), mem.awburst.eq(1), mem.awid.eq(0),
                     mem.arlen.eq(0), mem.arsize.eq(size), mem.arburst.eq(1), mem.arid.eq(0),
                     mem.wlast.eq(1), mem.wdata.eq(value.replicate(self.data_width // 32)),
                     mem.wstrb.eq(Const(0xF, 4) << (lane * 4) if self.lane_bits else 0xF),
                     mem.awaddr.eq(address & ~(self.data_width // 8 - 1)),
                     mem.araddr.eq(address & ~(self.data_width // 8 - 1)),
                     regs.awaddr.eq(header[:len(regs.awaddr)]), regs.araddr.eq(header[:len(regs.araddr)]),
                     regs.wdata.eq(value), regs.wstrb.eq(0xF)]

        with m.FSM():
            with m.State("OPCODE"):
                with m.If((reply_left == 0) & rx_fifo.r_rdy):
                    m.d.comb += take.eq(1)
                    m.d.sync += [opcode.eq(rx_fifo.r_data), header.eq(0), position.eq(0), resp.eq(0)]
                    with m.Switch(rx_fifo.r_data):
                        with m.Case(REG_WRITE, REG_READ):
                            m.d.sync += need.eq(4)
                            m.next = "HEADER"
                        with m.Case(MEM_WRITE, MEM_READ):
                            m.d.sync += need.eq(6)
                            m.next = "HEADER"
                        with m.Default():
                            m.d.sync += send(1, BAD_OPCODE)
            with m.State("HEADER"):
                with m.If(need == 0):
                    m.d.sync += [address.eq(header[:32]), words.eq(header[32:48]), got.eq(0)]
                    with m.Switch(opcode):
                        with m.Case(REG_WRITE):
                            m.next = "VALUE"
                        with m.Case(REG_READ):
                            with m.If(header[self.reg_addr_width:32] != 0):
                                m.d.sync += send(6, Cat(Const(REG_READ | 0x80, 8), Const(AxiResp.DECERR, 2), Const(0, 38)))
                                m.next = "OPCODE"
                            with m.Else():
                                m.next = "REG_AR"
                        with m.Case(MEM_WRITE):
                            with m.If(header[32:48] == 0):
                                m.d.sync += send(2, Cat(Const(MEM_WRITE | 0x80, 8), Const(0, 8)))
                                m.next = "OPCODE"
                            with m.Else():
                                m.next = "VALUE"
                        with m.Case(MEM_READ):
                            m.d.sync += send(1, MEM_READ | 0x80)
                            m.next = "MEM_AR"
                with m.Elif(rx_fifo.r_rdy):
                    m.d.comb += take.eq(1)
                    # little-endian: each byte lands above the ones before it
                    m.d.sync += [header.eq(header | (rx_fifo.r_data << (8 * position))), position.eq(position + 1),
                                 need.eq(need - 1)]
            with m.State("VALUE"):                   # four data bytes
                with m.If(got == 4):
                    with m.If((opcode == REG_WRITE) & (address[self.reg_addr_width:] != 0)):
                        m.d.sync += send(2, Cat(Const(REG_WRITE | 0x80, 8), Const(AxiResp.DECERR, 2), Const(0, 6)))
                        m.next = "OPCODE"
                    with m.Elif(opcode == REG_WRITE):
                        m.next = "REG_AW"
                    with m.Else():
                        m.next = "MEM_AW"
                with m.Elif(rx_fifo.r_rdy):
                    m.d.comb += take.eq(1)
                    m.d.sync += [value.eq(Cat(value[8:], rx_fifo.r_data)), got.eq(got + 1)]
            # ---- registers
            write_states(m, "REG", regs)
            with m.State("REG_B"):
                m.d.comb += regs.bready.eq(1)
                with m.If(regs.bvalid):
                    m.d.sync += send(2, Cat(Const(REG_WRITE | 0x80, 8), regs.bresp))
                    m.next = "OPCODE"
            with m.State("REG_AR"):
                m.d.comb += regs.arvalid.eq(1)
                with m.If(regs.arready):
                    m.next = "REG_R"
            with m.State("REG_R"):
                m.d.comb += regs.rready.eq(1)
                with m.If(regs.rvalid):
                    m.d.sync += send(6, Cat(Const(REG_READ | 0x80, 8), regs.rresp, Const(0, 6), regs.rdata))
                    m.next = "OPCODE"
            # ---- memory writes: one single-beat burst per word
            write_states(m, "MEM", mem)
            with m.State("MEM_B"):
                m.d.comb += mem.bready.eq(1)
                with m.If(mem.bvalid):
                    m.d.sync += [first_error(mem.bresp), address.eq(address + 4), words.eq(words - 1), got.eq(0)]
                    with m.If(words == 1):
                        m.d.sync += send(2, Cat(Const(MEM_WRITE | 0x80, 8), Mux(resp != 0, resp, mem.bresp),
                                                Const(0, 6)))
                        m.next = "OPCODE"
                    with m.Else():
                        m.next = "VALUE"
            # ---- memory reads
            with m.State("MEM_AR"):
                with m.If(words == 0):
                    with m.If(reply_left == 0):
                        m.d.sync += send(1, resp)
                        m.next = "OPCODE"
                with m.Elif(reply_left == 0):
                    m.d.comb += mem.arvalid.eq(1)
                    with m.If(mem.arready):
                        m.next = "MEM_R"
            with m.State("MEM_R"):
                m.d.comb += mem.rready.eq(1)
                with m.If(mem.rvalid):
                    word = mem.rdata.word_select(lane, 32) if self.lane_bits else mem.rdata[:32]
                    m.d.sync += [send(4, word), first_error(mem.rresp), address.eq(address + 4),
                                 words.eq(words - 1)]
                    m.next = "MEM_AR"
        return m
