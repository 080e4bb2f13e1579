"""The register blocks of the project's gateware, declared once.

``ALL_BLOCKS`` is what ``make regs`` documents (docs/registers.md) and turns into C
headers.  BAR0 layout of a device: ``GLOBAL`` at 0x0000, engine kind ``k`` (see
:class:`ndpkit.codes.EngineKind`) at ``k * ENGINE_STRIDE``.

Every engine block starts with the same command/completion registers
(:func:`engine_block`), so one driver loop and one gateware front end
(:class:`ndpkit_hw.shell.engine_frontend.EngineFrontend`) serve every engine; the
engine's own command arguments follow from ``ENGINE_ARGS_OFFSET``.
"""
from __future__ import annotations

from .declare import Access, Field, Register, RegisterBlock

__all__ = ["GLOBAL", "DMA_COPY", "ADAM", "DECOMP", "ATTENTION", "SG", "GRAPH", "ENGINE_BLOCKS", "ALL_BLOCKS", "NDPKIT_MAGIC", "VERSION",
           "ENGINE_STRIDE", "ENGINE_ARGS_OFFSET", "BAR0_SIZE", "IRQ_LINES", "engine_block", "engine_args",
           "effective_window",
           "command_fields"]

NDPKIT_MAGIC = 0x4E44504B   # "NDPK"
VERSION = (0, 3)            # (major, minor) of the register interface
ENGINE_STRIDE = 0x1000
ENGINE_ARGS_OFFSET = 0x40
BAR0_SIZE = 0x10000
IRQ_LINES = 8               # usr_irq_req width: line 0 global, line k engine kind k

