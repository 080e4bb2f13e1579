"""graph: pull-style graph programs and SpMV over the scatter-gather unit (after
Piccolo; docs/engines/graph.md)."""
from __future__ import annotations

import enum

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.regs import Access, Field, Register
from ndpkit_spec.shell import engine_block

__all__ = ["BLOCK", "ENGINE", "Program", "ACC_LANES", "MAX_VERTICES", "MODE_PICCOLO", "MODE_BASELINE", "CONVERGED",
           "WINDOW_VERTICES", "EDGE_LANES"]


class Program(enum.IntEnum):
    """The vertex program (register ``format.program``)."""
    SPMV = 0
    PAGERANK = 1
    BFS = 2
    SSSP = 3
    CC = 4


#: FMA partial sums per row (fp32 row sums: entry k to partial k mod ACC_LANES, then the
#: pairwise tree): eight FMAs of latency 14 (with their input and read stages, 16) each
#: owning 16 of them take a row's entries eight a cycle however long the row
ACC_LANES = 128
MAX_VERTICES = 1 << 24              # vertex ids and degrees convert to fp32 exactly below this
MODE_PICCOLO, MODE_BASELINE = 0, 1
CONVERGED = 1 << 31                 # PageRank's cpl_aux: set when it stopped by its tolerance
#: the default build's source window: source values of vertices 0 .. 16383 on chip
#: (64 KiB: 16 BRAM36 at 512 x 1024), what the model card and the simulated card report
WINDOW_VERTICES = 1 << 14
#: the default build's edge lanes: BFS, SSSP and CC edge passes take up to 8 edges a cycle
#: (a lane-aligned group of one row's columns) when every source is in the window
EDGE_LANES = 8

