"""The device top level: what sits between a Xilinx XDMA bridge and card memory.

Ports (flat names in Verilog, so Vivado infers the interfaces and cocotbext-axi binds
them by prefix):

- ``s_axil_*``: AXI4-Lite slave, BAR0 (64 KiB): the shell registers at 0x0000, engine
  kind ``k`` at ``k * 0x1000`` (:mod:`ndpkit_spec.shell`).
- ``s_axi_*``: AXI4 slave, host DMA (XDMA H2C/C2H) into the card's memory map.
- ``usr_irq_req[7:0]`` / ``usr_irq_ack[7:0]``: line ``k`` is engine ``k``'s interrupt
  (level: held until the host clears the engine's ``irq`` register, as XDMA's legacy
  and MSI modes expect); ``usr_irq_ack`` is accepted and not needed.
- ``m_axi_mem_*``: AXI4 master toward the memory controller (MIG / HBM port).  With
  ``memory_ports=P`` > 1 there are P such masters, ``m_axi_mem0_*`` ..
  ``m_axi_mem{P-1}_*``, and card memory is cut into P equal regions: port ``p``
  carries only addresses of region ``p`` (an HBM pseudo-channel's range, so no
  request crosses the HBM switch).

Engines: ``engines`` names each engine once per instance (``("attention",) * 4``, or
``"attention*4"``).  Each instance has its own register slot, command and completion
queues (:func:`ndpkit_spec.shell.slot_layout`), AXI master and home region
(:func:`ndpkit_spec.shell.home_region`: instances dealt round-robin over the ports);
its transfers are confined to that region (its window registers intersected with
the region), so one instance's commands never touch another's region.

Graph instances share result words over the card's window exchange
(:class:`~ndpkit_hw.engines.graph.exchange.WindowExchange`: every instance's ``share`` to
every instance's ``shared``).

Inside: :class:`AxiLiteDecoder` -> shell CSR block and one :class:`EngineFrontend`
per instance; the host port -> :class:`AxiRegionRouter` (one branch per region, P > 1)
-> per port an :class:`AxiInterconnect` with the engine masters homed there ->
``m_axi_mem``.  Soft reset waits until no engine runs a command (queued commands
do not start meanwhile), then resets engines and front ends for one cycle, so no
AXI transaction is ever cut: the interconnect and host DMA are not reset.
"""
from __future__ import annotations

from amaranth.hdl import Mux, Module, Signal, Cat, ResetInserter
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.registry import REGISTRY, instance_counts
from ndpkit_spec.shell import (GLOBAL, BAR0_SIZE, ENGINE_STRIDE, FIRST_EXTRA_SLOT, IRQ_LINES, NDPKIT_MAGIC, VERSION,
                               home_region, region_bounds, slot_layout)
