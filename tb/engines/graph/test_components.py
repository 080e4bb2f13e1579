# amaranth: UnusedElaboratable=no
"""The graph engine's components alone, in Amaranth's simulator against Python models,
with random stalls on every valid/ready pair (the ``rng`` fixture prints its seed; ``SEED=`` reproduces): the edge
generator, the word packer and unpacker, the source-value cache, the collector (collection-extended MSHR) with the
response table, the source window, the single-edge path's gathers (cache, collector, table, tickets and reducer behind a
modelled unit), the edge lanes, the word-rate validator, the fp32 row sums, PageRank's vertex passes (bit for bit the
golden operations), the routes of the readers' words and of a pass's results, and where the result words go
(written, held until the columns' verdict, dropped, or into the window).
The whole engine's bench is ``test_graph_engine.py``."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from tb.amaranth_sim import Offer, run_to_end

from ndpkit.arith import fp
from ndpkit_hw.engines.graph.cache import SourceCache
from ndpkit_hw.engines.graph.collector import Collector
from ndpkit_hw.engines.graph.edges import EdgeGenerator
from ndpkit_hw.engines.graph.held import ResultWords
from ndpkit_hw.engines.graph.lanes import EdgeLanes
from ndpkit_hw.engines.graph.pagerank import VertexPass
from ndpkit_hw.engines.graph.responses import ResponseTable
from ndpkit_hw.engines.graph.rowsums import RowSums
from ndpkit_hw.engines.graph.validate import GraphValidator
from ndpkit_hw.engines.graph.window import SourceWindow
from ndpkit_hw.engines.graph.words import WordPacker, WordUnpacker


def _drive(ctx, port, items, rng, i):
    """Offer items[i] on stream ``port`` (valid with probability 0.7)."""
    on = i < len(items) and rng.random() < 0.7
    ctx.set(port.valid, on)
    if on:
        ctx.set(port.payload, items[i])


def _fired(ctx, port):
    return bool(ctx.get(port.valid) and ctx.get(port.ready))


async def _stream_through(ctx, rng, into, out, items, count, *, offer=0.7, take=0.6, offering=None):
    """Offer ``items`` on stream ``into`` (valid with probability ``offer``) and collect
    ``count`` payloads from ``out`` (ready with probability ``take``); ``offering(item)``
    is called with the item offered each cycle (to drive inputs that go with it)."""
    got, i = [], 0
    while len(got) < count:
        ctx.set(into.valid, i < len(items) and rng.random() < offer)
        ctx.set(into.payload, items[min(i, len(items) - 1)])
        if offering:
            offering(items[min(i, len(items) - 1)])
        ready = rng.random() < take
        ctx.set(out.ready, ready)
        if ctx.get(out.valid) and ready:
            got.append(ctx.get(out.payload))
        i += _fired(ctx, into)
        await ctx.tick()
    ctx.set(into.valid, 0)
    return got


def test_edge_generator_turns_rows_into_edges(rng):
    n = 40
    degrees = [rng.choice([0, 0, 1, 2, 3, 7]) for _ in range(n)]
    rowptr = np.concatenate([[0], np.cumsum(degrees)]).astype(int).tolist()
    col = [rng.randrange(1 << 24) for _ in range(rowptr[-1])]
    val = [rng.randrange(1 << 32) for _ in range(rowptr[-1])]
    expected = []
    for v in range(n):
        row = list(range(rowptr[v], rowptr[v + 1]))
        if not row:
            expected.append((0, 0, 1, 1, 1))
        for k, e in enumerate(row):
            expected.append((col[e], val[e], 0, int(k == 0), int(k == len(row) - 1)))
    dut = EdgeGenerator()
    got = []

    async def bench(ctx):
        ctx.set(dut.uses_val, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.run, 1)
        i = {"rowptr": 0, "col": 0, "val": 0}
        while len(got) < len(expected):
            for name, items in (("rowptr", rowptr), ("col", col), ("val", val)):
                _drive(ctx, getattr(dut, name), items, rng, i[name])
            ready = rng.random() < 0.6
            ctx.set(dut.edge.ready, ready)
            fired = {name: _fired(ctx, getattr(dut, name)) for name in i}
            if ctx.get(dut.edge.valid) and ready:
                e = ctx.get(dut.edge.payload)
                got.append((e.u if not e.empty else 0, e.weight if not e.empty else 0, e.empty, e.first, e.last))
            for name in i:
                i[name] += fired[name]
            await ctx.tick()
        assert ctx.get(dut.idle)
    run_to_end(dut, bench)
    assert got == expected


@pytest.mark.parametrize("group", [None, 2])
def test_word_packer_fills_whole_words_and_pads_the_last(rng, group):
    """Passes of 37, 1, 16, 5 and 3 elements into 128-bit words with random gaps and random
    back-pressure on the words: each pass gives ``ceil(count / 4)`` words, the elements in
    order and the last word padded with zeros; ``done`` only once the last word was handed
    on, and then; the count changes with start and settles the cycle after (as the
    engine's pass flags do).  With ``group`` 2, the passes alternate between groups of two
    a cycle (the last one short) and single elements (in ``data[0]``, beside a stale
    ``data[1]`` and count that must not be written)."""
    dut = WordPacker(128, group=group)

    async def bench(ctx):
        for p, count in enumerate((37, 1, 16, 5, 3)):
            grouped = group is not None and p % 2 == 0
            step = group if grouped else 1
            elements = [rng.randrange(1 << 32) for _ in range(count)]
            padded = elements + [0] * (-count % 4)
            want = [sum(e << (32 * k) for k, e in enumerate(padded[i:i + 4])) for i in range(0, count, 4)]
            if group is None:
                items = elements
            else:
                items = [{"data": (elements[i:i + step] + [rng.randrange(1 << 32)] * group)[:group],
                          "count": min(step, count - i) if grouped else rng.randrange(group + 1)}
                         for i in range(0, count, step)]
                ctx.set(dut.grouped, grouped)
            ctx.set(dut.count, 3)        # the previous phase's count, while start is high
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.count, count)
            got, i = [], 0
            for _ in range(20 * count + 20):
                if ctx.get(dut.done):
                    assert got == want, "done before the last word was handed on"
                _drive(ctx, dut.elements, items, rng, i)
                ready = rng.random() < 0.5
                ctx.set(dut.words.ready, ready)
                if ctx.get(dut.words.valid) and ready:
                    got.append(ctx.get(dut.words.payload).data)
                i += _fired(ctx, dut.elements)
                await ctx.tick()
            ctx.set(dut.elements.valid, 0)
            assert got == want and i == len(items) and ctx.get(dut.done)
    run_to_end(dut, bench)


@pytest.mark.parametrize("group", [None, 2])
@pytest.mark.parametrize("counts", [(37, 3, 16), (1, 0, 32)])
def test_word_unpacker_gives_count_elements_in_order_through_its_skid_register(rng, counts, group):
    """Passes of ``count`` elements from 128-bit words (the last word's tail dropped),
    random stalls on both sides; ``done`` only once every element has left, and
    ``start`` begins the next pass from a fresh word.  The count changes with start
    and settles the cycle after (as the engine's pass flags do).  With ``group`` 2 the
    elements leave two at a time, the pass's last group holding what is left."""
    dut = WordUnpacker(128, group=group)
    step = group or 1
    got_all = []

    async def bench(ctx):
        for count in counts:
            elements = [rng.randrange(1 << 32) for _ in range(count)]
            # the last word's unused elements: noise that must not leave
            noise = elements + [rng.randrange(1 << 32) for _ in range(-count % 4)]
            words = [sum(e << (32 * k) for k, e in enumerate(noise[i:i + 4])) for i in range(0, count, 4)]
            want = elements if group is None else [(elements[i:i + step], min(step, count - i))
                                                   for i in range(0, count, step)]
            ctx.set(dut.count, 7)        # the previous phase's count, while start is high
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.count, count)
            got, w = [], 0
            for cycle in range(20 * count + 20):
                on = w < len(words) and rng.random() < 0.7
                ctx.set(dut.words.valid, on)
                ctx.set(dut.words.payload, {"data": words[w] if on else 0, "last": int(w == len(words) - 1)})
                ready = rng.random() < 0.5
                ctx.set(dut.elements.ready, ready)
                if cycle:                # (the count is taken the cycle after start)
                    assert ctx.get(dut.done) == (len(got) == len(want))
                if ctx.get(dut.elements.valid) and ready:
                    out = ctx.get(dut.elements.payload)
                    got.append(out if group is None else (list(out.data)[:out.count], out.count))
                w += on and ctx.get(dut.words.ready)
                await ctx.tick()
            assert got == want and w == len(words) and ctx.get(dut.done)
            got_all.append(got)
    run_to_end(dut, bench)
    assert len(got_all) == len(counts)


def test_source_cache_matches_a_direct_mapped_model(rng):
    lines = 4
    entries = 16 * lines
    dut = SourceCache(lines)
    model = {}                           # entry -> (tag, value)

    async def bench(ctx):
        for step in range(600):
            u = rng.randrange(4 * entries)
            ctx.set(dut.u, u)
            await ctx.delay(1e-9)
            entry, tag = u % entries, u // entries
            want = model.get(entry)
            hit = want is not None and want[0] == tag
            assert ctx.get(dut.hit) == hit, (step, u)
            if hit:
                assert ctx.get(dut.value) == want[1]
            op = rng.random()
            if op < 0.05:
                ctx.set(dut.clear, 1)
                model.clear()
            elif op < 0.55:
                fill_u, whole = rng.randrange(4 * entries), rng.random() < 0.4
                line = [rng.randrange(1 << 32) for _ in range(16)]
                ctx.set(dut.fill, 1)
                ctx.set(dut.fill_u, fill_u)
                ctx.set(dut.whole, whole)
                ctx.set(dut.fill_line, sum(w << (32 * k) for k, w in enumerate(line)))
                first = fill_u % entries
                if whole:
                    for k in range(16):
                        model[first - first % 16 + k] = (fill_u // entries, line[k])
                else:
                    model[first] = (fill_u // entries, line[fill_u % 16])
            await ctx.tick()
            ctx.set(dut.fill, 0)
            ctx.set(dut.clear, 0)
    run_to_end(dut, bench)


@pytest.mark.parametrize("baseline", [0, 1], ids=["piccolo", "baseline"])
def test_collector_groups_edges_and_tickets_find_their_values(rng, baseline):
    """Every ticket's (id, lane) names a sent request whose row gather (or line read)
    fetches exactly that edge's source value; groups never exceed 16 members; every
    id's member count is the number of tickets naming it; the response table hands
    out ids and frees them when the reducer (here: the bench) consumes the members."""
    row_bytes, base, slots, ids = 2048, 0x10000, 4, 8
    dut_c = Collector(addr_width=32, row_bytes=row_bytes, slots=slots, ids=ids, timeout=32)
    dut_t = ResponseTable(ids)
    edges = []
    for _ in range(400):
        # half the sources in one row (groups fill to 16 and must close), some in a few rows,
        # the rest anywhere (groups time out or are evicted)
        kind = rng.random()
        u = rng.randrange(512) if kind < 0.5 else rng.randrange(2048) if kind < 0.7 else rng.randrange(1 << 20)
        edges.append({"u": u, "weight": 0, "empty": int(rng.random() < 0.05), "first": 0, "last": 0})
    tickets, requests = [], {}           # requests: id -> list of (address, count, offsets, op)

    from amaranth.hdl import Module
    top = Module()
    top.submodules.c, top.submodules.t = dut_c, dut_t
    top.d.comb += [dut_t.open.eq(dut_c.open), dut_c.next_id.eq(dut_t.next_id), dut_c.next_free.eq(dut_t.next_free),
                   dut_t.send.eq(dut_c.send), dut_t.send_id.eq(dut_c.send_id),
                   dut_t.send_members.eq(dut_c.send_members)]

    async def bench(ctx):
        ctx.set(dut_c.baseline, baseline)
        i = decided = 0                  # edges taken in, edges with their ticket
        in_flight = []                   # ids sent, in order
        arrived = {}                     # id -> responses arrived under it so far
        for cycle in range(40000):
            if i < len(edges) and rng.random() < 0.8:
                ctx.set(dut_c.edge.valid, 1)
                ctx.set(dut_c.edge.payload, edges[i])
                ctx.set(dut_c.address, base + 4 * edges[i]["u"])   # (the window stage computes it)
                ctx.set(dut_c.key, (base + 4 * edges[i]["u"]) >> (6 if baseline else row_bytes.bit_length() - 1))
            else:
                ctx.set(dut_c.edge.valid, 0)
            ctx.set(dut_c.ticket_room, rng.random() < 0.8)
            ctx.set(dut_c.flush, i == len(edges))
            ctx.set(dut_c.req.ready, rng.random() < 0.3)
            ctx.set(dut_c.hit, 0)
            # the unit answers the oldest request now and then
            answer = bool(in_flight) and rng.random() < 0.3
            ctx.set(dut_t.resp.valid, answer)
            ctx.set(dut_t.resp.payload, 0)
            # the reducer consumes one member of an arrived group now and then
            ready = [t for t in tickets if not t["done"] and arrived.get(t["id"], 0) > t["n"]]
            consume = ready[0] if ready and rng.random() < 0.5 else None
            ctx.set(dut_t.consume, consume is not None)
            ctx.set(dut_t.read_id, consume["id"] if consume else 0)
            await ctx.delay(1e-9)
            if consume is not None:
                assert ctx.get(dut_t.arrived)
            if ctx.get(dut_c.req.valid) and ctx.get(dut_c.req.ready):
                r = ctx.get(dut_c.req.payload)
                sid = ctx.get(dut_c.send_id)
                assert 1 <= r.count <= 16 and ctx.get(dut_c.send_members) == r.count
                requests.setdefault(sid, []).append((r.address, r.count, [r.offsets[k] for k in range(16)], r.op))
                in_flight.append(sid)
            if ctx.get(dut_c.ticket_en):             # the oldest edge taken in (edges wait a stage)
                tk = ctx.get(dut_c.ticket)
                e = edges[decided]
                assert (tk.u, tk.empty) == (e["u"], e["empty"])
                if not e["empty"]:
                    tickets.append({"u": e["u"], "id": tk.id, "lane": tk.lane, "done": False,
                                    "n": len(requests.get(tk.id, []))})
                decided += 1
            if ctx.get(dut_c.edge.valid) and ctx.get(dut_c.edge.ready):
                i += 1
            if answer:
                done_id = in_flight.pop(0)
                arrived[done_id] = arrived.get(done_id, 0) + 1
            if consume is not None:
                consume["done"] = True
            await ctx.tick()
            if i == len(edges) and not in_flight and all(t["done"] for t in tickets) and \
                    not ctx.get(dut_c.busy):
                break
        assert i == decided == len(edges) and all(t["done"] for t in tickets)
    run_to_end(top, bench, deadline=80000)
    for t in tickets:
        # the request of the ticket's group: the first sent under its id after the ticket was written
        address, count, offsets, op = requests[t["id"]][t["n"]]
        source = base + 4 * t["u"]
        if baseline:
            assert op == 0 and address == source & ~63 and t["lane"] == (source >> 2) & 15
        else:
            assert op == 2 and address == source & ~(row_bytes - 1)
            assert t["lane"] < count and offsets[t["lane"]] == (source % row_bytes) >> 2


@pytest.mark.parametrize("vertices", [64, 0])
def test_source_window_serves_the_loaded_values_in_edge_order(rng, vertices):
    """Passes of a source window of 64 vertices (four 512-bit words; 0: the build
    without one): each loads ``count`` values (a count ending inside a word, the whole
    window, none) by words with random gaps, then edges go through with random stalls
    on both sides: every edge leaves in order, unchanged, with ``hit`` exactly when its
    source is below the count (then its loaded value) or the cache answered a hit for it
    as it entered (then the cache's value), and its source value's byte address; a new
    pass's values replace the old ones."""
    dut = SourceWindow(vertices, 512)
    passes = 0

    async def bench(ctx):
        nonlocal passes
        for count in ([37, 64, 0, 5] if vertices else [0, 0]):
            values = [rng.randrange(1 << 32) for _ in range(64)]
            base = rng.randrange(1 << 20) * 64
            ctx.set(dut.start, 1)
            ctx.set(dut.count, count)
            ctx.set(dut.base, base)
            await ctx.tick()
            ctx.set(dut.start, 0)
            words = [sum(v << (32 * k) for k, v in enumerate(values[i:i + 16])) for i in range(0, count, 16)]
            w = 0
            while w < len(words):
                on = rng.random() < 0.6
                ctx.set(dut.load.valid, on)
                ctx.set(dut.load.payload, {"data": words[w] if on else 0, "last": int(w == len(words) - 1)})
                w += on
                await ctx.tick()
            ctx.set(dut.load.valid, 0)
            assert ctx.get(dut.loaded) == (len(words) if vertices else 0)
            edges = [{"u": rng.randrange(80), "weight": rng.randrange(1 << 32), "empty": 0,
                      "first": rng.randrange(2), "last": rng.randrange(2)} for _ in range(120)]
            # the cache's answer for the entering edge: vertices divisible by 3, a value of
            # their own (not the window's)
            def cached(u):
                return u % 3 == 0, (u * 2654435761 + passes) & 0xFFFF_FFFF

            def answer(item):
                hit, value = cached(item["u"])
                ctx.set(dut.cache_hit, hit)
                ctx.set(dut.cache_value, value)
            got = await _stream_through(ctx, rng, dut.edge, dut.out, edges, len(edges), offering=answer)
            for want, out in zip(edges, got):
                assert (out.edge.u, out.edge.weight, out.edge.first, out.edge.last) == \
                    (want["u"], want["weight"], want["first"], want["last"])
                assert out.address == base + 4 * want["u"]
                in_window = bool(vertices) and want["u"] < count
                cache_hit, cache_value = cached(want["u"])
                assert out.hit == (in_window or cache_hit), (count, want["u"])
                if in_window:
                    assert out.value == values[want["u"]]
                elif cache_hit:
                    assert out.value == cache_value
            passes += 1
    run_to_end(dut, bench)
    assert passes == (4 if vertices else 2)


def _validator_cases(rng):
    """(n, rows, rowptr, col) graphs, good and bad in each way the validation names:
    whole (rows = n) and row slices (rows < n vertices: columns up to n - 1 are good)."""
    from ndpkit.engines.graph import csr, generators
    from ndpkit.engines.graph.golden import validate   # noqa: F401  (the reference, used by the caller)
    for n in (1, 15, 16, 17, 40):
        g = csr.pull(generators.uniform(6, 3, seed=rng.randrange(1 << 20)), "cc") if n == 40 else None
        if g is None:
            degrees = [rng.choice([0, 1, 3]) for _ in range(n)]
            rowptr = [0] + list(np.cumsum(degrees))
            col = [rng.randrange(n) for _ in range(rowptr[-1])]
        else:
            n, rowptr, col = g.n, list(g.rowptr), list(g.col)
        rows = n
        if rng.random() < 0.5:               # a slice: the columns may name the vertices past its rows
            n += 7
            col = [v if rng.random() < 0.8 else rng.randrange(n) for v in col]
        yield n, rows, rowptr, col
        e = len(col)
        for mutate in ("first", "drop", "drop_at_word", "end", "col", "col_last", "both"):
            rp, c = list(rowptr), list(col)
            if mutate == "first":
                rp[0] = 1
            elif mutate == "drop" and rows > 1:
                k = rng.randrange(1, rows + 1)
                rp[k] = rp[k - 1] - 1 if rp[k - 1] else 7
            elif mutate == "drop_at_word" and rows >= 4:
                rp[3] = rp[4] + 1            # a word's first pointer below the last of the word before
            elif mutate == "end":
                rp[rows] = e + 1
            elif mutate in ("col", "col_last", "both") and e:
                c[e - 1 if mutate == "col_last" else rng.randrange(e)] = n + rng.randrange(3)
                if mutate == "both":
                    rp[0] = 2
            yield n, rows, rp, c


def test_validator_judges_words_like_the_golden_model(rng):
    """Row pointers and columns a bus word a cycle (128-bit words here: 4 elements), with
    random gaps: the verdicts (BAD_GRAPH from the row pointers, BAD_INDEX from the
    columns) equal ``golden.validate``'s for good graphs and each kind of bad one —
    first pointer, a decrease (also across a word boundary), the last pointer, a column
    out of range (also the very last), of whole matrices and of row slices — and ``done``
    comes once every word is judged; half the cases as the engine runs a graph whose
    first pass is on the edge lanes: the row pointers alone, then (if they pass) the
    columns watched as another consumer takes them (the validator must be ready for
    each, never holding the stream back)."""
    from ndpkit.engines.graph.golden import GraphError, validate
    from ndpkit_spec.codes import ErrorCode
    dut = GraphValidator(128)
    cases = list(_validator_cases(rng))
    seen = []

    def words(values):
        values = [int(v) & 0xFFFF_FFFF for v in values]
        return [sum(v << (32 * k) for k, v in enumerate(values[i:i + 4])) for i in range(0, len(values), 4)]

    async def judge(ctx, n, rows, rowptr, col, col_on, rowptr_on, watched=False):
        """One pass over the row pointers (or none) and the column words (or none);
        ``watched``: each column word counts as taken when offered, as the edge lanes take it."""
        ctx.set(dut.n, n)
        ctx.set(dut.rows, rows)
        ctx.set(dut.edges, len(col))
        ctx.set(dut.col_words, len(words(col)) if col_on else 0)
        ctx.set(dut.rowptr_on, rowptr_on)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        streams = {"rowptr": words(rowptr) if rowptr_on else [], "col": words(col) if col_on else []}
        sent = {"rowptr": 0, "col": 0}
        for _ in range(400):
            for name, ws in streams.items():
                port = getattr(dut, name)
                on = sent[name] < len(ws) and rng.random() < 0.6
                ctx.set(port.valid, on)
                ctx.set(port.payload, {"data": ws[sent[name]] if on else 0, "last": 0})
            fired = {name: _fired(ctx, getattr(dut, name)) for name in streams}
            if watched and ctx.get(dut.col.valid):
                assert ctx.get(dut.col.ready), "the validator held back a watched column word"
            done = ctx.get(dut.done)
            await ctx.tick()
            for name in streams:
                sent[name] += fired[name]
            if done and all(sent[k] == len(streams[k]) for k in streams):
                break
        else:
            raise AssertionError(f"validator never done for n={n}")
        for name in streams:
            ctx.set(getattr(dut, name).valid, 0)
        return (ErrorCode.BAD_GRAPH if ctx.get(dut.bad_graph) else
                ErrorCode.BAD_INDEX if ctx.get(dut.bad_index) else ErrorCode.OK)

    async def bench(ctx):
        for n, rows, rowptr, col in cases:
            # half the cases as the engine runs a first pass on the edge lanes: the row
            # pointers beside the window's load, then the columns as the lanes take them
            split = rng.random() < 0.5
            got = await judge(ctx, n, rows, rowptr, col, not split, 1)
            if got == ErrorCode.OK and split:
                got = await judge(ctx, n, rows, rowptr, col, True, 0, watched=True)
            try:
                validate(n, rowptr, col, rows=rows)
                want = ErrorCode.OK
            except GraphError as e:
                want = e.code
            assert got == want, repr((n, split, [int(v) for v in rowptr], [int(v) for v in col]))
            seen.append(want)
    run_to_end(dut, bench)
    assert {ErrorCode.OK, ErrorCode.BAD_GRAPH, ErrorCode.BAD_INDEX} <= set(seen)


def _row_sum_cycles(lengths, fmas, rng=None):
    """Each row's entries as the cycles that offer them: up to ``fmas`` a cycle (with
    ``rng``, now and then fewer mid-row), a row without entries as ``count = 0``."""
    cycles, k = [], 0
    for length in lengths:
        if length == 0:
            cycles.append((k, 0, 1))
        left = length
        while left:
            count = min(left, fmas if rng is None or rng.random() < 0.7 else rng.randint(1, fmas))
            left -= count
            cycles.append((k, count, int(left == 0)))
            k += count
    return cycles


def _row_sum_items(cycles, a, b, fmas):
    return [{"a": [a[k + j] if j < count else 0 for j in range(fmas)],
             "b": [b[k + j] if j < count else 0 for j in range(fmas)], "count": count, "last": last}
            for k, count, last in cycles]


@pytest.mark.parametrize("fmas,banks", [(1, 2), (2, 8), (4, 16), (8, 16), pytest.param(2, 1, marks=pytest.mark.long)])
def test_row_sums_equal_the_golden_row_sums(rng, fmas, banks):
    """Rows of 0 to 260 entries (empty rows, rows past a group of 16 of the 128 partials
    and past all of them, twice round, single entries in a row: the banks' turn at full speed) of random fp32 products with signed zeros,
    subnormals and huge values, up to ``fmas`` entries a cycle (fewer now and then),
    offered with random gaps, the sums taken with random back-pressure: every row's sum
    equals ``golden.row_sums`` bit for bit, in row order, and ``idle`` holds once the
    last sum is out."""
    from ndpkit.engines.graph import golden
    from ndpkit_spec.engines.graph import ACC_LANES
    dut = RowSums(ACC_LANES, fmas=fmas, banks=banks)
    special = [0, 0x8000_0000, 0x0000_0001, 0x8060_0000, 0x7F00_0000, 0xFF00_0000, 0x3F80_0000]
    lengths = [rng.choice([0, 1, 1, 2, 5, 16, 17, 31, 32, 33, 40, 48, 49, 64, 65, 70, 128, 129, 130, 200, 260]) for _ in range(36)]
    rowptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def values(count):
        return [rng.choice(special) if rng.random() < 0.15 else
                int(np.float32(rng.gauss(0, 1)).view(np.uint32)) for _ in range(count)]
    a, b = values(int(rowptr[-1])), values(int(rowptr[-1]))
    want = golden.row_sums(rowptr, np.array(a, np.uint32), np.array(b, np.uint32))
    assert _row_sums_through(dut, rng, lengths, a, b, offer=0.8, take=0.7) == [int(w) for w in want]


def _row_sums_through(dut, rng, lengths, a, b, *, offer, take):
    """The sums ``dut`` (a :class:`RowSums`) gives for rows of ``lengths`` entries
    ``a[k] * b[k]``, offered with random gaps and taken with random back-pressure;
    ``idle`` must hold once the last sum is out."""
    items = _row_sum_items(_row_sum_cycles(lengths, dut.fmas, rng), a, b, dut.fmas)
    got = []

    async def bench(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        got.extend(await _stream_through(ctx, rng, dut.entry, dut.sums, items, len(lengths), offer=offer, take=take))
        await ctx.tick()
        assert ctx.get(dut.idle) and not ctx.get(dut.sums.valid)
    run_to_end(dut, bench)
    return got


def test_row_sums_of_negative_zeros(rng):
    """Products that round to -0 in every partial a row reaches: partials of -0 sum to
    -0, and the quarters a row did not reach (+0) turn it into +0, as the golden tree
    does (the drain skips those quarters and adds +0 in their place)."""
    from ndpkit.engines.graph import golden
    from ndpkit_spec.engines.graph import ACC_LANES
    from ndpkit_hw.engines.graph.engine import SUM_BANKS, SUM_FMAS
    dut = RowSums(ACC_LANES, fmas=SUM_FMAS, banks=SUM_BANKS)
    lengths = [16, 1, 17, 128, 0, 64, 129]
    n = sum(lengths)
    a, b = [0x8000_0001] * n, [0x3E80_0000] * n          # -2^-149 * 0.25 rounds to -0
    rowptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    want = golden.row_sums(rowptr, np.array(a, np.uint32), np.array(b, np.uint32))
    assert want.tolist() == [0, 0, 0, 0x8000_0000, 0, 0, 0x8000_0000]     # every partial reached: -0
    assert _row_sums_through(dut, rng, lengths, a, b, offer=0.9, take=0.8) == [int(w) for w in want]


def _row_sum_entry_cycles(fmas, lengths, banks=8, partials=None):
    """The cycles RowSums(``partials``, fmas, ``banks``) takes to accept ``lengths``' rows of ones,
    offered ``fmas`` a cycle every cycle, the sums always taken (and the cycles offered)."""
    from ndpkit_spec.engines.graph import ACC_LANES
    dut = RowSums(partials or ACC_LANES, fmas=fmas, banks=banks)
    cycles = _row_sum_cycles(lengths, fmas)
    items = _row_sum_items(cycles, [0x3F80_0000] * sum(lengths), [0x3F80_0000] * sum(lengths), fmas)
    taken, sums = [], []

    async def bench(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.sums.ready, 1)
        i, cycle = 0, 0
        while i < len(items) or len(sums) < len(lengths):
            if i < len(items):
                ctx.set(dut.entry.valid, 1)
                ctx.set(dut.entry.payload, items[i])
                if ctx.get(dut.entry.ready):
                    i += 1
                    if i == len(items):
                        taken.append(cycle + 1)
            else:
                ctx.set(dut.entry.valid, 0)
            if ctx.get(dut.sums.valid):
                sums.append(ctx.get(dut.sums.payload))
            cycle += 1
            await ctx.tick()
    run_to_end(dut, bench)
    # (every row of ones sums to its length: a partial reused too early would lose an entry)
    assert sums == [int(np.float32(n).view(np.uint32)) for n in lengths]
    print(f"fmas {fmas}: {len(cycles)} entry cycles offered, taken in {taken[0]}")
    return taken[0], len(cycles)


def test_row_sums_take_two_entries_a_cycle():
    """With two FMAs and eight banks, long rows go in at two entries a cycle, and short
    rows (one to four entries) follow each other while the banks cover the FMAs'
    latency (about 20 cycles from a row's last entry to its bank's drain).  The entries
    are offered every cycle and the sums always taken: 207 entry cycles in 230 (with
    two banks 16 rows of two entries alone would take 160)."""
    taken, offered = _row_sum_entry_cycles(2, [200, 64, 3, 1, 4, 2, 1, 3, 100] + [2] * 16)
    # two entries a cycle through the long rows; a short row waits for a bank only when
    # eight rows start within the FMAs' latency
    assert taken <= offered + 30, (taken, offered)


def test_row_sums_take_four_entries_a_cycle():
    """With four FMAs (32 of the 128 partials each, more than the FMA's recurrence of 16
    cycles) rows go in at four entries a cycle however long, and rows of one to sixteen
    entries drain in one cycle each (a quarter of the partials: the others are +0), so
    with the engine's sixteen banks short rows follow each other at the rate they come;
    every sum is its row's (no entry lost to a partial reused too early)."""
    from ndpkit_hw.engines.graph.engine import SUM_BANKS
    short = [16] * 24 + [12, 5, 32, 8] * 4 + [1, 3, 2, 4] * 8
    taken, offered = _row_sum_entry_cycles(4, short, SUM_BANKS)
    assert offered <= taken <= offered + 12, (taken, offered)
    taken, offered = _row_sum_entry_cycles(4, [200, 33, 64, 130], SUM_BANKS)
    assert offered <= taken <= offered + 4, (taken, offered)


def test_row_sums_take_eight_entries_a_cycle():
    """The engine's eight FMAs own sixteen of the 128 partials each, as many as the
    recurrence: rows go in at eight entries a cycle however long (Kronecker graphs hold
    half their edges in rows past 64 entries), short rows one after another."""
    from ndpkit_hw.engines.graph.engine import SUM_BANKS, SUM_FMAS
    assert SUM_FMAS == 8
    short = [16] * 24 + [12, 5, 32, 8, 64] * 4 + [1, 3, 2, 4] * 8
    taken, offered = _row_sum_entry_cycles(8, short, SUM_BANKS)
    assert offered <= taken <= offered + 12, (taken, offered)
    taken, offered = _row_sum_entry_cycles(8, [200, 33, 64, 130, 1000], SUM_BANKS)
    assert offered <= taken <= offered + 4, (taken, offered)


def test_row_sums_wait_for_partials_they_reuse():
    """With fewer partials an FMA than its recurrence (64 partials on eight FMAs), a row
    of up to 64 entries goes in at eight a cycle, and a longer one waits for its
    partials (entry k no sooner than 16 cycles after entry k - 64: four a cycle); no
    entry is lost to a partial reused too early (every row of ones sums to its length)."""
    from ndpkit_hw.engines.graph.engine import SUM_BANKS
    short = [16] * 24 + [12, 5, 32, 8, 64] * 4 + [1, 3, 2, 4] * 8
    taken, offered = _row_sum_entry_cycles(8, short, SUM_BANKS, partials=64)
    assert offered <= taken <= offered + 12, (taken, offered)
    lengths = [200, 33, 64, 130]
    taken, offered = _row_sum_entry_cycles(8, lengths, SUM_BANKS, partials=64)
    # (a long row: its first 64 entries in 8 cycles, then 64 more every 16)
    bound = sum(-(-n // 8) if n <= 64 else 16 * (n // 64) + -(-(n % 64) // 8) for n in lengths)
    assert offered < taken <= bound + 4, (taken, bound)


@pytest.mark.parametrize("lanes", [1, 4, 8])
def test_vertex_pass_is_the_golden_arithmetic(rng, lanes):
    """Both passes over 63 vertices in groups of ``lanes`` (the last one short), random
    gaps and back-pressure: every vertex's value and term equal the golden arithmetic,
    in order, each group's count kept."""
    pyrng, rng = rng, np.random.default_rng(rng.randrange(1 << 30))
    n = 63
    ranks = fp.bits(rng.random(n, dtype=np.float32) / n)
    degrees = rng.choice([0, 1, 2, 3, 1000, (1 << 31) - 1], size=n).astype(np.uint32)
    sums = fp.bits(rng.random(n, dtype=np.float32) / 10)
    d, tele, dterm = (int(fp.bits(np.float32(x))[0]) for x in (0.85, 0.15 / n, 1e-3))
    contrib = np.where(degrees != 0, fp.div(ranks, fp.int32_to_fp32(degrees)), 0).astype(np.uint32)
    dangling = np.where(degrees != 0, 0, ranks).astype(np.uint32)
    new = fp.fma(np.full(n, d, np.uint32), fp.add(sums, np.full(n, dterm, np.uint32)), np.full(n, tele, np.uint32))
    change = fp.sub(new, ranks) & np.uint32(0x7FFF_FFFF)
    dut = VertexPass(lanes)

    def group(items, i):
        part = [int(x) for x in items[i:i + lanes]]
        return {"data": part + [pyrng.randrange(1 << 32) for _ in range(lanes - len(part))], "count": len(part)}

    async def bench(ctx):
        for update, others, want_written, want_summed in ((0, degrees, contrib, dangling), (1, sums, new, change)):
            ctx.set(dut.update, update)
            ctx.set(dut.damping, int(d))
            ctx.set(dut.teleport, int(tele))
            ctx.set(dut.dterm, int(dterm))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.run, 1)
            i, written, summed, counts = 0, [], [], []
            while len(written) < n:
                both = i < n and pyrng.random() < 0.8
                for port, items in ((dut.rank, ranks), (dut.other, others)):
                    ctx.set(port.valid, both)
                    ctx.set(port.payload, group(items, i) if both else {"data": [0] * lanes, "count": 0})
                ctx.set(dut.out.ready, pyrng.random() < 0.6)
                await ctx.delay(1e-9)
                if both and ctx.get(dut.rank.ready):
                    assert ctx.get(dut.other.ready)
                    i += lanes
                if ctx.get(dut.out.valid) and ctx.get(dut.out.ready):
                    out = ctx.get(dut.out.payload)
                    counts.append(out.count)
                    written += list(out.written)[:out.count]
                    summed += list(out.summed)[:out.count]
                await ctx.tick()
            ctx.set(dut.run, 0)
            assert counts == [min(lanes, n - k) for k in range(0, n, lanes)]
            assert written == [int(x) for x in want_written]
            assert summed == [int(x) for x in want_summed]
    run_to_end(dut, bench)


def _single_result(p, sums):
    """A single-path result as the benches compare it: a row minimum, or an entry's
    (weight, value, empty, last) (an empty row's entry carries no value)."""
    if not sums:
        return p
    empty = int(p.count == 0)
    return (p.a[0], None if empty else p.b[0], empty, p.last)


@pytest.mark.parametrize("sums", [False, True], ids=["min", "sums"])
def test_reducer_resolves_and_reduces_edges_in_order(rng, sums):
    """Tickets of random rows (empty rows, window or cache hits, members of response
    groups whose lines arrive late), own values and the outputs with random stalls:
    every fetched member is consumed and filled into the cache once, in order (its
    lane broadcast, or the whole line in baseline mode); min programs give each row
    ``min(own, min over its edges of value + weight)`` (saturating) and ``changed``
    exactly when some row's result differs from its own value; summing programs pass
    every edge on as an FMA entry (weight, value; a row without edges as count 0)."""
    from ndpkit_hw.engines.graph.collector import ticket_layout
    from ndpkit_hw.engines.graph.reducer import Reducer
    INF = 0xFFFF_FFFF
    ids = 8
    layout = ticket_layout(ids)
    dut = Reducer(layout, ids)
    baseline = rng.random() < 0.5
    lines = {i: [rng.choice([rng.randrange(1 << 32), INF, INF - 3]) for _ in range(16)] for i in range(ids)}
    tickets, rows, fetched = [], [], []
    for _ in range(60):
        own = rng.choice([INF, rng.randrange(1 << 20)])
        edges = []
        for k in range(rng.choice([0, 1, 1, 2, 5])):
            weight = rng.choice([0, 1, rng.randrange(1 << 31), INF])
            hit = rng.random() < 0.4
            i, lane, u = rng.randrange(ids), rng.randrange(16), rng.randrange(1 << 24)
            value = rng.choice([rng.randrange(1 << 20), INF]) if hit else lines[i][lane]
            edges.append(value)
            tickets.append({"empty": 0, "first": int(k == 0), "last": 0, "id": i, "lane": lane, "weight": weight,
                            "hit": int(hit), "value": value if hit else 0, "u": u})
            if not hit:
                fetched.append((u, i, lane))
        if edges:
            tickets[-1]["last"] = 1
        else:
            tickets.append({"empty": 1, "first": 1, "last": 1, "id": 0, "lane": 0, "weight": 0, "hit": 0,
                            "value": 0, "u": 0})
        weights = [t["weight"] for t in tickets[len(tickets) - max(len(edges), 1):]] if edges else []
        best = own
        for value, weight in zip(edges, weights):
            best = min(best, INF if value == INF or value + weight >= INF else value + weight)
        rows.append((own, best))
    # (an empty row's entry carries no value: the row sums ignore it)
    want_entries = [(t["weight"], None if t["empty"] else t["value"] if t["hit"] else lines[t["id"]][t["lane"]],
                     t["empty"], t["last"]) for t in tickets]

    async def bench(ctx):
        ctx.set(dut.run, 1)
        ctx.set(dut.sums, sums)
        ctx.set(dut.baseline, baseline)
        i = j = 0
        got, consumed, delay = [], [], rng.randrange(4)
        want_count = len(want_entries) if sums else len(rows)
        out = dut.entry if sums else dut.minimum
        for _ in range(40 * len(tickets)):
            on = i < len(tickets) and rng.random() < 0.8
            ctx.set(dut.tickets.valid, on)
            ctx.set(dut.tickets.payload, tickets[min(i, len(tickets) - 1)])
            rid = ctx.get(dut.read_id)
            ctx.set(dut.line, sum(v << (32 * k) for k, v in enumerate(lines[rid])))
            ctx.set(dut.arrived, delay == 0)
            on_own = j < len(rows) and rng.random() < 0.7
            ctx.set(dut.own.valid, on_own)
            ctx.set(dut.own.payload, rows[min(j, len(rows) - 1)][0])
            ready = rng.random() < 0.6
            ctx.set(out.ready, ready)
            if ctx.get(dut.fill):
                u, lid, lane = fetched[len(consumed)]
                line = ctx.get(dut.fill_line)
                want_line = lines[lid] if baseline else [lines[lid][lane]] * 16
                assert ctx.get(dut.consume) and ctx.get(dut.fill_u) == u
                assert line == sum(v << (32 * k) for k, v in enumerate(want_line))
                consumed.append(u)
            assert bool(ctx.get(dut.consume)) == bool(ctx.get(dut.fill))
            if ctx.get(out.valid) and ready:
                got.append(_single_result(ctx.get(out.payload), sums))
            took = _fired(ctx, dut.tickets)
            j += _fired(ctx, dut.own)
            await ctx.tick()
            if took:
                i += 1
                delay = rng.randrange(4)
            elif delay:
                delay -= 1
            if len(got) == want_count and i == len(tickets):
                break
        ctx.set(dut.tickets.valid, 0)
        for _ in range(3):
            await ctx.tick()
        assert len(consumed) == len(fetched)
        if sums:
            assert got == want_entries
        else:
            assert got == [best for _, best in rows] and j == len(rows)
            assert ctx.get(dut.changed) == any(own != best for own, best in rows)
        assert not ctx.get(dut.busy)

    run_to_end(dut, bench)


def test_windowed_queue_passes_an_edge_a_cycle():
    """The queue before the collector takes and gives an edge every cycle when both
    sides are ready (a buffered queue of two would halve every edge pass's rate)."""
    from amaranth.sim import Simulator
    from ndpkit_hw.engines.graph.window import windowed_queue
    queue = windowed_queue(8)
    sim = Simulator(queue)
    sim.add_clock(1e-6)
    passed = []

    async def bench(ctx):
        sent = 0
        for _ in range(64):
            ctx.set(queue.w_en, 1)
            ctx.set(queue.w_data, sent & 0xFF)
            ctx.set(queue.r_en, 1)
            await ctx.delay(1e-9)
            if ctx.get(queue.r_rdy):
                passed.append(ctx.get(queue.r_data))
            sent += ctx.get(queue.w_rdy)
            await ctx.tick()
    sim.add_testbench(bench)
    sim.run()
    assert len(passed) >= 62 and passed == list(range(len(passed)))


class _EdgeLanes(wiring.Component):
    """The edge lanes as the engine wires them: their lookups through the source
    window's lane ports."""

    def __init__(self, lanes):
        from ndpkit_spec.engines.graph import ACC_LANES
        self.lanes = EdgeLanes(lanes)
        self.bundler, self.reducer = self.lanes.bundler, self.lanes.reducer
        self.window = SourceWindow(64, 512, read_lanes=lanes)
        self.sums = RowSums(ACC_LANES, fmas=2)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.lanes, m.submodules.window, m.submodules.sums = self.lanes, self.window, self.sums
        m.d.comb += [self.window.lane_u.eq(self.lanes.lane_u), self.window.lane_en.eq(self.lanes.lane_en),
                     self.lanes.lane_value.eq(self.window.lane_value), self.sums.start.eq(self.lanes.start)]
        wiring.connect(m, self.lanes.entries, self.sums.entry)
        return m

    async def load(self, ctx, values, *, sums, uses_val, weight, edges):
        """Restart the lanes, load the 64-vertex window with ``values``, set the pass."""
        b, w = self.lanes, self.window
        ctx.set(b.start, 1)
        ctx.set(w.start, 1)
        ctx.set(w.count, 64)
        await ctx.tick()
        for s in (b.start, w.start):
            ctx.set(s, 0)
        for word in _words(values):
            ctx.set(w.load.valid, 1)
            ctx.set(w.load.payload, {"data": word, "last": 0})
            await ctx.tick()
        ctx.set(w.load.valid, 0)
        for port, value in ((b.sums, sums), (b.uses_val, uses_val), (b.weight, weight), (b.edges, edges), (b.run, 1)):
            ctx.set(port, value)

    async def run(self, ctx, rng, streams, out, count, each=None):
        """Offer ``streams`` (port name -> items) with random gaps and take ``count``
        results from ``out`` with random stalls (``each()`` checked every cycle); returns
        the results and how many items of each stream were taken."""
        b = self.lanes
        at, got = dict.fromkeys(streams, 0), []
        while len(got) < count:
            for name, items in streams.items():
                _drive(ctx, getattr(b, name), items, rng, at[name])
            ready = rng.random() < 0.6
            ctx.set(out.ready, ready)
            if ready and ctx.get(out.valid):
                got.append(ctx.get(out.payload))
            if each:
                each()
            for name in streams:
                at[name] += _fired(ctx, getattr(b, name))
            await ctx.tick()
        for name in streams:
            ctx.set(getattr(b, name).valid, 0)
        assert at == {name: len(items) for name, items in streams.items()}   # every word taken, no more
        return got


def _words(items):
    """32-bit items in 512-bit bus words (the last padded with zeros)."""
    items = list(items) + [0] * (-len(items) % 16)
    return [sum(v << (32 * k) for k, v in enumerate(items[i:i + 16])) for i in range(0, len(items), 16)]


def _word_stream(items):
    return [{"data": x, "last": 0} for x in _words(items)]


@pytest.mark.parametrize("lanes", [pytest.param(2, marks=pytest.mark.long), 8,
                                   pytest.param(16, marks=pytest.mark.long)])    # (2 and 16 in make sim)
def test_edge_lanes_reduce_rows_like_the_golden_min(rng, lanes):
    """Two passes through the edge lanes over a 40-row graph whose sources all sit in a
    64-vertex window (rows of 0 to 40 edges, so rows start and end anywhere in a lane
    group and a bus word), with random gaps on the row pointers, own values, column and
    weight words and random stalls on the results: every row's result is
    ``min(own, min value[u] + w)`` (saturating, INF values included), in order, and
    ``changed`` is set exactly when some row changed; the second pass (constant weight)
    starts clean."""
    dut = _EdgeLanes(lanes)
    r = dut.lanes
    passes = 0

    async def bench(ctx):
        nonlocal passes
        for uses_val, weight in ((1, 0), (0, 1)):
            n = 40
            degrees = [rng.choice([0, 0, 1, 2, 3, 7, 17, 40]) for _ in range(n)]
            rowptr = np.concatenate([[0], np.cumsum(degrees)]).astype(int).tolist()
            edges = rowptr[-1]
            col = [rng.randrange(64) for _ in range(edges)]
            val = [rng.choice([0, 1, 5, 0xFFFF_FFF0, 0xFFFF_FFFF]) if rng.random() < 0.3 else rng.randrange(1 << 32)
                   for _ in range(edges)]
            values = [0xFFFF_FFFF if rng.random() < 0.2 else rng.randrange(1 << 31) for _ in range(64)]
            own = [0xFFFF_FFFF if rng.random() < 0.3 else rng.randrange(1 << 32) for _ in range(n)]
            expected = []
            for v in range(n):
                best = own[v]
                for e in range(rowptr[v], rowptr[v + 1]):
                    total = values[col[e]] + (val[e] if uses_val else weight)
                    best = min(best, 0xFFFF_FFFF if values[col[e]] == 0xFFFF_FFFF or total >> 32 else total)
                expected.append(best)
            await dut.load(ctx, values, sums=0, uses_val=uses_val, weight=weight, edges=edges)
            streams = {"rowptr": rowptr, "own": own, "col": _word_stream(col),
                       "val": _word_stream(val) if uses_val else []}
            got = await dut.run(ctx, rng, streams, r.results, n)
            assert got == expected, (lanes, uses_val)
            for _ in range(12):
                await ctx.tick()
            assert ctx.get(r.changed) == (expected != own)
            assert ctx.get(dut.bundler.idle)
            ctx.set(r.run, 0)
            await ctx.tick()
            assert not ctx.get(r.busy)
            passes += 1
    run_to_end(dut, bench)
    assert passes == 2


@pytest.mark.parametrize("lanes", [pytest.param(2, marks=pytest.mark.long), 8,
                                   pytest.param(16, marks=pytest.mark.long)])    # (2 and 16 in make sim)
def test_sum_lanes_give_the_golden_row_sums(rng, lanes):
    """SpMV's pass (a matrix entry a column) and PageRank's (the constant 1.0) through the
    bundler, the sum lanes and two-FMA row sums over a 40-row graph in a 64-vertex
    window (rows of 0 to 70 edges, starting anywhere in a lane group), with random gaps
    on the row pointers, column and value words and random stalls on the sums: every
    row's sum equals ``golden.row_sums`` bit for bit, in order; no own value is taken."""
    from ndpkit.engines.graph import golden
    dut = _EdgeLanes(lanes)
    b, sums = dut.lanes, dut.sums
    one = 0x3F80_0000
    passes = 0

    def floats(count):
        return [rng.choice([0, 0x8000_0000, 1, 0x7F00_0000]) if rng.random() < 0.1 else
                int(np.float32(rng.gauss(0, 1)).view(np.uint32)) for _ in range(count)]

    async def bench(ctx):
        nonlocal passes
        for uses_val in (1, 0):
            n = 40
            degrees = [rng.choice([0, 0, 1, 2, 3, 7, 17, 33, 70]) for _ in range(n)]
            rowptr = np.concatenate([[0], np.cumsum(degrees)]).astype(int).tolist()
            edges = rowptr[-1]
            col = [rng.randrange(64) for _ in range(edges)]
            val, values = floats(edges), floats(64)
            weights = val if uses_val else [one] * edges
            want = [int(x) for x in golden.row_sums(np.array(rowptr), np.array(weights, np.uint32),
                                                    np.array(values, np.uint32)[col])]
            await dut.load(ctx, values, sums=1, uses_val=uses_val, weight=one, edges=edges)
            streams = {"rowptr": rowptr, "col": _word_stream(col), "val": _word_stream(val) if uses_val else []}

            def no_own():
                assert not ctx.get(b.own.ready)
            got = await dut.run(ctx, rng, streams, sums.sums, n, no_own)
            assert got == want, (lanes, uses_val)
            ctx.set(b.run, 0)
            await ctx.tick()
            assert not ctx.get(b.busy) and ctx.get(sums.idle)
            passes += 1
    run_to_end(dut, bench)
    assert passes == 2


def test_edge_lanes_take_a_lane_group_a_cycle():
    """With every stream always valid and the results always taken, 24 rows of 32 edges
    each (rows starting at every offset within a lane group, as ``rowptr`` shifts by 3
    after an empty-row gap) pass in about ``ceil((offset + 32) / 8)`` cycles a row: the
    bundler neither waits between rows nor takes a cycle per row."""
    lanes = 8
    dut = _EdgeLanes(lanes)
    b = r = dut.lanes
    degrees = [3] + [32] * 24                     # the 3-edge row shifts the rest off the lane grid
    rowptr = np.concatenate([[0], np.cumsum(degrees)]).astype(int).tolist()
    edges = rowptr[-1]
    groups = sum(-(-(rowptr[v] % lanes + degrees[v]) // lanes) for v in range(len(degrees)))
    spans = []

    async def bench(ctx):
        ctx.set(b.start, 1)
        await ctx.tick()
        ctx.set(b.start, 0)
        ctx.set(b.edges, edges)
        ctx.set(b.run, 1)
        ctx.set(r.results.ready, 1)
        words = _words([x % 64 for x in range(edges)])
        at = {"rowptr": 0, "col": 0, "own": 0}
        got, cycle, first = 0, 0, None
        while got < len(degrees):
            for name, items in (("rowptr", rowptr), ("col", [{"data": w, "last": 0} for w in words]),
                                ("own", [0xFFFF_FFFF] * len(degrees))):
                port = getattr(b, name)
                ctx.set(port.valid, at[name] < len(items))
                if at[name] < len(items):
                    ctx.set(port.payload, items[at[name]])
            if ctx.get(dut.bundler.bundle.valid) and first is None:
                first = cycle
            got += ctx.get(r.results.valid)
            for name in at:
                at[name] += _fired(ctx, getattr(b, name))
            await ctx.tick()
            cycle += 1
        spans.append(cycle - first)
    run_to_end(dut, bench)
    # bundles one a cycle from the first, then the reducer's pipeline (window read, value,
    # add, three tree levels, the row's fold, the queue)
    assert groups <= spans[0] <= groups + 10, (groups, spans)


@pytest.mark.parametrize("params,message", [
    ({"edge_lanes": 3}, r"edge_lanes must be 1 \(no lanes\) or a power of two from 2 to 16, not 3"),
    ({"edge_lanes": 0}, r"edge_lanes must be 1 \(no lanes\) or a power of two from 2 to 16, not 0"),
    ({"edge_lanes": 32}, r"not 32"),
    ({"window_vertices": 0}, r"edge_lanes=8 read the source window: with window_vertices=0 pass edge_lanes=1"),
    ({"vertex_lanes": 3}, r"vertex_lanes must be a power of two, not 3"),
    ({"vertex_lanes": 16}, r"vertex_lanes must be at most the row sums' 8 FMAs \(edge_lanes=8\), not 16"),
    ({"edge_lanes": 1, "vertex_lanes": 2}, r"at most the row sums' 1 FMA \(edge_lanes=1\), not 2")])
def test_engine_refuses_edge_lanes_it_cannot_build(params, message):
    """A lane count the bus word cannot feed, lanes without a window to read, or more
    vertex lanes than the row sums' FMAs take: refused when the engine is made, naming the
    parameter and what to pass; without lanes no window is needed, and by default the
    vertex lanes are as many as the sums take."""
    from ndpkit_hw.engines.graph.engine import GraphEngine
    with pytest.raises(ValueError, match=message):
        GraphEngine(**params)
    assert GraphEngine(window_vertices=0, edge_lanes=1).vertex_lanes == 1
    assert (GraphEngine().vertex_lanes, GraphEngine(edge_lanes=2).vertex_lanes, GraphEngine(vertex_lanes=4).vertex_lanes) \
        == (8, 2, 4)


def test_word_router_sends_each_word_to_its_phase_user(rng):
    """The validation pass's words, the edge lanes', the vertex passes' and the unpackers'
    in turn (128-bit words, random stalls on every stream): in each phase every array's
    words reach its phase's user alone, in order (unpacked into the pass's count of
    elements, one a cycle or, to the vertex passes, two, the last word's spare elements
    dropped), and no other output offers anything."""
    from ndpkit_hw.engines.graph.routes import ELEMENT_ARRAYS, WordRouter
    dut = WordRouter(128, vertex_lanes=2)
    phases = [("validate", ("rowptr", "col")), ("lanes", ("rowptr", "col", "val", "old")),
              ("vertices", ("val", "old")), ("elements", ("rowptr", "col", "val", "old"))]

    async def bench(ctx):
        for phase, arrays in phases:
            counts = {name: rng.randrange(1, 40) for name in ELEMENT_ARRAYS}
            words = {name: [{"data": rng.getrandbits(128), "last": 0} for _ in range(-(-counts[name] // 4))]
                     for name in arrays}
            ctx.set(dut.validating, phase == "validate")
            ctx.set(dut.to_lanes, phase == "lanes")
            ctx.set(dut.to_vertices, phase == "vertices")
            for name in ELEMENT_ARRAYS:
                ctx.set(getattr(dut, f"{name}_count"), counts[name])
            if phase == "vertices":         # (the passes read both arrays for the same vertices)
                counts["val"] = counts["old"]
                words["val"] = words["val"][:len(words["old"])] + \
                    [{"data": rng.getrandbits(128), "last": 0} for _ in range(len(words["old"]) - len(words["val"]))]
            ctx.set(dut.vertex_count, counts["old"])
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            # the users: the checks (words), the lanes (words), the element outputs
            users = {name: (getattr(dut, f"check_{name}") if phase == "validate" else
                            getattr(dut, f"lane_{name}") if phase == "lanes" and name in ("col", "val") else
                            getattr(dut, f"vertex_{name}") if phase == "vertices" else
                            getattr(dut, name)) for name in arrays}
            others = [p for p in (dut.check_rowptr, dut.check_col, dut.lane_col, dut.lane_val, dut.vertex_old,
                                  dut.vertex_val, *(getattr(dut, n) for n in ELEMENT_ARRAYS)) if p not in users.values()]

            def elements(name):
                return [w["data"] >> (32 * k) & 0xFFFF_FFFF for w in words[name] for k in range(4)][:counts[name]]
            want = {name: ([w["data"] for w in words[name]] if phase in ("validate", "lanes") and
                           users[name] is not getattr(dut, name) else
                           [elements(name)[i:i + 2] for i in range(0, counts[name], 2)] if phase == "vertices" else
                           elements(name)) for name in arrays}
            got = {name: [] for name in arrays}
            offers = [Offer(getattr(dut, f"{n}_words"), words[n], rng) for n in arrays]
            while any(len(got[n]) < len(want[n]) for n in arrays):
                for offer in offers:
                    offer.drive(ctx)
                for name, port in users.items():
                    ready = rng.random() < 0.6
                    ctx.set(port.ready, ready)
                    if ctx.get(port.valid) and ready:
                        payload = ctx.get(port.payload)
                        got[name].append(payload if port is getattr(dut, name) else
                                         list(payload.data)[:payload.count] if phase == "vertices" else payload.data)
                for port in others:
                    ctx.set(port.ready, 1)
                    assert not ctx.get(port.valid), f"{phase}: an output of another phase offered a word"
                for offer in offers:
                    offer.advance(ctx)
                await ctx.tick()
            for name in arrays:
                ctx.set(getattr(dut, f"{name}_words").valid, 0)
            assert got == want, phase
    run_to_end(dut, bench)


@pytest.mark.parametrize("mode", ["vertex", "lane_sums", "single_sums", "lane_minima", "single_minima"])
def test_result_router_routes_each_mode(rng, mode):
    """Every input offered at once with random stalls: only the mode's sources are taken,
    each reaching its destination unchanged and in order (a single entry widened to the
    two-FMA layout); a vertex pass's groups of two (37 vertices: the last group one) leave
    their values to the packer and their terms into the sums together, the entry marked
    last at the pass's last group only, and the pass's sum kept as ``total`` until the
    next start."""
    from ndpkit_hw.engines.graph.pagerank import vertex_layout
    from ndpkit_hw.engines.graph.rowsums import entries_layout
    from ndpkit_hw.engines.graph.routes import FP32_ONE, ResultRouter
    dut = ResultRouter(2, vertex_lanes=2)
    n = 37
    word = lambda: rng.getrandbits(32)    # noqa: E731
    groups = [min(2, n - k) for k in range(0, n, 2)]
    items = {
        "vertex": [vertex_layout(2).const({"written": [word(), word()], "summed": [word(), word()], "count": c})
                   for c in groups],
        "lane_entries": [entries_layout(2).const({"a": [word(), word()], "b": [word(), word()],
                                                  "count": rng.randrange(1, 3), "last": rng.randrange(2)})
                         for _ in range(n)],
        "single_entry": [entries_layout(1).const({"a": [word()], "b": [word()], "count": 1, "last": rng.randrange(2)})
                         for _ in range(n)],
        "lane_minima": [word() for _ in range(n)], "single_minima": [word() for _ in range(n)],
        "row_sums": [word() for _ in range(n)]}
    sources = {"vertex": ("vertex", "row_sums"), "lane_sums": ("lane_entries", "row_sums"),
               "single_sums": ("single_entry", "row_sums"), "lane_minima": ("lane_minima",),
               "single_minima": ("single_minima",)}[mode]

    def entry_of(e):
        return (list(e.a), list(e.b), e.count, e.last)
    want_entries = {"vertex": [([FP32_ONE, FP32_ONE if v.count == 2 else None],
                                [v.summed[0], v.summed[1] if v.count == 2 else None], v.count,
                                int(k == len(groups) - 1)) for k, v in enumerate(items["vertex"])],
                    "lane_sums": [entry_of(e) for e in items["lane_entries"]],
                    "single_sums": [([e.a[0], None], [e.b[0], None], 1, e.last)
                                    for e in items["single_entry"]]}.get(mode, [])
    want_elements = {"vertex": [list(v.written)[:v.count] for v in items["vertex"]],
                     "lane_sums": items["row_sums"], "single_sums": items["row_sums"],
                     "lane_minima": items["lane_minima"], "single_minima": items["single_minima"]}[mode]
    entries, elements, taken = [], [], {}       # taken: items taken of each source

    async def bench(ctx):
        ctx.set(dut.vertex_pass, mode == "vertex")
        ctx.set(dut.use_lanes, mode.startswith("lane"))
        ctx.set(dut.sum_rows, mode.endswith("sums") or mode == "vertex")
        ctx.set(dut.iterating, mode != "vertex")
        ctx.set(dut.pass_count, n)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert not ctx.get(dut.total_ready)
        await ctx.tick()        # the pass count is taken now: the engine's vertices come later
        # (the sums answer a vertex pass once, at its end; a min program's sources offer no entries)
        offers = {name: Offer(getattr(dut, name), [] if name == "row_sums" and mode == "vertex" or
                              name in ("lane_entries", "single_entry") and mode.endswith("minima") else values, rng)
                  for name, values in items.items()}
        while len(elements) < len(want_elements) or len(entries) < len(want_entries):
            for offer in offers.values():
                offer.drive(ctx)
            ready_entry, ready_elements = rng.random() < 0.6, rng.random() < 0.6
            ctx.set(dut.entry.ready, ready_entry)
            ctx.set(dut.elements.ready, ready_elements)
            entry_fired = ctx.get(dut.entry.valid) and ready_entry
            element_fired = ctx.get(dut.elements.valid) and ready_elements
            if entry_fired:
                e = ctx.get(dut.entry.payload)
                got = entry_of(e)
                if e.count == 1 and mode != "lane_sums":
                    got = ([got[0][0], None], [got[1][0], None], 1, got[3])
                assert mode != "vertex" or e.count == groups[len(entries)]
                entries.append(got)
            if element_fired:
                out = ctx.get(dut.elements.payload)
                elements.append(list(out.data)[:out.count] if mode == "vertex" else out.data[0])
            if mode == "vertex":
                assert entry_fired == element_fired, "a vertex's value and term left apart"
            for offer in offers.values():
                offer.advance(ctx)
            await ctx.tick()
        if mode == "vertex":
            offers["row_sums"].items = items["row_sums"][:1]
            for _ in range(40):
                if offers["row_sums"].i:
                    break
                offers["row_sums"].drive(ctx)
                offers["row_sums"].advance(ctx)
                await ctx.tick()
            ctx.set(dut.row_sums.valid, 0)
            assert ctx.get(dut.total_ready) and ctx.get(dut.total) == items["row_sums"][0]
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick()
            assert not ctx.get(dut.total_ready)
        taken.update({name: offer.i for name, offer in offers.items()})
    run_to_end(dut, bench)
    assert elements == want_elements
    assert entries == want_entries
    unused = set(items) - set(sources)
    assert all(taken[name] == 0 for name in unused), {name: taken[name] for name in unused}


@pytest.mark.parametrize("baseline", [0, 1], ids=["piccolo", "baseline"])
@pytest.mark.parametrize("sums", [False, True], ids=["min", "sums"])
def test_gather_path_gives_the_golden_rows_through_a_modelled_unit(rng, baseline, sums):
    """The single-edge path behind a window of no vertices (every source through the cache
    or the unit), a Python unit answering row gathers and line reads from a memory image
    after random delays, random stalls everywhere: rows of 0-9 edges with clustered
    (eight rows a cluster) and scattered sources give ``min(own, min(value + weight))`` (saturating) per row and
    ``changed`` (min programs), or each edge's (weight, value) entry in order (sums);
    every request is a row gather (line read) of 1-16 members, and the cache spares some
    (fewer members fetched than edges); nothing is left busy."""
    from amaranth.hdl import Module
    from ndpkit_hw.engines.graph.gather import GatherPath
    INF, BASE, N = 0xFFFF_FFFF, 0x4000, 4096
    values = [rng.choice([rng.randrange(1 << 20), rng.randrange(1 << 32), INF]) for _ in range(N)]
    rows, edges = [], []
    for r in range(80):
        own = rng.choice([INF, rng.randrange(1 << 21)])
        if r % 8 == 0:                   # (eight rows share a cluster: later rows find its lines cached)
            hot = rng.randrange(N - 64)
        us = [rng.randrange(hot, hot + 64) if rng.random() < 0.6 else rng.randrange(N)
              for _ in range(rng.choice([0, 1, 2, 5, 9]))]
        weights = [rng.choice([0, 1, rng.randrange(1 << 31), INF]) for _ in us]
        for k, (u, w) in enumerate(zip(us, weights)):
            edges.append({"u": u, "weight": w, "empty": 0, "first": int(k == 0), "last": int(k == len(us) - 1)})
        if not us:
            edges.append({"u": 0, "weight": 0, "empty": 1, "first": 1, "last": 1})
        best = own
        for u, w in zip(us, weights):
            best = min(best, INF if values[u] == INF or values[u] + w >= INF else values[u] + w)
        rows.append((own, best))
    want_entries = [(e["weight"], None if e["empty"] else values[e["u"]], e["empty"], e["last"]) for e in edges]
    window = SourceWindow(0, 512)
    path = GatherPath(addr_width=32, row_bytes=2048, mshr_slots=4, response_ids=16, group_timeout=8, tickets=32,
                      cache_lines=16)
    top = Module()
    top.submodules.window, top.submodules.path = window, path
    top.d.comb += [path.lookup_u.eq(window.edge.payload.u), window.cache_hit.eq(path.cache_hit),
                   window.cache_value.eq(path.cache_value), path.windowed.payload.eq(window.out.payload),
                   path.windowed.valid.eq(window.out.valid), window.out.ready.eq(path.windowed.ready)]

    def line_at(address):
        return sum(values[(address - BASE) // 4 + k] << (32 * k) for k in range(16))

    async def bench(ctx):
        ctx.set(window.base, BASE)
        ctx.set(path.baseline, baseline)
        ctx.set(path.sums, sums)
        ctx.set(path.start, 1)
        ctx.set(window.start, 1)
        await ctx.tick()
        ctx.set(path.start, 0)
        ctx.set(window.start, 0)
        ctx.set(path.run, 1)
        out = path.entry if sums else path.minimum
        want_count = len(want_entries) if sums else len(rows)
        edge_offer = Offer(window.edge, edges, rng)
        own_offer = Offer(path.own, [] if sums else [own for own, _ in rows], rng)
        pending, answering, got, flush, members = [], None, [], False, 0
        for _ in range(60 * len(edges)):
            edge_offer.drive(ctx)
            own_offer.drive(ctx)
            ctx.set(path.flush, flush)
            ctx.set(path.req.ready, rng.random() < 0.5)
            if answering is None and pending and rng.random() < 0.3:
                answering = pending.pop(0)
            ctx.set(path.resp.valid, answering is not None)
            ctx.set(path.resp.payload, answering or 0)
            ready = rng.random() < 0.6
            ctx.set(out.ready, ready)
            if ctx.get(path.req.valid) and ctx.get(path.req.ready):
                r = ctx.get(path.req.payload)
                assert 1 <= r.count <= 16 and r.op == (0 if baseline else 2)
                members += r.count if not baseline else 1
                if baseline:
                    pending.append(line_at(r.address))
                else:
                    pending.append(sum(values[(r.address - BASE) // 4 + r.offsets[j]] << (32 * j)
                                       for j in range(r.count)))
            if answering is not None and ctx.get(path.resp.ready):
                answering = None
            if ctx.get(out.valid) and ready:
                got.append(_single_result(ctx.get(out.payload), sums))
            edge_offer.advance(ctx)
            own_offer.advance(ctx)
            # the engine's flush: registered from "every edge is in and none waits"
            flush = edge_offer.i == len(edges) and not ctx.get(window.out.valid) and bool(ctx.get(path.drained))
            await ctx.tick()
            if len(got) == want_count and not pending and answering is None and not ctx.get(path.busy):
                break
        assert not ctx.get(path.busy)
        assert members < sum(not e["empty"] for e in edges), "no edge was served by the cache"
        if sums:
            assert got == want_entries
        else:
            assert got == [best for _, best in rows]
            assert ctx.get(path.changed) == any(own != best for own, best in rows)
    run_to_end(top, bench, deadline=400_000)


@pytest.mark.parametrize("depth", [0, 8])
def test_result_words_are_written_held_dropped_or_put_in_the_window(rng, depth):
    """Result words and the window reader's words through :class:`ResultWords`, random
    gaps and back-pressure on every stream, phase by phase as the engine's passes set its
    flags: the contributions into the window (none to the writer); a load of the reader's words into the window while results go to the writer;
    (a queue of ``depth`` > 0) a held pass: the queue fills to its depth and nothing is
    written while ``holding``, then its words leave in order; a held pass dropped on a bad
    verdict: nothing written, the queue empty, ``left`` low; then a pass written as usual.
    Every word arrives once, in order, where its phase sends it."""
    dut = ResultWords(64, depth)

    def words(count):
        return [{"data": rng.randrange(1 << 64), "strb": 0xFF} for _ in range(count)]

    async def run(ctx, results, loaded, *, into_window=0, holding=0, drop_after=None, cycles=400):
        ctx.set(dut.into_window, into_window)
        ctx.set(dut.holding, holding)
        ctx.set(dut.drop, 0)
        offers = Offer(dut.results, results, rng), Offer(dut.loaded, [{"data": w["data"], "last": 0}
                                                                        for w in loaded], rng)
        written, windowed = [], []
        for cycle in range(cycles):
            for offer in offers:
                offer.drive(ctx)
            if drop_after is not None and cycle >= drop_after:
                ctx.set(dut.drop, 1)
            out_ready, window_ready = rng.random() < 0.6, rng.random() < 0.6
            ctx.set(dut.out.ready, out_ready)
            ctx.set(dut.window.ready, window_ready)
            if ctx.get(dut.out.valid) and out_ready:
                written.append(ctx.get(dut.out.payload).data)
            if ctx.get(dut.window.valid) and window_ready:
                windowed.append(ctx.get(dut.window.payload).data)
            for offer in offers:
                offer.advance(ctx)
            await ctx.tick()
        for offer in offers:
            ctx.set(offer.port.valid, 0)
        return written, windowed, offers

    async def bench(ctx):
        # the contributions pass (no load beside it): every result into the window
        results = words(12)
        written, windowed, _ = await run(ctx, results, [], into_window=1)
        assert written == [] and windowed == [w["data"] for w in results]
        # a load beside a pass written as usual
        results, loaded = words(10), words(7)
        written, windowed, _ = await run(ctx, results, loaded)
        assert written == [w["data"] for w in results] and windowed == [w["data"] for w in loaded]
        assert not ctx.get(dut.left)
        if depth:
            # held: the queue takes `depth` words, none written, then all in order
            results = words(depth + 3)
            written, _, (r, _) = await run(ctx, results, [], holding=1, cycles=200)
            assert written == [] and r.i == depth and ctx.get(dut.left)
            rest, _, _ = await run(ctx, results[r.i:], [])
            assert rest == [w["data"] for w in results] and not ctx.get(dut.left)
            # held, then dropped: nothing written, nothing left
            written, _, (r, _) = await run(ctx, words(depth), [], holding=1, drop_after=100, cycles=200)
            assert written == [] and r.i == depth and not ctx.get(dut.left)
            # and the next pass is written whole
            results = words(9)
            written, _, _ = await run(ctx, results, [])
            assert written == [w["data"] for w in results]
    top = Module()               # (a clock domain for the queue-less one, which has no registers)
    top.submodules.dut = dut
    tick = Signal()
    top.d.sync += tick.eq(~tick)
    run_to_end(top, bench)


def test_window_exchange_takes_every_instance_word_once_in_order(rng):
    """Three instances' words offered with random gaps (each instance's stream held
    until taken): the exchange's register carries every word exactly once, at most one
    a cycle, each instance's in its order, and no instance waits while another streams
    (round robin: none goes more than two of the others' words unserved)."""
    from ndpkit_hw.engines.graph.exchange import WindowExchange
    dut = WindowExchange(3, 512)
    items = [[{"word": 100 * i + k, "round": i, "poison": 0, "data": rng.randrange(1 << 512)} for k in range(40)]
             for i in range(3)]
    got = []

    async def bench(ctx):
        offers = [Offer(dut.share[i], items[i], rng, rate=0.8) for i in range(3)]
        waited = [0, 0, 0]
        while len(got) < 120:
            for o in offers:
                o.drive(ctx)
            if ctx.get(dut.out.valid):
                out = ctx.get(dut.out.payload)
                got.append((out.round, out.word, out.data))
            for i, o in enumerate(offers):
                pending = bool(ctx.get(dut.share[i].valid))
                waited[i] = 0 if o.advance(ctx) or not pending else waited[i] + 1
                assert waited[i] <= 4, f"instance {i} waited {waited[i]} cycles"
            await ctx.tick()
        for o in offers:
            ctx.set(o.port.valid, 0)
        for _ in range(3):
            await ctx.tick()
            assert not ctx.get(dut.out.valid)
    run_to_end(dut, bench)
    for i in range(3):
        assert [(w, d) for r, w, d in got if r == i] == [(x["word"], x["data"]) for x in items[i]]


def test_source_window_sets_take_the_shared_words_of_their_round(rng):
    """A window of two sets (64 vertices, four words each, two lane ports): words shared
    with round r fill set (r + 1) mod 2 whatever the command reads, except the set a
    running command reads (dropped); ``complete`` holds for round r + 1 exactly when that
    set took every word of round r (a newer round counts again, a poison spoils the
    round, a load from memory empties it); the lanes read the set ``set`` names."""
    dut = SourceWindow(64, 512, read_lanes=2, sets=2)

    async def share(ctx, round_, words, poison=False):
        for w, data in words:
            ctx.set(dut.shared.valid, 1)
            ctx.set(dut.shared.payload, {"word": w, "round": round_, "poison": int(poison), "data": data})
            await ctx.tick()
            ctx.set(dut.shared.valid, 0)
            if rng.random() < 0.5:
                await ctx.tick()
        await ctx.tick()

    def complete(ctx, round_):
        ctx.set(dut.round, round_)
        ctx.set(dut.need, 4)
        return bool(ctx.get(dut.complete))

    async def read(ctx, us):
        got = []
        for u in us:
            ctx.set(dut.lane_u, [u, (u + 1) % 64])
            ctx.set(dut.lane_en, 1)
            await ctx.tick()
            ctx.set(dut.lane_en, 0)
            got.append(list(ctx.get(dut.lane_value)))
        return got

    def words_of(values):
        return [(w, sum(v << (32 * k) for k, v in enumerate(values[16 * w:16 * w + 16]))) for w in range(4)]

    async def bench(ctx):
        ctx.set(dut.count, 64)
        values = [rng.randrange(1 << 32) for _ in range(64)]
        ctx.set(dut.set, 0)                 # (the last command's set: no command reads it now)
        await share(ctx, 0xFFFF, words_of(values)[:3])          # round 65535 -> set 0, a word short
        assert not complete(ctx, 0)
        await share(ctx, 0xFFFF, words_of(values)[3:])
        assert complete(ctx, 0) and not complete(ctx, 1) and not complete(ctx, 2)
        ctx.set(dut.set, 0)
        ctx.set(dut.reading, 1)                                  # a command reads set 0: dropped
        await share(ctx, 1, words_of([7] * 64))
        assert complete(ctx, 0)
        us = [rng.randrange(64) for _ in range(20)]
        got = await read(ctx, us)
        assert got == [[values[u], values[(u + 1) % 64]] for u in us]
        other = [rng.randrange(1 << 32) for _ in range(64)]     # round 0 -> set 1 while set 0 is read
        await share(ctx, 0, list(reversed(words_of(other))))
        assert complete(ctx, 1)
        ctx.set(dut.set, 1)
        got = await read(ctx, us)
        assert got == [[other[u], other[(u + 1) % 64]] for u in us]
        await share(ctx, 0, [(0, 0)], poison=True)               # (into the set read: dropped)
        assert complete(ctx, 1)
        ctx.set(dut.reading, 0)
        await share(ctx, 0, [(0, 0)], poison=True)               # round 0 poisoned: set 1 spoilt
        assert not complete(ctx, 1)
        await share(ctx, 2, words_of(other))                     # a newer round counts again
        assert complete(ctx, 3)
        ctx.set(dut.invalidate, 0b10)                            # a load into set 1 empties it
        await ctx.tick()
        ctx.set(dut.invalidate, 0)
        assert not complete(ctx, 3)
    run_to_end(dut, bench)
