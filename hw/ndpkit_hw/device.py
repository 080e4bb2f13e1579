"""The device top level: what sits between a Xilinx XDMA bridge and card memory.

Ports (flat names in Verilog, so Vivado infers the interfaces and cocotbext-axi binds
them by prefix):

- ``s_axil_*``: AXI4-Lite slave, BAR0 (64 KiB): the shell registers at 0x0000, engine
  kind ``k`` at ``k * 0x1000`` (:mod:`ndpkit_spec.shell`).
- ``s_axi_*``: AXI4 slave, host DMA (XDMA H2C/C2H) into the card's memory map.
- ``usr_irq_req[7:0]`` / ``usr_irq_ack[7:0]``: line ``k`` is engine ``k``'s interrupt
  (level: held until the host clears the engine's ``irq`` register, as XDMA's legacy
  and MSI modes expect); ``usr_irq_ack`` is accepted and not needed.
- ``m_axi_mem_*``: AXI4 master toward the memory controller (MIG / HBM port), which
  the host DMA and every engine share through a round-robin interconnect.  With
  ``memory_ports=P`` > 1 there are P such masters, ``m_axi_mem0_*`` ..
  ``m_axi_mem{P-1}_*`` (for HBM pseudo-channels, whose switch lets every port reach
  all of memory): master ``i`` of [host DMA, engines in order] uses port ``i mod P``.

Inside: :class:`AxiLiteDecoder` -> shell CSR block and one :class:`EngineFrontend`
per engine; each engine's AXI master and the host port -> :class:`AxiInterconnect`
-> ``m_axi_mem``.  Soft reset waits until no engine runs a command (queued commands
do not start meanwhile), then resets engines and front ends for one cycle, so no
AXI transaction is ever cut: the interconnect and host DMA are not reset.
"""
from __future__ import annotations

from amaranth.hdl import Mux, Module, Signal, Cat, ResetInserter
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.registry import REGISTRY
from ndpkit_spec.shell import GLOBAL, BAR0_SIZE, ENGINE_STRIDE, IRQ_LINES, NDPKIT_MAGIC, VERSION
from ndpkit_hw.bus.axi import AXI4LiteSignature, AXI4Signature, READ_MEMBERS, WRITE_MEMBERS, connect_members, log2_exact
from ndpkit_hw.bus.axil_decoder import AxiLiteDecoder
from ndpkit_hw.bus.interconnect import AxiInterconnect
from ndpkit_hw.shell.csr import CSRBlock
from ndpkit_hw.engines import build as build_engine
from ndpkit_hw.shell.engine_frontend import EngineFrontend

__all__ = ["Device"]