GLOBAL = RegisterBlock("shell", [
    Register.single("id", 0x00, Access.RO, doc="Reads 0x4E44504B ('NDPK')."),
    Register("version", 0x04, [Field("minor", 0, 16, Access.RO), Field("major", 16, 16, Access.RO)],
             doc="Register-interface version; the driver refuses a different major."),
    Register("build", 0x08, [
        Field("word_bytes", 0, 8, Access.RO, doc="Bytes per memory-bus word (64 at 512 bits)."),
        Field("queue_depth", 8, 8, Access.RO, doc="Command-queue depth of every engine."),
        Field("irq_lines", 16, 8, Access.RO, doc="Width of usr_irq_req."),
        Field("clock_mhz", 24, 8, Access.RO, doc="Nominal device clock in MHz (what cycle counts are scaled by)."),
    ]),
    Register.single("engines", 0x0C, Access.RO, doc="Bit k set: engine kind k (ndpkit.codes.EngineKind) is present "
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
        Register.single("window_size", 0x38, Access.RW, doc="Bytes in the window; 0 (reset) = all of card "
                        "memory.  The window used is its intersection with card memory; a command reaching "
                        "outside it fails with OUT_OF_WINDOW before moving any data."),
    ]
    return RegisterBlock(name, common + list(args), doc=doc, size=ENGINE_STRIDE)


def effective_window(base: int, size: int, mem_base: int, mem_size: int) -> tuple[int, int]:
    """The (base, size) an engine checks its transfers against: the window registers
    intersected with card memory (size 0: all of card memory).  The shell computes
    the same in hardware (ndpkit_hw.top)."""
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
            yield (reg.name if len(reg.fields) == 1 else f"{reg.name}_{f.name}"), reg, f


DMA_COPY = engine_block("dma_copy", [
    Register("op", 0x40, [Field("op", 0, 4, Access.RW, doc="0 = copy src -> dst, 1 = fill dst with pattern.")]),
    Register.single("src", 0x44, Access.RW, doc="Source byte address (copy): word aligned, inside card memory."),
    Register.single("dst", 0x48, Access.RW, doc="Destination byte address: word aligned, inside card memory."),
    Register.single("length", 0x4C, Access.RW, doc="Bytes: non-zero multiple of the bus word."),
    Register.single("pattern", 0x50, Access.RW, doc="Fill: this 32-bit word repeated over the destination."),
], doc="Memory-to-memory copy and pattern fill over the burst engines. Copy ranges must not overlap "
       "(ErrorCode.OVERLAP).")

_SCALAR_DOCS = {
    "grad_scale": "float32: every gradient is multiplied by it first (loss-scale unscale or clip factor; 1.0 = none).",
    "weight_decay": "float32: Adam (L2) mode: g = fma(p, weight_decay, g); 0 skips the step.",
    "beta1": "float32: m = m * beta1 ...",
    "one_minus_beta1": "float32: ... m = fma(g, one_minus_beta1, m).",
    "beta2": "float32: v = v * beta2 ...",
    "one_minus_beta2": "float32: ... v = fma(g*g, one_minus_beta2, v).",
    "bias_correction2": "float32: 1 / sqrt(1 - beta2**t): d = fma(sqrt(v), bias_correction2, eps).",
    "eps": "float32: the epsilon added to the corrected sqrt(v).",
    "decay": "float32: AdamW mode: p = fma(p, decay, p) with decay = -lr * weight_decay; 0 skips the step.",
    "step_size": "float32: p = fma(m / d, step_size, p) with step_size = -lr / (1 - beta1**t).",
}

ADAM = engine_block("adam", [
    Register("format", 0x40, [
        Field("mode", 0, 2, Access.RW, doc="0 = AdamW (decoupled decay), 1 = Adam (L2 decay into the gradient)."),
        Field("grad", 4, 2, Access.RW, doc="Gradient format: 0 fp32, 1 fp16, 2 bf16."),
        Field("copy", 8, 2, Access.RW, doc="16-bit parameter copy: 0 none, 1 fp16, 2 bf16 (RNE)."),
        Field("sparse", 12, 1, Access.RW, doc="1 = the gradient is `pairs` (index, value) pairs, indices strictly "
              "ascending (stream-mode decompression fused into the update; values at `g` in the `format.grad` "
              "format, indices at `idx`)."),
    ]),
    Register.single("count", 0x44, Access.RW, doc="Elements n (any n >= 1; arrays occupy whole bus words)."),
    Register.single("p", 0x48, Access.RW, doc="fp32 parameters, read and written in place (word aligned)."),
    Register.single("m", 0x4C, Access.RW, doc="fp32 first moments, in place."),
    Register.single("v", 0x50, Access.RW, doc="fp32 second moments, in place."),
    Register.single("g", 0x54, Access.RW, doc="Gradients in the `format.grad` format (read only)."),
    Register.single("copy", 0x58, Access.RW, doc="16-bit parameter copy destination (when format.copy != 0)."),
    Register.single("pairs", 0x5C, Access.RW, doc="Sparse mode: number of (index, value) pairs k, 1 <= k <= count."),
] + [Register.single(name, 0x60 + 4 * i, Access.RW, doc=doc) for i, (name, doc) in enumerate(_SCALAR_DOCS.items())]
  + [Register.single("idx", 0x88, Access.RW, doc="Sparse mode: uint32 indices of the pairs (word aligned).")],
    doc="Adam/AdamW update of fp32 p, m, v in card memory from fp32/fp16/bf16 gradients (DeepSpeed CPU Adam "
        "operation order, bit-exact to ndpkit.golden.adam), with an optional fp16/bf16 copy of p. Arrays must not "
        "overlap each other (OVERLAP); a bad format or mode is BAD_FIELD; cpl_aux counts non-finite gradients. "
        "Sparse mode: k = 0 is ZERO_LENGTH, k > count BAD_FIELD; a pair found out of order (BAD_FIELD) or with "
        "index >= count (OUT_OF_WINDOW) stops the update before the vector being built: cpl_aux then gives the "
        "elements updated (a multiple of the lanes).")

DECOMP = engine_block("decomp", [
    Register("format", 0x40, [Field("value", 0, 2, Access.RW, doc="Value (and destination) format: 0 fp32, 1 fp16, "
                                                                  "2 bf16.")]),
    Register.single("count", 0x44, Access.RW, doc="Elements n of the dense destination (n >= 1)."),
    Register.single("pairs", 0x48, Access.RW, doc="Pairs k (k >= 1; any order, repeats and sentinels allowed)."),
    Register.single("idx", 0x4C, Access.RW, doc="uint32 indices (word aligned); 0xFFFFFFFF is padding, skipped."),
    Register.single("val", 0x50, Access.RW, doc="Values in the `format.value` format (word aligned)."),
    Register.single("dst", 0x54, Access.RW, doc="Dense destination, n elements in the value format (word aligned)."),
], doc="Scatter-mode gradient decompression (Smart-Infinity compatible): zero-fill the n-element destination, "
       "then write the k pairs in array order (a repeated index keeps the last value; index 0xFFFFFFFF is "
       "skipped). An index >= n (not the sentinel) stops the command with OUT_OF_WINDOW after the pairs before "
       "it were written. cpl_aux counts the pairs written.")

ATTENTION = engine_block("attention", [
    Register("format", 0x40, [
        Field("q", 0, 2, Access.RW, doc="Query format: 0 fp32, 1 fp16, 2 bf16."),
        Field("kv", 4, 2, Access.RW, doc="KV-cache format: 1 fp16, 2 bf16."),
        Field("out", 8, 2, Access.RW, doc="Output format: 0 fp32, 1 fp16, 2 bf16 (RNE)."),
    ]),
    Register.single("table", 0x44, Access.RW, doc="Request descriptor table: `requests` entries of 64 bytes "
                    "(docs/attention.md), word aligned; the engine writes each entry's status word."),
    Register.single("requests", 0x48, Access.RW, doc="Requests in the batch (>= 1)."),
    Register("shape", 0x4C, [
        Field("head_dim", 0, 8, Access.RW, doc="d: 64 or 128."),
        Field("group", 8, 8, Access.RW, doc="G: query heads per KV head, 1..16 (1 = multi-head attention)."),
        Field("kv_heads", 16, 8, Access.RW, doc="KV heads per request, 1..64."),
    ]),
    Register.single("scale", 0x50, Access.RW, doc="float32 softmax scale folded into q (usually 1/sqrt(d))."),
], doc="Decode attention over a card-resident KV cache for a batch of requests (one query token each, GQA), "
       "one pass over K and V with block online softmax, bit-exact to ndpkit.golden.attention. Whole-command "
       "checks (formats, shape, requests, table) fail the command with nothing written; a request that fails "
       "its own checks gets its code in its status word and the rest of the batch runs; cpl_aux counts the "
       "failed requests.")

SG = engine_block("sg", [
    Register("op", 0x40, [Field("op", 0, 4, Access.RW, doc="0 = read requests (line reads, row gathers: each "
                                                           "response to `out`), 1 = write requests (line writes, "
                                                           "row scatters).")]),
    Register.single("table", 0x44, Access.RW, doc="Request descriptors, 128 bytes each (docs/sg.md): op, element "
                    "size and count, the line or row address, 16 uint16 element offsets, 64 data bytes."),
    Register.single("requests", 0x48, Access.RW, doc="Descriptors in the table (>= 1)."),
    Register.single("out", 0x4C, Access.RW, doc="Read commands: 64 bytes per request, the line or the packed "
                    "gathered elements (zero from a failed request on)."),
], doc="Memory-side scatter-gather (after Piccolo): a batch of 64-byte line reads/writes and row-local gathers/"
       "scatters of 4- or 8-byte elements through the scatter-gather unit and its modelled off-chip link "
       "(2 KiB DRAM rows). Whole-command checks (op, requests, table and out ranges) fail with nothing done; "
       "requests run in table order and the first bad one (its op of the other direction: BAD_FIELD; element size "
       "or count: BAD_FIELD; alignment, window, an offset outside the row: BAD_INDEX) stops the batch with its code. "
       "cpl_aux: the link bytes the command's requests moved.")

GRAPH = engine_block("graph", [
    Register("format", 0x40, [
        Field("program", 0, 4, Access.RW, doc="Vertex program (ndpkit.golden.graph.Program): 0 SpMV (b = A a, fp32), "
              "1 PageRank (fp32, to the tolerance or max_iterations), 2 BFS, 3 SSSP, 4 connected components."),
        Field("mode", 4, 1, Access.RW, doc="0 = Piccolo (source values fetched by row gathers), 1 = baseline "
              "(64-byte line reads)."),
    ]),
    Register.single("n", 0x44, Access.RW, doc="Vertices, 1..2**24."),
    Register.single("edges", 0x48, Access.RW, doc="Entries of the column (and weight) arrays; 0 allowed."),
    Register.single("rowptr", 0x4C, Access.RW, doc="uint32[n + 1] row pointers of the pull matrix (row v lists "
                    "the sources of v's in-edges): 0 first, non-decreasing, `edges` last."),
    Register.single("col", 0x50, Access.RW, doc="uint32[edges] source vertex ids, each < n."),
    Register.single("val", 0x54, Access.RW, doc="SSSP: uint32[edges] edge weights; SpMV: fp32[edges] matrix entries; "
                    "PageRank: uint32[n] out-degrees (how often each vertex appears in col)."),
    Register.single("a", 0x58, Access.RW, doc="uint32[n] initial values (BFS/SSSP: 0 at the source, 0xFFFFFFFF "
                    "elsewhere; CC: the vertex ids; SpMV: the fp32 vector x, read only through the unit; PageRank: "
                    "the fp32 starting ranks, 1/n each for networkx's); the result after an even number of "
                    "iterations."),
    Register.single("b", 0x5C, Access.RW, doc="uint32[n] the other buffer: the result after an odd number (SpMV: y, one iteration)."),
    Register.single("max_iterations", 0x60, Access.RW, doc="Iteration limit (>= 1)."),
    Register.single("scratch", 0x64, Access.RW, doc="PageRank: 2 x n words of card memory (whole bus words each) "
                    "the engine writes every iteration: the contributions rank/out-degree, then the pull sums."),
    Register.single("damping", 0x68, Access.RW, doc="PageRank: fp32 damping factor d."),
    Register.single("teleport", 0x6C, Access.RW, doc="PageRank: fp32 (1 - d) / n."),
    Register.single("inv_n", 0x70, Access.RW, doc="PageRank: fp32 1 / n (spreads the dangling rank)."),
    Register.single("tolerance", 0x74, Access.RW, doc="PageRank: fp32 n x tol; converged when the iteration's L1 "
                    "change is below it.  Negative or NaN: BAD_FIELD."),
], doc="Pull-style graph programs (PageRank in fp32, BFS levels, SSSP with uint32 weights, connected components; SpMV in fp32) "
       "over a CSR pull matrix, Jacobi iterations until nothing changes (SpMV: one pass), source values fetched through the scatter-gather unit "
       "(Piccolo row gathers or baseline line reads), bit-exact to ndpkit.golden.graph. Whole-command checks "
       "(program, mode, n, max_iterations: BAD_FIELD; arrays by the transfer rule; overlaps) fail with nothing "
       "done; a validation pass over the row pointers and columns (BAD_GRAPH, BAD_INDEX) runs before anything is "
       "written. cpl_aux: iterations run (the result is in `a` if even, `b` if odd); PageRank sets bit 31 "
       "when it stopped by its tolerance.")

ENGINE_BLOCKS = {"dma_copy": DMA_COPY, "adam": ADAM, "decomp": DECOMP, "attention": ATTENTION, "sg": SG,
                 "graph": GRAPH}

ALL_BLOCKS = (GLOBAL, DMA_COPY, ADAM, DECOMP, ATTENTION, SG, GRAPH)
