"""The shell's register block and the command protocol every engine block shares.

BAR0 layout of a device: ``GLOBAL`` at 0x0000 (slot 0), the first instance of
engine kind ``k`` (see :data:`ndpkit_spec.registry.REGISTRY`) in slot ``k``, further
instances of any engine from slot ``FIRST_EXTRA_SLOT`` on (:func:`slot_layout`); slot
``s`` is at ``s * ENGINE_STRIDE``.  Each engine declares its own block with
:func:`engine_block` in ``ndpkit_spec.engines.<name>``.

Card memory is cut into ``regions`` equal ranges, one per memory port (an HBM
pseudo-channel on an Alveo card); each engine instance works in one region, its
``place.region`` (:func:`home_region`), and the shell confines its transfers to it.

Every engine block starts with the same command/completion registers
(:func:`engine_block`), so one driver loop and one gateware front end
(:class:`ndpkit_hw.shell.engine_frontend.EngineFrontend`) serve every engine; the
engine's own command arguments follow from ``ENGINE_ARGS_OFFSET``.
"""
from __future__ import annotations

from ndpkit_spec.regs import Access, Field, Register, RegisterBlock

__all__ = ["GLOBAL", "NDPKIT_MAGIC", "VERSION", "ENGINE_STRIDE", "ENGINE_ARGS_OFFSET", "BAR0_SIZE", "IRQ_LINES",
           "FIRST_EXTRA_SLOT", "MAX_SLOTS", "engine_block", "engine_args", "effective_window", "command_fields",
           "slot_layout", "home_region", "region_bounds"]

NDPKIT_MAGIC = 0x4E44504B   # "NDPK"
VERSION = (0, 5)            # (major, minor) of the register interface
ENGINE_STRIDE = 0x1000
ENGINE_ARGS_OFFSET = 0x40
BAR0_SIZE = 0x40000         # 64 slots of ENGINE_STRIDE
MAX_SLOTS = BAR0_SIZE // ENGINE_STRIDE
FIRST_EXTRA_SLOT = 16       # slots 1..15: each kind's first instance (the layout of one instance per kind)
IRQ_LINES = 8               # usr_irq_req width: line 0 global, line k engine kind k (every instance of it)

GLOBAL = RegisterBlock("shell", [
    Register.single("id", 0x00, Access.RO, doc="Reads 0x4E44504B ('NDPK')."),
    Register("version", 0x04, [Field("minor", 0, 16, Access.RO), Field("major", 16, 16, Access.RO)],
             doc="Register-interface version; the driver refuses a different major."),
    Register("build", 0x08, [
        Field("word_bytes", 0, 8, Access.RO, doc="Bytes per memory-bus word (64 at 512 bits)."),
        Field("queue_depth", 8, 8, Access.RO, doc="Command-queue depth of every engine."),
        Field("irq_lines", 16, 8, Access.RO, doc="Width of usr_irq_req."),
    ]),
    Register.single("engines", 0x0C, Access.RO, doc="Bit k set: engine kind k (ndpkit_spec.registry.EngineKind) is present "
                                                   "at BAR0 offset k * 0x1000."),
    Register.single("mem_base", 0x10, Access.RO, doc="First byte address of card memory."),
    Register.single("mem_size_lo", 0x14, Access.RO, doc="Card memory size in bytes, low word."),
    Register.single("mem_size_hi", 0x18, Access.RO, doc="Card memory size in bytes, high word."),
    Register.single("scratch", 0x1C, Access.RW, doc="Read/write scratch word for link tests; no effect."),
    Register.single("cycles_lo", 0x20, Access.RO, doc="Free-running cycle counter, low word."),
    Register.single("cycles_hi", 0x24, Access.RO, doc="Free-running cycle counter, high word (read hi, lo, hi)."),
    Register("irq_status", 0x28, [Field("lines", 0, 8, Access.RO, doc="Bit k: engine k has an enabled "
                                                                       "interrupt pending (before irq_mask).")]),
    Register("irq_mask", 0x2C, [Field("lines", 0, 8, Access.RW, doc="Bit k set: usr_irq_req[k] may assert. "
                                                                     "Reset: all disabled.")]),
    Register("soft_reset", 0x30, [Field("engines", 0, 1, Access.W1S,
                                        doc="Write 1: once no memory transaction is outstanding, reset every "
                                            "engine (queues, completions, interrupts, counters).")]),
    Register("reset_status", 0x34, [Field("pending", 0, 1, Access.RO, doc="A soft reset is waiting for the "
                                                                          "engines to finish their commands.")]),
    Register("irq_clear", 0x3C, [Field("lines", 0, 8, Access.W1S, doc="Write 1 to bit k: clear every "
                                                                      "interrupt bit of engine k (its irq register).")]),
    Register("control", 0x38, [Field("hold", 0, 1, Access.RW, doc="While set, engines start no queued command "
                                                                  "(queue a batch, then release it at once).")]),
    Register("clock", 0x40, [Field("mhz", 0, 16, Access.RO, doc="Nominal device clock in MHz (what cycle counts "
                                                               "are scaled by).")]),
    Register("layout", 0x44, [
        Field("regions", 0, 8, Access.RO, doc="Memory regions (= memory ports): card memory in equal ranges, "
                                              "region r at mem_base + r * mem_size / regions."),
        Field("extra_slots", 8, 8, Access.RO, doc="Engine instances beyond each kind's first, in slots "
                                                  "first_extra_slot, first_extra_slot + 1, ..."),
        Field("first_extra_slot", 16, 8, Access.RO, doc="Slot of the first further instance (16)."),
    ], doc="Where the engine instances are: slot k holds kind k's first instance (bit k of engines); "
           "each slot's place register names its instance and region."),
], doc="Device identity, build parameters, cycle counter, interrupt aggregation and soft reset.",
    size=ENGINE_STRIDE)


