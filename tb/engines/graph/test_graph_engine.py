"""Bench: the graph engine (hw/ndpkit_hw/engines/graph/engine.py) on the RTL memory model
against ndpkit.engines.graph.golden.execute.

Small graphs that exercise the corners (one vertex, no edges, self-loops, multi-edges,
isolated vertices, a vertex with a very high in-degree, disconnected parts) and a
Kronecker and a uniform random graph, for SpMV (fp32, with signed zeros, subnormals and
huge values among the entries), PageRank (to its tolerance; one graph with random
degrees and starting ranks, stopped by the iteration limit), BFS, SSSP and connected
components in both modes (Piccolo row gathers and baseline line reads), whole or as a
random row slice (``first_row``, ``rows``: the rest of the output array untouched; PageRank with
each ``contributions`` pass: every vertex's, the slice's only, or given): the result array, the other
buffer, the completion (error, bytes, iterations) and the untouched memory must equal
the golden model's.  Bad graphs (row pointers not starting at 0, decreasing, not
ending at the edge count; a column >= n) and bad commands are rejected with their
codes, nothing written, and the next command works.  Random stalls on cmd/cpl and
every AXI channel.
"""
import cocotb
import numpy as np
import pytest
import scipy.sparse as sp

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.graph import golden
from ndpkit.engines.graph.golden import Program
from ndpkit.engines.graph import csr, generators
from ndpkit_spec.engines.graph import BLOCK as GRAPH, WINDOW_VERTICES
from ndpkit_tools.sim.bench import bench_params, engine_bench, wait_until

CONFIGS = {"w512": {"data_width": 512, "stall_per_256": 30, "stall": 0.2}}
MEM = 1 << 20


def _graphs(rng):
    def coo(n, src, dst):
        return sp.csr_array((np.ones(len(src)), (np.asarray(src), np.asarray(dst))), shape=(n, n))
    yield "single", coo(1, [], [])
    yield "self_loops_multi", coo(6, [0, 0, 1, 2, 2, 3, 5, 5], [0, 1, 1, 3, 3, 4, 5, 0])
    hub = 300
    # in-degree 299 at vertex 0 (the pull programs' long row) and out-degree 150 (SpMV's)
    yield "hub", coo(hub, list(range(1, hub)) + [0, 7] + [0] * 150, [0] * (hub - 1) + [5, 7] + list(range(100, 250)))
    yield "two_parts", coo(40, list(range(0, 19)) + list(range(20, 39)), list(range(1, 20)) + list(range(21, 40)))
    yield "kronecker", generators.kronecker(8, 4, seed=int(rng.integers(1 << 30)))
    yield "uniform", generators.uniform(9, 3, seed=int(rng.integers(1 << 30)))