class Device(wiring.Component):
    def __init__(self, *, data_width: int = 512, addr_width: int = 32, mem_base: int = 0,
                 mem_size: int = 1 << 30, engines=("dma_copy",), queue_depth: int = 4,
                 host_id_width: int = 4, clock_mhz: int = 250, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8, attention_lanes: int | None = None, memory_ports: int = 1):
        log2_exact(data_width // 8, "data_width/8")
        if data_width < 32:
            raise ValueError("data_width must be at least 32")
        for name in engines:
            if name not in REGISTRY:
                raise ValueError(f"unknown engine {name!r}; known: {', '.join(REGISTRY)}")
        if len(set(engines)) != len(engines):
            raise ValueError("an engine is listed twice")
        if mem_size <= 0 or mem_base + mem_size > 2 ** addr_width:
            raise ValueError(f"card memory [{mem_base:#x}, +{mem_size:#x}) does not fit in {addr_width} address bits")
        if not 1 <= queue_depth <= 255:
            raise ValueError("queue_depth must be 1..255")
        if not 1 <= clock_mhz <= 1000:         # the shell's clock register holds 16 bits
            raise ValueError("clock_mhz must be 1..1000")
        if not isinstance(memory_ports, int) or not 1 <= memory_ports <= 1 + len(engines):
            raise ValueError(f"memory_ports must be 1..{1 + len(engines)} (one per master at most: the host DMA "
                             f"and {len(engines)} engine(s)), not {memory_ports!r}")
        self.data_width, self.addr_width = data_width, addr_width
        self.mem_base, self.mem_size = mem_base, mem_size
        self.engine_names = tuple(engines)
        self.queue_depth, self.clock_mhz = queue_depth, clock_mhz
        self.max_burst_bytes, self.max_outstanding = max_burst_bytes, max_outstanding
        self.host_id_width = host_id_width
        # the attention engine's MAC lanes; by default the port's rate at G = 1 (two per 16-bit element)
        self.attention_lanes = data_width // 8 if attention_lanes is None else attention_lanes

        self.engines = {}
        for name in self.engine_names:
            spec = REGISTRY[name]
            kind = spec.kind
            core = build_engine(name, addr_width=addr_width, data_width=data_width, max_burst_bytes=max_burst_bytes,
                                max_outstanding=max_outstanding,
                                **{engine_kw: getattr(self, device_kw) for device_kw, engine_kw in spec.device_params.items()})
            frontend = EngineFrontend(spec.block, kind, queue_depth=queue_depth,
                                      max_in_flight=spec.max_in_flight)
            self.engines[name] = (kind, core, frontend)
        masters = 1 + len(self.engines)
        self.memory_ports = memory_ports
        self.id_width = max([host_id_width] + [len(core.bus.arid) for _, core, _ in self.engines.values()])
        # master i -> port i mod P; a port with two or more masters gets an interconnect
        self.port_masters = [list(range(p, masters, memory_ports)) for p in range(memory_ports)]
        self.interconnects = [AxiInterconnect(num_masters=len(group), addr_width=addr_width, data_width=data_width,
                                              id_width=self.id_width) if len(group) > 1 else None
                              for group in self.port_masters]
        index_bits = max((ic.index_bits for ic in self.interconnects if ic is not None), default=0)
        self.mem_id_width = mem_id_width = self.id_width + index_bits if masters > 1 else host_id_width
        memory_signature = AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=mem_id_width)
        self.memory_port_names = ["m_axi_mem"] if memory_ports == 1 else [f"m_axi_mem{p}" for p in range(memory_ports)]
        super().__init__({
            "s_axil": In(AXI4LiteSignature(addr_width=(BAR0_SIZE - 1).bit_length())),
            "s_axi": In(AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=host_id_width)),
            "usr_irq_req": Out(IRQ_LINES),
            "usr_irq_ack": In(IRQ_LINES),
            **{name: Out(memory_signature) for name in self.memory_port_names},
        })

    def _window(self, m, name, frontend):
        """The engine's address window: its window registers intersected with card
        memory, all of card memory when window_size is 0
        (:func:`ndpkit_spec.shell.effective_window`)."""
        base, size = frontend.window_base, frontend.window_size
        mem_end = self.mem_base + self.mem_size
        end = Signal(34, name=f"{name}_window_end")
        lo = Signal(self.addr_width + 1, name=f"{name}_window_lo")
        hi = Signal(34, name=f"{name}_window_hi")
        m.d.comb += [end.eq(base + size), lo.eq(Mux(base > self.mem_base, base, self.mem_base)),
                     hi.eq(Mux(end < mem_end, end, mem_end))]
        whole = size == 0
        return (Mux(whole, self.mem_base, lo),
                Mux(whole, self.mem_size, Mux(hi > lo, hi - lo, 0)))

    def elaborate(self, platform):
        m = Module()
        regions = [(0, ENGINE_STRIDE)] + [(kind * ENGINE_STRIDE, ENGINE_STRIDE)
                                          for kind, _, _ in self.engines.values()]
        m.submodules.decoder = decoder = AxiLiteDecoder(addr_width=len(self.s_axil.awaddr), regions=regions)
        wiring.connect(m, wiring.flipped(self.s_axil), decoder.bus)
        m.submodules.shell = shell = CSRBlock(GLOBAL)
        wiring.connect(m, decoder.m0, shell.bus)

        # ---- soft reset: drain, then one reset cycle for engines and front ends ----
        reset_pending = Signal()
        engine_reset = Signal()
        any_running = Signal()
        with m.If(shell.soft_reset_engines):
            m.d.sync += reset_pending.eq(1)
        with m.Elif(reset_pending & ~any_running):
            m.d.sync += reset_pending.eq(0)
            m.d.comb += engine_reset.eq(1)

        # ---- engines ----------------------------------------------------------------
        ports = [self.s_axi]
        irq_lines = Signal(IRQ_LINES)
        running = []
        presence = 0
        for index, (name, (kind, core, frontend)) in enumerate(self.engines.items()):
            m.submodules[name] = ResetInserter(engine_reset)(core)
            m.submodules[f"{name}_frontend"] = ResetInserter(engine_reset)(frontend)
            wiring.connect(m, getattr(decoder, f"m{index + 1}"), frontend.bus)
            wiring.connect(m, frontend.cmd, core.cmd)
            wiring.connect(m, core.cpl, frontend.cpl)
            window_base, window_size = self._window(m, name, frontend)
            m.d.comb += [core.window_base.eq(window_base), core.window_size.eq(window_size),
                         frontend.hold.eq(reset_pending | shell.control_hold),
                         frontend.irq_clear.eq(shell.irq_clear_lines[kind]), irq_lines[kind].eq(frontend.irq)]
            running.append(frontend.running)
            ports.append(core.bus)
            presence |= 1 << kind
        m.d.comb += any_running.eq(Cat(*running).any() if running else 0)

        members = READ_MEMBERS + WRITE_MEMBERS
        for port_name, group, interconnect in zip(self.memory_port_names, self.port_masters, self.interconnects):
            memory = getattr(self, port_name)
            if interconnect is None:
                connect_members(m, ports[group[0]], memory, members)
                continue
            m.submodules[f"interconnect_{port_name}" if self.memory_ports > 1 else "interconnect"] = interconnect
            for i, master in enumerate(group):
                connect_members(m, ports[master], getattr(interconnect, f"s{i}"), members)
            connect_members(m, interconnect.m, memory, members)

        # ---- shell registers ---------------------------------------------------------
        cycles = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        m.d.comb += [
            shell.id_value.eq(NDPKIT_MAGIC),
            shell.version_major.eq(VERSION[0]),
            shell.version_minor.eq(VERSION[1]),
            shell.build_word_bytes.eq(self.data_width // 8),
            shell.build_queue_depth.eq(self.queue_depth),
            shell.build_irq_lines.eq(IRQ_LINES),
            shell.clock_mhz.eq(self.clock_mhz),
            shell.engines_value.eq(presence),
            shell.mem_base_value.eq(self.mem_base),
            shell.mem_size_lo_value.eq(self.mem_size & 0xFFFF_FFFF),
            shell.mem_size_hi_value.eq(self.mem_size >> 32),
            shell.cycles_lo_value.eq(cycles[:32]),
            shell.cycles_hi_value.eq(cycles[32:]),
            shell.irq_status_lines.eq(irq_lines),
            shell.reset_status_pending.eq(reset_pending),
            self.usr_irq_req.eq(irq_lines & shell.irq_mask_lines),
        ]
        return m