def engine_block(name: str, args, doc: str) -> RegisterBlock:
    """An engine's register block: the shared command protocol, then its ``args``.

    Protocol: write the argument registers (and ``tag``), then write 1 to
    ``doorbell``: the arguments are copied into the command queue (so they may be
    rewritten at once for the next command).  With the queue full the doorbell is
    dropped and ``irq.overflow`` is set.  Each finished command pushes a completion
    {tag, error, cycles, bytes}; ``cpl_*`` show the oldest one and ``cpl_pop``
    removes it.  ``irq.done`` is set on every completion.
    """
    common = [
        Register.single("kind", 0x00, Access.RO, doc="The engine's EngineKind code."),
        Register("doorbell", 0x04, [Field("submit", 0, 1, Access.W1S, doc="Queue a command with the current "
                                                                          "argument registers.")]),
        Register("status", 0x08, [
            Field("busy", 0, 1, Access.RO, doc="A command is running or queued."),
            Field("queued", 8, 8, Access.RO, doc="Commands waiting in the queue (not yet started)."),
            Field("completions", 16, 8, Access.RO, doc="Completions waiting to be popped."),
        ]),
        Register("irq", 0x0C, [
            Field("done", 0, 1, Access.W1C, doc="A completion was pushed."),
            Field("overflow", 1, 1, Access.W1C, doc="A doorbell found the queue full; that command was dropped "
                                                    "(ErrorCode.QUEUE_FULL)."),
        ], doc="The engine's interrupt line is (irq & irq_enable) != 0."),
        Register("irq_enable", 0x10, [Field("done", 0, 1, Access.RW), Field("overflow", 1, 1, Access.RW)]),
        Register("cpl_status", 0x14, [
            Field("valid", 0, 1, Access.RO, doc="A completion is available."),
            Field("error", 4, 4, Access.RO, doc="Its ErrorCode (0 = OK)."),
            Field("tag", 8, 16, Access.RO, doc="The tag the command was submitted with."),
        ]),
        Register.single("cpl_cycles", 0x18, Access.RO, doc="Cycles from the command's start to its completion."),
        Register.single("cpl_bytes_read", 0x1C, Access.RO, doc="Bytes the command read from card memory."),
        Register.single("cpl_bytes_written", 0x20, Access.RO, doc="Bytes the command wrote to card memory."),
        Register("cpl_pop", 0x24, [Field("pop", 0, 1, Access.W1S, doc="Remove the oldest completion.")]),
        Register.single("tag", 0x28, Access.RW, width=16, doc="Tag carried by the next submitted command."),
        Register.single("cpl_start", 0x2C, Access.RO, doc="Cycle stamp of the command's start, on the engine's "
                        "counter (same clock as the shell's, reset with the engines): with cpl_cycles it places "
                        "commands on a timeline."),
        Register.single("cpl_aux", 0x30, Access.RO, doc="Engine-defined result of the command (adam: "
                        "non-finite gradients seen; dma_copy: 0)."),
        Register.single("window_base", 0x34, Access.RW, doc="First byte of the address window the engine's "
                        "commands may read and write (memory isolation; taken with each command at its doorbell)."),
        Register.single("window_size", 0x38, Access.RW, doc="Bytes in the window; 0 (reset) = all of the "
                        "instance's region.  The window used is its intersection with the region; a command reaching "
                        "outside it fails with OUT_OF_WINDOW before moving any data."),
        Register("place", 0x3C, [
            Field("instance", 0, 8, Access.RO, doc="Which instance of its kind this slot holds (0 = the first)."),
            Field("region", 8, 8, Access.RO, doc="The memory region the instance works in (its memory port)."),
        ]),
    ]
    return RegisterBlock(name, common + list(args), doc=doc, size=ENGINE_STRIDE)