def _layout(n, e):
    """Addresses of rowptr, col, val, a, b, scratch: 64-byte aligned, 4 KiB guard gaps."""
    addr, out = 0x1000, {}
    for name, count in (("rowptr", n + 1), ("col", max(e, 1)), ("val", max(e, n, 1)), ("a", n), ("b", n),
                        ("scratch", 2 * -(-n // 16) * 16)):
        out[name] = addr
        addr += -(-4 * count // 64) * 64 + 0x1000
    assert addr < MEM
    return out


async def _run(dut, source, sink, memory, rng, fields, image, expect=None):
    """Load ``image``, run one command, compare with the golden model."""
    await memory.write(0, image.tobytes())
    want = image.copy()
    code, _ = golden.check(fields, word_bytes=64, window_base=0, window_size=MEM)
    result = (int(code), 0, 0, 0) if code else golden.execute(want, fields, word_bytes=64)
    source.send(fields)
    await wait_until(dut.clk, lambda: bool(sink.items), 3_000_000, "the graph command's completion")
    cpl = sink.items.popleft()
    got = (cpl["error"], cpl["bytes_read"], cpl["bytes_written"], cpl["aux"])
    assert got == result, f"{fields}: completion {got} != golden {result}"
    if expect is not None:
        assert cpl["error"] == expect, (cpl["error"], expect)
    after = np.frombuffer(await memory.read(0, MEM), dtype=np.uint8)
    diff = np.flatnonzero(after != want)
    assert diff.size == 0, f"{fields}: memory differs from the golden model at {diff[:8]}"
    return cpl


def _fields(layout, n, e, program, mode, max_iterations=1000, window=0, first_row=0, rows=0):
    c = golden.PageRankConstants.for_graph(n)
    return {"format_program": int(program), "format_mode": mode, "n": n, "edges": e, "source_window": window,
            "first_row": first_row, "rows": rows,
            **{k: layout[k] for k in ("rowptr", "col", "val", "a", "b", "scratch")}, "max_iterations": max_iterations,
            "damping": c.damping, "teleport": c.teleport, "inv_n": c.inv_n, "tolerance": c.tolerance, "tag": 1}


def _fp32(rng, count):
    """Random fp32 bit patterns: mostly normal values, some signed zeros, subnormals and huge ones."""
    x = rng.standard_normal(count).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-40, -3e-39, 1e30, -2e38], dtype=np.float32)
    pick = rng.random(count) < 0.1
    x[pick] = rng.choice(special, int(pick.sum()))
    return x.view(np.uint32)


def _image(rng, layout, g, program, weights=None, source=0):
    image = np.frombuffer(rng.bytes(MEM), dtype=np.uint8).copy()
    n, e = g.n, len(g.col)

    def put(name, arr):
        image[layout[name]:layout[name] + 4 * len(arr)] = np.asarray(arr, dtype=np.uint32).view(np.uint8)
    put("rowptr", g.rowptr)
    put("col", g.col)
    if weights is not None:
        put("val", weights)
    if program == Program.SPMV:
        init = _fp32(rng, n)
    elif program == Program.PAGERANK:
        init = np.full(n, golden.PageRankConstants.for_graph(n).inv_n, np.uint32)
    else:
        init = np.arange(n, dtype=np.uint32) if program == Program.CC else np.full(n, golden.INF, np.uint32)
    if program in (Program.BFS, Program.SSSP):
        init[source] = 0
    put("a", init)
    return image


@cocotb.test(timeout_time=3600, timeout_unit="sec")
async def graph_programs(dut):
    from ndpkit_hw.shell.engine_frontend import command_layout
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    source, sink, _ = await engine_bench(dut, command_layout(GRAPH), stall=p["stall"], read_latency=40,
                                         write_latency=20)
    from ndpkit_tools.sim.bench import BulkBackdoor
    memory = BulkBackdoor(dut.memory.storage, dut.clk, 64)
    for name, adj in _graphs(rng):
        for program in (Program.SPMV, Program.PAGERANK, Program.BFS, Program.SSSP, Program.CC):
            kind = program.name.lower()
            w = generators.random_weights(adj, 1, 9, seed=3) if program == Program.SSSP else adj
            g = csr.pull(w, kind)
            values = None
            if program == Program.SSSP:
                values = g.values
            elif program == Program.SPMV:
                values = _fp32(rng, len(g.col))
            elif program == Program.PAGERANK:
                values = golden.out_degrees(g.n, g.col)
            layout = _layout(g.n, len(g.col))
            mode = int(rng.integers(0, 2))
            # half the runs compute a row slice: from a word's first row, through n or a
            # whole number of words
            first, rows = 0, 0
            if g.n > 16 and rng.random() < 0.5:
                first = 16 * int(rng.integers(0, -(-g.n // 16)))
                rows = int(rng.choice([0, g.n - first, 16 * int(rng.integers(1, -(-(g.n - first) // 16) + 1))]))
                rows = min(rows, g.n - first)
                lo, hi = int(g.rowptr[first]), int(g.rowptr[first + (rows or g.n - first)])
                if values is not None and program != Program.PAGERANK:
                    values = values[lo:hi]
                g = csr.PullGraph(g.n, g.rowptr[first:first + (rows or g.n - first) + 1] - lo, g.col[lo:hi],
                                  None, None)
            # the source window: none, part of the sources (the rest through the unit; a count
            # that ends inside a bus word), all of them, or the whole capacity
            window = int(rng.choice([0, 1 + int(rng.integers(0, g.n)), g.n, WINDOW_VERTICES]))
            fields = _fields(layout, g.n, len(g.col), program, mode, window=window, first_row=first, rows=rows)
            image = _image(rng, layout, g, program, values, source=int(rng.integers(0, g.n)))
            if program == Program.PAGERANK and name == "hub":
                # any degrees (0, huge, >= 2**31) and starting values: bit-exact all the same
                degrees = rng.integers(0, 1 << 32, g.n, dtype=np.uint64).astype(np.uint32)
                degrees[rng.random(g.n) < 0.3] = 0
                degrees[:4] = [0, 1, 0x8000_0000, 0xFFFF_FFFF]
                image[layout["val"]:layout["val"] + 4 * g.n] = degrees.view(np.uint8)
                image[layout["a"]:layout["a"] + 4 * g.n] = _fp32(rng, g.n).view(np.uint8)
                fields["max_iterations"] = 3
            if first or rows:
                # a slice reads the other rows of both arrays as the host left them (the driver
                # writes the values into both): random bytes there would be NaN ranks that never
                # converge, a thousand iterations past the bench's time limit
                image[layout["b"]:layout["b"] + 4 * g.n] = image[layout["a"]:layout["a"] + 4 * g.n]
            if program == Program.PAGERANK:
                # the contributions pass: every vertex's (0), the slice's only (1), or given in
                # scratch with the dangling term, then the slice's of the new ranks (2)
                fields["contributions"] = given = int(rng.integers(0, 3))
                if given == 2:
                    ranks, degrees = (image[layout[k]:layout[k] + 4 * g.n].view(np.uint32) for k in ("a", "val"))
                    c = golden.PageRankConstants.for_graph(g.n)
                    image[layout["scratch"]:layout["scratch"] + 4 * g.n] = \
                        golden.contributions(ranks, degrees).view(np.uint8)
                    fields["dangling_term"] = int(golden.dangling_term(ranks, degrees, c))
                    if first or rows:
                        fields["max_iterations"] = 1
            cpl = await _run(dut, source, sink, memory, rng, fields, image, expect=0)
            dut._log.info(f"{name} {program.name} mode {mode} window {window} rows {first}+{rows}: "
                          f"{cpl['aux']} iterations" + (f", contributions {fields['contributions']}"
                                                     if program == Program.PAGERANK else ""))
    # an iteration limit stops early (the result is whatever that iteration wrote)
    g = csr.pull(generators.kronecker(7, 4, seed=5), "bfs")
    layout = _layout(g.n, len(g.col))
    await _run(dut, source, sink, memory, rng, _fields(layout, g.n, len(g.col), Program.BFS, 0, 2),
               _image(rng, layout, g, Program.BFS), expect=0)
    # bad graphs: nothing written, the right code; then a good command
    g = csr.pull(generators.uniform(6, 3, seed=6), "cc")
    layout = _layout(g.n, len(g.col))
    for mutate, code in ((lambda rp, c: rp.__setitem__(0, 1), ErrorCode.BAD_GRAPH),
                         (lambda rp, c: rp.__setitem__(10, rp[9] - 1 if rp[9] else rp[11] + 1), ErrorCode.BAD_GRAPH),
                         (lambda rp, c: c.__setitem__(len(c) - 1, g.n), ErrorCode.BAD_INDEX),
                         (lambda rp, c: (c.__setitem__(3, g.n + 5), rp.__setitem__(5, rp[4] - 1 if rp[4] else 9)),
                          ErrorCode.BAD_GRAPH)):
        rp, c = g.rowptr.copy(), g.col.copy()
        mutate(rp, c)
        bad = csr.PullGraph(g.n, rp, c, None, None)
        await _run(dut, source, sink, memory, rng, _fields(layout, g.n, len(c), Program.CC, 1),
                   _image(rng, layout, bad, Program.CC), expect=code)
    # on the edge lanes (every source in the window) the validation pass judges the row
    # pointers beside the window's load, and the columns are judged as the first edge pass
    # takes them, its results held: a bad column anywhere (the last, near the end, among the
    # first words; a graph of a few columns) still writes nothing, as does a bad row pointer
    # there; then a good command
    few = csr.pull(sp.csr_array((np.ones(9), (np.arange(9), np.arange(1, 10))), shape=(g.n, g.n)), "cc")
    # (PageRank's too, its first edge pass the pull sums': over given contributions, or over
    # those its contributions pass wrote into the window, scratch untouched)
    given = {"contributions": 2, "max_iterations": 1}
    computed = {"contributions": 0, "max_iterations": 2}
    runs = ((Program.CC, {}), (Program.SSSP, {}), (Program.SPMV, {}), (Program.PAGERANK, given),
            (Program.PAGERANK, computed))
    for graph, at in ((g, len(g.col) - 1), (g, len(g.col) - 20), (g, 2), (few, len(few.col) - 1), (few, 0)):
        for program, extra in runs:
            c = graph.col.copy()
            c[at] = graph.n + int(rng.integers(0, 3))
            bad = csr.PullGraph(graph.n, graph.rowptr, c, None, None)
            dut._log.info(f"bad column {at} of {len(c)}, {program.name} {extra}, window {graph.n}")
            await _run(dut, source, sink, memory, rng,
                       {**_fields(layout, graph.n, len(c), program, 0, window=graph.n), **extra},
                       _image(rng, layout, bad, program), expect=ErrorCode.BAD_INDEX)
        rp = graph.rowptr.copy()
        rp[len(rp) // 2] = rp[-1] + 1
        await _run(dut, source, sink, memory, rng, _fields(layout, graph.n, len(graph.col), Program.SSSP, 0,
                                                          window=graph.n),
                   _image(rng, layout, csr.PullGraph(graph.n, rp, graph.col, None, None), Program.SSSP),
                   expect=ErrorCode.BAD_GRAPH)
        await _run(dut, source, sink, memory, rng, _fields(layout, graph.n, len(graph.col), Program.SSSP, 0,
                                                          window=graph.n),
                   _image(rng, layout, graph, Program.SSSP), expect=0)
        for extra in (given, computed):
            await _run(dut, source, sink, memory, rng,
                       {**_fields(layout, graph.n, len(graph.col), Program.PAGERANK, 0, window=graph.n), **extra},
                       _image(rng, layout, graph, Program.PAGERANK), expect=0)
    bad_end = csr.PullGraph(g.n, g.rowptr, g.col, None, None)
    await _run(dut, source, sink, memory, rng, _fields(layout, g.n, len(g.col) - 1, Program.CC, 0),
               _image(rng, layout, bad_end, Program.CC), expect=ErrorCode.BAD_GRAPH)
    for change, code in (({"format_program": 7}, ErrorCode.BAD_FIELD),
                         ({"format_program": int(Program.PAGERANK), "tolerance": 0x8000_0000}, ErrorCode.BAD_FIELD),
                         ({"format_program": int(Program.PAGERANK), "tolerance": 0x7F80_0001}, ErrorCode.BAD_FIELD),
                         ({"format_program": int(Program.PAGERANK), "scratch": layout["b"]}, ErrorCode.OVERLAP),
                         ({"format_program": int(Program.PAGERANK), "scratch": MEM - 64}, ErrorCode.OUT_OF_WINDOW),
                         ({"n": 0}, ErrorCode.BAD_FIELD), ({"max_iterations": 0}, ErrorCode.BAD_FIELD),
                         ({"source_window": WINDOW_VERTICES + 1}, ErrorCode.BAD_FIELD),
                         ({"first_row": 8}, ErrorCode.BAD_FIELD), ({"first_row": g.n}, ErrorCode.BAD_FIELD),
                         ({"first_row": 16, "rows": g.n}, ErrorCode.BAD_FIELD),
                         ({"first_row": 16, "rows": 5}, ErrorCode.BAD_FIELD),
                         ({"contributions": 1}, ErrorCode.BAD_FIELD),
                         ({"format_program": int(Program.PAGERANK), "contributions": 3}, ErrorCode.BAD_FIELD),
                         ({"format_program": int(Program.PAGERANK), "contributions": 2, "first_row": 16,
                           "max_iterations": 2}, ErrorCode.BAD_FIELD),
                         ({"a": layout["a"] + 4}, ErrorCode.UNALIGNED), ({"b": MEM - 64}, ErrorCode.OUT_OF_WINDOW),
                         ({"b": layout["a"]}, ErrorCode.OVERLAP)):
        fields = {**_fields(layout, g.n, len(g.col), Program.CC, 0), **change}
        await _run(dut, source, sink, memory, rng, fields, _image(rng, layout, g, Program.CC), expect=code)
    await _run(dut, source, sink, memory, rng, _fields(layout, g.n, len(g.col), Program.CC, 1, window=g.n // 2),
               _image(rng, layout, g, Program.CC), expect=0)


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_graph_engine(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.graph.engine import GraphEngine
    from ndpkit_hw.engines.harness import EngineHarness
    c = CONFIGS[config]
    run_bench(Design(EngineHarness(GraphEngine(), mem_size=MEM, stall_per_256=c["stall_per_256"]), "graph_engine",
                     key=f"{c} {MEM}", quick_build=True), __name__, params=c)