BLOCK = engine_block("graph", [
    Register("format", 0x40, [
        Field("program", 0, 4, Access.RW, doc="Vertex program (ndpkit.engines.graph.golden.Program): 0 SpMV (b = A a, fp32), "
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
    Register.single("source_window", 0x78, Access.RW, doc="Source values held on chip: before every edge pass the "
                    "values of vertices 0 .. min(source_window, n) - 1 are read with full bursts into the engine's source "
                    "window, and each edge whose source lies there takes its value from it; the other sources go "
                    "through the unit in the command's mode.  0 = none.  Above window_capacity: BAD_FIELD."),
    Register.single("window_capacity", 0x7C, Access.RO, doc="Vertices the build's source window holds "
                    "(GraphEngine(window_vertices=)); 0 = the build has none."),
    Register.single("first_row", 0x80, Access.RW, doc="The first destination row the command computes (a "
                    "multiple of the bus word's 32-bit elements, below n; else BAD_FIELD): a row slice of the pull "
                    "matrix, so several instances share a graph, each its rows.  rowptr then holds that slice's rows "
                    "+ 1 entries (0 first, edges last), the columns stay vertex ids below n, each row's own value is "
                    "a[first_row + v], and the results land at the same place in the output array; the rest of "
                    "the output array is not written.  PageRank's contributions (scratch) still cover all n "
                    "vertices; its sums, new ranks and L1 change cover the slice."),
    Register.single("rows", 0x84, Access.RW, doc="Rows of the slice from first_row; 0 = through n.  Past n, or not "
                    "a multiple of the bus word's elements unless the slice ends at n: BAD_FIELD."),
    Register.single("contributions", 0x88, Access.RW, doc="PageRank's contributions pass (other programs: 0, "
                    "else BAD_FIELD): 0 = each iteration begins with the contributions of all n vertices and their "
                    "dangling rank; 1 = only the slice's: one pass writes rank/out-degree of the slice's rows of a into "
                    "the same rows of scratch, nothing else (cpl_aux 0); 2 = given: each iteration pulls the "
                    "contributions already in scratch (all n, put there by the host from every slice's pass) with "
                    "dangling_term, writes the slice's sums and new ranks, then the slice's contributions of the new "
                    "ranks (so instances on several channels share one graph, each the passes of its rows).  Above 2: "
                    "BAD_FIELD.  With 2, max_iterations above 1 needs the slice to be the whole graph (the next "
                    "iteration's dangling term is the slice's own), else BAD_FIELD (max_iterations)."),
    Register.single("dangling_term", 0x8C, Access.RW, doc="PageRank with contributions = 2: fp32 dangling rank x "
                    "(1/n) for the first iteration (the dangling rank: the rank of every vertex without out-edges, "
                    "summed in vertex order by the partial-sum rule)."),
    Register("exchange", 0x90, [
        Field("share", 0, 1, Access.RW, doc="1 = the command's results also go, as bus words tagged with `round`, to "
              "window set (round + 1) mod 2 of every graph instance on the card (this one's too) over the card's "
              "window exchange: the rows of its edge pass, or PageRank's slice contributions (contributions 1 or 2; "
              "with 0: BAD_FIELD).  An instance drops words into the set its running command reads."),
        Field("take", 1, 1, Access.RW, doc="1 = the command's edge pass takes its source window from set round mod 2 "
              "as the exchange filled it, with no load from memory: every source in the window (source_window >= n; "
              "PageRank with contributions 2).  BAD_FIELD unless that set holds every word of the window "
              "(ceil(n / 16) at 512 bits), each from round - 1 (mod 2**16), counted since it was last emptied "
              "(a load from memory into it, `fresh`, a newer round's first word) and not poisoned (a sharing command "
              "of that round ended with an error).  With share, cpl_aux bit 30 is set when the iteration changed "
              "a value (BFS, SSSP, CC)."),
        Field("fresh", 2, 1, Access.RW, doc="1 = the round starts set (round + 1) mod 2 afresh: its record of "
              "a round is emptied as the command starts (a run's first round, every instance's command started "
              "together, before any shares: words left from an earlier run never count)."),
        Field("round", 16, 16, Access.RW, doc="The round: the command reads window set round mod 2 (loaded, or "
              "taken) and shares into the other.  With share or take: max_iterations 1 and a build with two "
              "window sets (window_sets), else BAD_FIELD."),
    ]),
    Register.single("window_sets", 0x94, Access.RO, doc="Window sets the build has (2: the card's window exchange "
                    "reaches it, `exchange` works; 1: one window, `exchange` must be 0)."),
], doc="Pull-style graph programs (PageRank in fp32, BFS levels, SSSP with uint32 weights, connected components; SpMV in fp32) "
       "over a CSR pull matrix, Jacobi iterations until nothing changes (SpMV: one pass), source values fetched through the scatter-gather unit "
       "(Piccolo row gathers or baseline line reads), bit-exact to ndpkit.engines.graph.golden. Whole-command checks "
       "(program, mode, n, max_iterations, the row slice: BAD_FIELD; arrays by the transfer rule; overlaps) fail with nothing "
       "done; a validation pass over the row pointers and columns (BAD_GRAPH, BAD_INDEX) runs before anything is "
       "written. cpl_aux: iterations run (the result is in `a` if even, `b` if odd); PageRank sets bit 31 "
       "when it stopped by its tolerance.")

ENGINE = EngineSpec(
    name="graph", kind=5, block=BLOCK,
    summary="SpMV, PageRank, BFS, SSSP and connected components over CSR graphs (Piccolo or baseline mode)",
    gateware="ndpkit_hw.engines.graph:GraphEngine",
    golden="ndpkit.engines.graph.golden",
    client="ndpkit.engines.graph.client:GraphClient",
    min_data_width=512,
    # "ecp5": fewer DRAM banks modelled, cache lines and response ids, one edge lane (no lane
    # read ports on the window), the build that fits the
    # LFE5UM5G-85F for its routed Fmax (the default does not); same datapath
    # the default build's read-only registers (the model card reports them)
    constants={"window_capacity": WINDOW_VERTICES, "window_sets": 2},
    configs={"default": {"data_width": 512},
             "ecp5": {"data_width": 512, "banks": 4, "cache_lines": 16, "response_ids": 16, "edge_lanes": 1}},
    config_label=lambda p: f"{p['data_width']}-bit" + "".join(
        f", {p[k]} {what}" for k, what in (("banks", "banks"), ("cache_lines", "cache lines"),
                                           ("response_ids", "response ids")) if k in p) + (
        f", {p['edge_lanes']} edge lane{'s' * (p['edge_lanes'] != 1)}" if "edge_lanes" in p else ""),
)
