"""The command/completion front end every engine shares.

One :class:`EngineFrontend` per engine holds the engine's CSR block (declared with
:func:`ndpkit_spec.shell.engine_block`), a command queue and a completion queue:

- ``doorbell`` copies the argument registers and ``tag`` into the command queue
  (depth ``queue_depth``); with the queue full the command is dropped and
  ``irq.overflow`` is set, so nothing runs that the host did not see accepted.
- Commands leave on ``cmd`` (a stream of the arguments); the engine may take up to
  ``max_in_flight`` before completing the first (it overlaps their memory latency).
- The engine answers each command, in order, with one ``cpl`` {tag, error, bytes};
  the front end adds the cycle count (command taken by the engine -> completion)
  and queues it for the host (``cpl_*`` registers, ``cpl_pop``), setting
  ``irq.done``.

The window registers (``window_base``, ``window_size``) go into the queue with the
command and reach the engine (through the shell, which intersects them with card
memory) when it takes the command.  ``irq`` is ``(irq & irq_enable) != 0``.  ``hold`` keeps queued commands from
starting (the shell's soft reset drains engines that way); ``running`` says a
command is in the engine.  The engine is always ready to complete: the
completion queue holds one more entry than the command queue can start.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.shell import command_fields
from ndpkit_spec.regs import RegisterBlock
from ndpkit_hw.bus.axi import AXI4LiteSignature, AXI4Signature
from ndpkit_hw.shell.csr import CSRBlock

__all__ = ["EngineFrontend", "CompletionLayout", "command_layout", "engine_members"]

CompletionLayout = data.StructLayout({"tag": 16, "error": 4, "bytes_read": 32, "bytes_written": 32, "aux": 32})


def _arg_fields(block: RegisterBlock):
    """(payload name, CSR port name, width) of every argument field."""
    for name, reg, f in command_fields(block):
        yield name, f"{reg.name}_{f.name}", f.width


def command_layout(block: RegisterBlock) -> data.StructLayout:
    """The engine's command: its argument fields (a one-field register by the register's
    name, otherwise ``<register>_<field>``) plus the 16-bit tag."""
    fields = {name: width for name, _, width in _arg_fields(block)}
    fields["tag"] = 16
    return data.StructLayout(fields)


def engine_members(block: RegisterBlock, *, addr_width: int, data_width: int, id_width: int) -> dict:
    """The signature every engine core has: ``cmd`` in, ``cpl`` out, its AXI4 master
    ``bus`` and the address window its transfers must stay in."""
    return {
        "cmd": In(stream.Signature(command_layout(block))),
        "cpl": Out(stream.Signature(CompletionLayout)),
        "bus": Out(AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)),
        "window_base": In(addr_width),
        "window_size": In(addr_width + 1),
    }


class EngineFrontend(wiring.Component):
    def __init__(self, block: RegisterBlock, kind: int, *, queue_depth: int = 4, max_in_flight: int = 2,
                 instance: int = 0, region: int = 0, constants: dict | None = None):
        if queue_depth < 1 or max_in_flight < 1:
            raise ValueError("queue_depth and max_in_flight must be at least 1")
        self.block, self.kind, self.queue_depth = block, int(kind), queue_depth
        self.instance, self.region = instance, region       # what the place register reads
        self.constants = dict(constants or {})               # the core's build constants: RO registers
        self.max_in_flight = max_in_flight
        self.csr = CSRBlock(block)
        super().__init__({
            "bus": In(AXI4LiteSignature(addr_width=block.addr_width)),
            "cmd": Out(stream.Signature(command_layout(block))),
            "cpl": In(stream.Signature(CompletionLayout)),
            "irq": Out(1),
            "busy": Out(1),
            "running": Out(1),
            "hold": In(1),
            "irq_clear": In(1),
            # the window registers as they were at the running command's doorbell
            "window_base": Out(32),
            "window_size": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = self.csr
        wiring.connect(m, wiring.flipped(self.bus), csr.bus)

        layout = command_layout(self.block)
        entry_layout = data.StructLayout({"cmd": layout, "window_base": 32, "window_size": 32})
        m.submodules.commands = commands = fifo.SyncFIFOBuffered(width=entry_layout.size, depth=self.queue_depth)
        cpl_layout = data.StructLayout({"cpl": CompletionLayout, "cycles": 32, "start": 32})
        m.submodules.completions = completions = fifo.SyncFIFOBuffered(width=cpl_layout.size,
                                                                         depth=self.queue_depth + self.max_in_flight)

        # doorbell -> command queue (or overflow)
        snapshot = Signal(layout)
        for name, port, _ in _arg_fields(self.block):
            m.d.comb += getattr(snapshot, name).eq(getattr(csr, port))
        queued = Signal(entry_layout)
        m.d.comb += [snapshot.tag.eq(csr.tag_value),
                     queued.cmd.eq(snapshot), queued.window_base.eq(csr.window_base_value),
                     queued.window_size.eq(csr.window_size_value),
                     commands.w_data.eq(queued),
                     commands.w_en.eq(csr.doorbell_submit & commands.w_rdy),
                     csr.irq_overflow_set.eq(csr.doorbell_submit & ~commands.w_rdy)]

        # commands to the engine, each stamped with its start cycle (an engine may
        # overlap up to `max_in_flight` commands; completions come back in order)
        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        # (at least two entries: a one-entry FIFO has a zero-width address in Verilog)
        m.submodules.started = started = fifo.SyncFIFO(width=32, depth=max(2, self.max_in_flight))
        room = Signal()
        m.d.comb += room.eq(started.level < self.max_in_flight)
        head_entry = data.View(entry_layout, commands.r_data)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [self.window_base.eq(head_entry.window_base), self.window_size.eq(head_entry.window_size)]
        m.d.comb += [self.cmd.payload.eq(head_entry.cmd),
                     self.cmd.valid.eq(commands.r_rdy & room & ~self.hold),
                     commands.r_en.eq(self.cmd.ready & room & ~self.hold),
                     started.w_data.eq(now),
                     started.w_en.eq(self.cmd.valid & self.cmd.ready)]
        running = Signal()
        m.d.comb += running.eq(started.r_rdy)

        # engine completion -> completion queue
        entry = Signal(cpl_layout)
        m.d.comb += [entry.cpl.eq(self.cpl.payload), entry.cycles.eq(now - started.r_data),
                     entry.start.eq(started.r_data),
                     completions.w_data.eq(entry),
                     completions.w_en.eq(self.cpl.valid & started.r_rdy),
                     self.cpl.ready.eq(completions.w_rdy & started.r_rdy),
                     started.r_en.eq(self.cpl.valid & self.cpl.ready),
                     csr.irq_done_set.eq(self.cpl.valid & self.cpl.ready)]

        # with no completion waiting the cpl_* registers read 0, not the last one popped
        head = data.View(cpl_layout, Mux(completions.r_rdy, completions.r_data, 0))
        m.d.comb += [
            completions.r_en.eq(csr.cpl_pop_pop),
            csr.kind_value.eq(self.kind),
            csr.place_instance.eq(self.instance),
            csr.place_region.eq(self.region),
            *[getattr(csr, f"{name}_value").eq(value) for name, value in self.constants.items()],
            csr.status_busy.eq(running | commands.r_rdy),
            csr.status_queued.eq(commands.r_level),
            csr.status_completions.eq(completions.r_level),
            csr.cpl_status_valid.eq(completions.r_rdy),
            csr.cpl_status_error.eq(head.cpl.error),
            csr.cpl_status_tag.eq(head.cpl.tag),
            csr.cpl_cycles_value.eq(head.cycles),
            csr.cpl_start_value.eq(head.start),
            csr.cpl_bytes_read_value.eq(head.cpl.bytes_read),
            csr.cpl_bytes_written_value.eq(head.cpl.bytes_written),
            csr.cpl_aux_value.eq(head.cpl.aux),
            self.irq.eq(((csr.irq_done & csr.irq_enable_done) | (csr.irq_overflow & csr.irq_enable_overflow)) != 0),
            csr.irq_done_clear.eq(self.irq_clear),
            csr.irq_overflow_clear.eq(self.irq_clear),
            self.busy.eq(running | commands.r_rdy),
            self.running.eq(running),
        ]
        return m