from ndpkit_hw.bus.axi import AXI4LiteSignature, AXI4Signature, READ_MEMBERS, WRITE_MEMBERS, connect_members, log2_exact
from ndpkit_hw.bus.axil_decoder import AxiLiteDecoder
from ndpkit_hw.bus.interconnect import AxiInterconnect
from ndpkit_hw.bus.region_router import AxiRegionRouter
from ndpkit_hw.shell.csr import CSRBlock
from ndpkit_hw.engines import build as build_engine
from ndpkit_hw.engines.graph.exchange import WindowExchange
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
        self.instances = instance_counts(engines)       # ValueError names an unknown engine or a bad count
        self.layout = slot_layout(self.instances)       # ... or too many instances for BAR0
        if mem_size <= 0 or mem_base + mem_size > 2 ** addr_width:
            raise ValueError(f"card memory [{mem_base:#x}, +{mem_size:#x}) does not fit in {addr_width} address bits")
        if not 1 <= queue_depth <= 255:
            raise ValueError("queue_depth must be 1..255")
        if not 1 <= clock_mhz <= 1000:         # the shell's clock register holds 16 bits
            raise ValueError("clock_mhz must be 1..1000")
        count = len(self.layout)
        if not isinstance(memory_ports, int) or not 1 <= memory_ports <= max(1, min(count, 255)):
            raise ValueError(f"memory_ports must be 1..{count} (a region per engine instance at most: "
                             f"{count} instance(s)), not {memory_ports!r}")
        region_size = mem_size // memory_ports
        if memory_ports > 1 and (mem_size % memory_ports or region_size & (region_size - 1)
                                 or mem_base % region_size):
            raise ValueError(f"memory_ports={memory_ports} must cut card memory ({mem_size:#x} bytes at "
                             f"{mem_base:#x}) into equal power-of-two regions aligned to their size")
        self.data_width, self.addr_width = data_width, addr_width
        self.mem_base, self.mem_size = mem_base, mem_size
        self.engine_names = tuple(self.instances)
        self.queue_depth, self.clock_mhz = queue_depth, clock_mhz
        self.max_burst_bytes, self.max_outstanding = max_burst_bytes, max_outstanding
        self.host_id_width = host_id_width
        # the attention engine's MAC lanes; by default the port's rate at G = 1 (two per 16-bit element)
        self.attention_lanes = data_width // 8 if attention_lanes is None else attention_lanes
        self.memory_ports, self.region_size = memory_ports, region_size
        self.regions = home_region(self.layout, memory_ports)

        #: (name, instance) -> (slot, core, frontend, region), in slot-layout order
        self.slots = {}
        # engines address 32 bits (their command fields are 32-bit): on a card with more
        # memory an instance sees its region at the region's address modulo 4 GiB, and its
        # port adds the region's upper address bits (engine_view)
        self.engine_addr_width = min(addr_width, 32)
        for name, instance, slot in self.layout:
            spec = REGISTRY[name]
            core = build_engine(name, addr_width=self.engine_addr_width, data_width=data_width,
                                max_burst_bytes=max_burst_bytes,
                                max_outstanding=max_outstanding,
                                **{engine_kw: getattr(self, device_kw) for device_kw, engine_kw in spec.device_params.items()})
            frontend = EngineFrontend(spec.block, spec.kind, queue_depth=queue_depth,
                                      max_in_flight=spec.max_in_flight, instance=instance,
                                      region=self.regions[name, instance],
                                      constants=getattr(core, "constants", {}))
            self.slots[name, instance] = (slot, core, frontend, self.regions[name, instance])
        #: the first instance of each engine, as (kind, core, frontend) (the single-instance view)
        self.engines = {name: (REGISTRY[name].kind, core, frontend)
                        for (name, instance), (_, core, frontend, _) in self.slots.items() if instance == 0}
        self.id_width = max([host_id_width] + [len(core.bus.arid) for _, core, _, _ in self.slots.values()])
        # port p: the host (its region branch) and the engine instances homed in region p
        self.port_masters = [[key for key in self.slots if self.regions[key] == p] for p in range(memory_ports)]
        self.interconnects = [AxiInterconnect(num_masters=1 + len(group), addr_width=addr_width,
                                              data_width=data_width, id_width=self.id_width) if group else None
                              for group in self.port_masters]
        index_bits = max((ic.index_bits for ic in self.interconnects if ic is not None), default=0)
        self.mem_id_width = mem_id_width = self.id_width + index_bits if self.slots else host_id_width
        self.router = None if memory_ports == 1 else AxiRegionRouter(
            num_ports=memory_ports, base=mem_base, region_size=region_size, addr_width=addr_width,
            data_width=data_width, id_width=host_id_width)
        memory_signature = AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=mem_id_width)
        self.memory_port_names = ["m_axi_mem"] if memory_ports == 1 else [f"m_axi_mem{p}" for p in range(memory_ports)]
        super().__init__({
            "s_axil": In(AXI4LiteSignature(addr_width=(BAR0_SIZE - 1).bit_length())),
            "s_axi": In(AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=host_id_width)),
            "usr_irq_req": Out(IRQ_LINES),
            "usr_irq_ack": In(IRQ_LINES),
            **{name: Out(memory_signature) for name in self.memory_port_names},
        })

    def region(self, index: int) -> tuple[int, int]:
        """(base, size) of memory region ``index``."""
        return region_bounds(self.mem_base, self.mem_size, self.memory_ports, index)

    def region_high(self, index: int) -> int:
        """The address bits above an engine's 32 that region ``index``'s port adds."""
        return self.region(index)[0] & ~((1 << self.engine_addr_width) - 1)

    def _window(self, m, name, frontend, region):
        """The instance's address window: its window registers intersected with its
        memory region, all of the region when window_size is 0
        (:func:`ndpkit_spec.shell.effective_window`)."""
        base, size = frontend.window_base, frontend.window_size
        region_base, region_size = self.region(region)
        region_base -= self.region_high(region)          # in the engine's 32-bit view
        region_end = region_base + region_size
        width = self.engine_addr_width + 2
        end = Signal(width, name=f"{name}_window_end")
        lo = Signal(width, name=f"{name}_window_lo")
        hi = Signal(width, name=f"{name}_window_hi")
        m.d.comb += [end.eq(base + size), lo.eq(Mux(base > region_base, base, region_base)),
                     hi.eq(Mux(end < region_end, end, region_end))]
        whole = size == 0
        return (Mux(whole, region_base, lo),
                Mux(whole, region_size, Mux(hi > lo, hi - lo, 0)))

    def elaborate(self, platform):
        m = Module()
        regions = [(0, ENGINE_STRIDE)] + [(slot * ENGINE_STRIDE, ENGINE_STRIDE)
                                          for slot, _, _, _ in self.slots.values()]
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

        # ---- engine instances --------------------------------------------------------
        irq_lines = Signal(IRQ_LINES)
        kind_irqs = {}
        running = []
        presence = 0
        for index, ((name, instance), (slot, core, frontend, region)) in enumerate(self.slots.items()):
            kind = REGISTRY[name].kind
            label = name if instance == 0 else f"{name}_{instance}"
            m.submodules[label] = ResetInserter(engine_reset)(core)
            m.submodules[f"{label}_frontend"] = ResetInserter(engine_reset)(frontend)
            wiring.connect(m, getattr(decoder, f"m{index + 1}"), frontend.bus)
            wiring.connect(m, frontend.cmd, core.cmd)
            wiring.connect(m, core.cpl, frontend.cpl)
            window_base, window_size = self._window(m, label, frontend, region)
            m.d.comb += [core.window_base.eq(window_base), core.window_size.eq(window_size),
                         frontend.hold.eq(reset_pending | shell.control_hold),
                         frontend.irq_clear.eq(shell.irq_clear_lines[kind])]
            kind_irqs.setdefault(kind, []).append(frontend.irq)
            running.append(frontend.running)
            presence |= 1 << kind
        # ---- the graph instances' window exchange -------------------------------------
        sharing = [core for _, core, _, _ in self.slots.values() if "share" in core.signature.members]
        if sharing:
            m.submodules.window_exchange = exchange = ResetInserter(engine_reset)(WindowExchange(len(sharing),
                                                                                                 self.data_width))
            for i, core in enumerate(sharing):
                wiring.connect(m, core.share, exchange.share[i])
                m.d.comb += [core.shared.valid.eq(exchange.out.valid), core.shared.payload.eq(exchange.out.payload)]
        for kind, lines in kind_irqs.items():
            m.d.comb += irq_lines[kind].eq(Cat(*lines).any())
        m.d.comb += any_running.eq(Cat(*running).any() if running else 0)

        # ---- memory: the host to every region, each instance to its own ---------------
        members = READ_MEMBERS + WRITE_MEMBERS
        if self.router is not None:
            m.submodules.host_router = router = self.router
            connect_members(m, self.s_axi, router.s, members)
            host_branches = [getattr(router, f"m{p}") for p in range(self.memory_ports)]
        else:
            host_branches = [self.s_axi]
        for p, (port_name, group, interconnect) in enumerate(zip(self.memory_port_names, self.port_masters,
                                                                  self.interconnects)):
            if interconnect is None:            # no engine: the host alone
                connect_members(m, host_branches[p], getattr(self, port_name), members)
                continue
            m.submodules[f"interconnect_{port_name}" if self.memory_ports > 1 else "interconnect"] = interconnect
            connect_members(m, host_branches[p], interconnect.s0, members)
            for i, key in enumerate(group):
                connect_members(m, self.slots[key][1].bus, getattr(interconnect, f"s{i + 1}"), members,
                                addr_high=self.region_high(p))
            connect_members(m, interconnect.m, getattr(self, port_name), members)

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
            shell.layout_regions.eq(self.memory_ports),
            shell.layout_extra_slots.eq(len(self.slots) - len(self.engines)),
            shell.layout_first_extra_slot.eq(FIRST_EXTRA_SLOT),
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