def effective_window(base: int, size: int, mem_base: int, mem_size: int) -> tuple[int, int]:
    """The (base, size) an engine checks its transfers against: the window registers
    intersected with its region ``[mem_base, mem_base + mem_size)`` (size 0: all of the
    region).  The shell computes the same in hardware (ndpkit_hw.device)."""
    if size == 0:
        return mem_base, mem_size
    lo, hi = max(base, mem_base), min(base + size, mem_base + mem_size)
    return (lo, hi - lo) if hi > lo else (lo, 0)


def engine_args(block: RegisterBlock):
    """The argument registers of an engine block (those at or above ENGINE_ARGS_OFFSET)."""
    return [r for r in block.registers if r.offset >= ENGINE_ARGS_OFFSET]


def command_fields(block: RegisterBlock):
    """(command field name, register, field) for every argument field: a one-field
    register's field is named after the register, others ``<register>_<field>``.
    The gateware's command layout and the model's command dict both use these names."""
    for reg in engine_args(block):
        for f in reg.fields:
            if f.access is not Access.RW:       # a build constant the engine reports (engine_constants)
                continue
            yield (reg.name if len(reg.fields) == 1 else f"{reg.name}_{f.name}"), reg, f


def slot_layout(instances) -> list[tuple[str, int, int]]:
    """(engine name, instance, slot) of every engine instance of a device whose
    instance counts are ``instances`` (name -> count, in kind order, as
    :func:`ndpkit_spec.registry.instance_counts` gives them): each kind's first
    instance in slot ``kind``, the others from :data:`FIRST_EXTRA_SLOT` on, kind by kind.

    >>> slot_layout({"dma_copy": 1, "attention": 3})
    [('dma_copy', 0, 1), ('attention', 0, 3), ('attention', 1, 16), ('attention', 2, 17)]
    """
    from ndpkit_spec.registry import REGISTRY
    out, extra = [], FIRST_EXTRA_SLOT
    for name, count in instances.items():
        out.append((name, 0, REGISTRY[name].kind))
    for name, count in instances.items():
        for i in range(1, count):
            out.append((name, i, extra))
            extra += 1
    if extra > MAX_SLOTS:
        raise ValueError(f"{extra - FIRST_EXTRA_SLOT} further engine instances need slots up to {extra - 1}, "
                         f"but BAR0 holds {MAX_SLOTS} slots ({MAX_SLOTS - FIRST_EXTRA_SLOT} further instances)")
    return sorted(out, key=lambda e: (REGISTRY[e[0]].kind, e[1]))


def home_region(layout, regions: int) -> dict[tuple[str, int], int]:
    """(name, instance) -> the memory region (port) it works in: the instances in
    kind order, then instance order, dealt round-robin over the regions, so N instances
    on N regions have one region each.

    >>> home_region(slot_layout({"dma_copy": 1, "attention": 3}), 4)
    {('dma_copy', 0): 0, ('attention', 0): 1, ('attention', 1): 2, ('attention', 2): 3}
    """
    return {(name, instance): index % regions for index, (name, instance, _) in enumerate(layout)}


def region_bounds(mem_base: int, mem_size: int, regions: int, region: int) -> tuple[int, int]:
    """(base, size) of memory region ``region`` of ``regions``."""
    size = mem_size // regions
    return mem_base + region * size, size
