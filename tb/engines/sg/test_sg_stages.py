# amaranth: UnusedElaboratable=no
"""The scatter-gather unit's stages alone, in Amaranth's simulator against the golden model
(:class:`ndpkit.engines.sg.golden.RowMemory`) and a Python decode model, with random
stalls on every valid/ready pair (the ``rng`` fixture prints its seed; ``SEED=``
reproduces): the link gate, the request decoder, the run issuer and the response
assembler.  The whole unit's bench is ``test_sg_unit.py``."""
import numpy as np
import pytest

from ndpkit.engines.sg import golden
from ndpkit_spec.codes import AxiResp, ErrorCode
from ndpkit_hw.engines.sg.assemble import ResponseAssembler, read_beat_layout
from ndpkit_hw.engines.sg.decode import RequestDecoder, decoded_layout
from ndpkit_hw.engines.sg.issue import RunIssuer, completion_layout
from ndpkit_hw.engines.sg.link import LinkGate
from ndpkit_hw.engines.sg.requests import MAX_OFFSETS, request_layout
from tb.amaranth_sim import Offer, run_to_end

ADDR = 24
ROW = 2048
BANKS = 4
MEM = 1 << 15          # the window: the whole memory
OP_LINE_READ, OP_LINE_WRITE, OP_GATHER, OP_SCATTER = (int(golden.Op.LINE_READ), int(golden.Op.LINE_WRITE),
                                                      int(golden.Op.ROW_GATHER), int(golden.Op.ROW_SCATTER))


def _random_request(rng, *, bad=0.0):
    """A request's fields: ops of every kind, clustered or scattered offsets, repeats,
    and with probability ``bad`` a flaw of each kind the unit checks."""
    op = rng.randrange(4)
    size = rng.choice([4, 8])
    count = rng.randrange(1, 64 // size + 1)
    start = rng.randrange(ROW // size - 24)
    offsets = sorted(rng.randrange(start, start + 24) for _ in range(count)) if rng.random() < 0.5 else \
        [rng.randrange(ROW // size) for _ in range(count)]
    address = rng.randrange(MEM // ROW) * ROW if op & 2 else rng.randrange(MEM // 64) * 64
    if rng.random() < bad:
        flaw = rng.choice(["size", "count", "align", "window", "offset"])
        if flaw == "size" and op & 2:
            size = rng.choice([0, 2, 5])
        elif flaw == "count" and op & 2:
            count = rng.choice([0, 64 // size + 1, 31])
        elif flaw == "align":
            address += rng.choice([4, 32]) if not op & 2 else rng.choice([64, ROW // 2])
        elif flaw == "window":
            address = MEM + rng.randrange(4) * ROW
        elif flaw == "offset" and op & 2:
            offsets[rng.randrange(len(offsets))] = ROW // size + rng.randrange(8)
    offsets = (offsets + [rng.randrange(1 << 16) for _ in range(MAX_OFFSETS)])[:MAX_OFFSETS]
    return {"op": op, "size": size & 15, "count": count, "address": address, "offsets": offsets,
            "data": rng.getrandbits(512)}


def _error(req):
    """The golden model's verdict on a request (0: good)."""
    memory = golden.RowMemory(MEM, row_bytes=ROW, banks=BANKS)
    count = req["count"]
    try:
        if req["op"] & 2:
            memory._check_row(req["address"], req["size"], (req["offsets"] + [0] * 16)[:count])
        else:
            memory._check_line(req["address"])
    except golden.SgError as e:
        return int(e.code)
    return 0


def _decode(req):
    """The decoded request (:func:`~ndpkit_hw.engines.sg.decode.decoded_layout`) of a good
    request: per element its column, byte lane and run (consecutive elements in one 64 B
    column share a run), the run count, the live elements (not overwritten by a later
    element of their run with their offset) and the 32-bit slots each writes."""
    n = MAX_OFFSETS
    d = {"head": req, "error": _error(req), "column": [0] * n, "lane": [0] * n, "run": [0] * n,
         "starts": 1, "runs": 1, "live": (1 << n) - 1, "slots": [1 << j for j in range(n)]}
    if not req["op"] & 2 or d["error"]:
        return d
    size, count = req["size"], req["count"]
    at = [o * size for o in req["offsets"][:count]]
    starts = [j == 0 or at[j] // 64 != at[j - 1] // 64 for j in range(count)]
    run = np.cumsum(starts) - 1
    d.update(column=[a // 64 for a in at] + [0] * (n - count), lane=[a % 64 for a in at] + [0] * (n - count),
             run=[int(r) for r in run] + [0] * (n - count), starts=sum(1 << j for j in range(count) if starts[j]),
             runs=int(run[-1]) + 1,
             live=sum(1 << j for j in range(count)
                      if not any(run[k] == run[j] and at[k] == at[j] for k in range(j + 1, count))),
             slots=[(3 << (a % 64 // 8 * 2)) if size == 8 else 1 << (a % 64 // 4) for a in at] + [0] * (n - count))
    return d


def test_link_gate_holds_the_link_for_each_transfer(rng):
    """Items of 1..6 flits: each passes in order no earlier than its predecessor's flits
    after it, and with both sides always willing exactly then (the link's rate)."""
    dut = LinkGate(8, 6)
    items = [(rng.randrange(256), rng.randrange(1, 7)) for _ in range(120)]

    async def bench(ctx):
        for stalls in (True, False):
            passed, cycle = [], 0
            offer = Offer(dut.i, [v for v, _ in items], rng, 0.7 if stalls else 1.0)
            while len(passed) < len(items):
                offer.drive(ctx)
                ctx.set(dut.flits, items[min(offer.i, len(items) - 1)][1])
                ready = not stalls or rng.random() < 0.6
                ctx.set(dut.o.ready, ready)
                if ctx.get(dut.o.valid) and ready:
                    passed.append((ctx.get(dut.o.payload), cycle))
                offer.advance(ctx)
                await ctx.tick()
                cycle += 1
            ctx.set(dut.i.valid, 0)
            for _ in range(8):
                await ctx.tick()
            assert [p for p, _ in passed] == [v for v, _ in items]
            gaps = [b - a for (_, a), (_, b) in zip(passed, passed[1:])]
            flits = [f for _, f in items[:-1]]
            assert all(g >= f for g, f in zip(gaps, flits)), "an item passed while the link was held"
            if not stalls:
                assert gaps == flits
    run_to_end(dut, bench)


def test_request_decoder_finds_the_golden_runs_and_verdicts(rng):
    """Good and bad requests of every kind through the two stages: every verdict equals
    the golden model's; a good row request's runs, per element column, lane, run, the
    live elements and their slots equal the model's, and a line request is one run."""
    dut = RequestDecoder(addr_width=ADDR, row_bytes=ROW)
    layout = request_layout(ADDR)
    reqs = [_random_request(rng, bad=0.3) for _ in range(300)]
    got = []

    async def bench(ctx):
        ctx.set(dut.window_base, 0)
        ctx.set(dut.window_size, MEM)
        await ctx.tick()               # (the window's last starts are registered)
        offer = Offer(dut.requests, [layout.const(r) for r in reqs], rng)
        while len(got) < len(reqs):
            offer.drive(ctx)
            ready = rng.random() < 0.6
            ctx.set(dut.decoded.ready, ready)
            if ctx.get(dut.decoded.valid) and ready:
                got.append(ctx.get(dut.decoded.payload))
            offer.advance(ctx)
            await ctx.tick()
    run_to_end(dut, bench)
    kinds = set()
    for req, d in zip(reqs, got):
        want = _decode(req)
        assert (d.head.op, d.head.address, d.head.count) == (req["op"], req["address"], req["count"])
        assert d.error == want["error"], req
        kinds.add((req["op"] >> 1, want["error"]))
        if want["error"]:
            continue
        assert d.runs == want["runs"]
        if req["op"] & 2:
            n = req["count"]
            assert [d.column[j] for j in range(n)] == want["column"][:n]
            assert [d.lane[j] for j in range(n)] == want["lane"][:n]
            assert [d.run[j] for j in range(n)] == want["run"][:n]
            live = int(d.live) & ((1 << n) - 1)
            assert live == want["live"]
            assert [d.slots[j] for j in range(n) if live >> j & 1] == [s for j, s in enumerate(want["slots"])
                                                                        if want["live"] >> j & 1]
        else:
            assert int(d.live) == (1 << MAX_OFFSETS) - 1 and [d.slots[j] for j in range(MAX_OFFSETS)] == want["slots"]
    assert {(0, 0), (1, 0), (1, int(ErrorCode.BAD_INDEX)), (1, int(ErrorCode.OUT_OF_WINDOW))} <= kinds


def test_run_issuer_issues_each_run_once_in_order(rng):
    """Decoded requests (the model's) into the issuer, the memory taking addresses and
    beats with random stalls and answering after random delays: every request leaves
    its entry in order; reads ask for each run's column once, in run order; the writes'
    beats leave the memory as the golden model's line writes and scatters do; no read
    is issued while a write is outstanding, nor a write while a read is; the counters
    equal the golden model's."""
    dut = RunIssuer(addr_width=ADDR, row_bytes=ROW, banks=BANKS, max_inflight=8)
    layout = decoded_layout(ADDR, ROW)
    reqs = [_random_request(rng, bad=0.1) for _ in range(200)]
    decoded = [_decode(r) for r in reqs]
    memory = golden.RowMemory(MEM, row_bytes=ROW, banks=BANKS)
    memory.data[:] = np.frombuffer(bytes(rng.getrandbits(8) for _ in range(MEM)), dtype=np.uint8)
    image = memory.data.copy()
    reads_wanted = []
    for r, d in zip(reqs, decoded):
        if d["error"]:
            continue
        offs, data = r["offsets"][:r["count"]], r["data"].to_bytes(64, "little")
        if r["op"] == OP_LINE_READ:
            memory.line_read(r["address"])
        elif r["op"] == OP_LINE_WRITE:
            memory.line_write(r["address"], data)
        elif r["op"] == OP_GATHER:
            memory.row_gather(r["address"], r["size"], offs)
        else:
            memory.row_scatter(r["address"], r["size"], offs, data)
        if r["op"] == OP_LINE_READ:
            reads_wanted.append(r["address"])
        elif r["op"] == OP_GATHER:           # each run's column, once
            reads_wanted += [r["address"] + d["column"][j] * 64 for j in range(r["count"]) if d["starts"] >> j & 1]
    entries, reads = [], []

    async def bench(ctx):
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        reads_out, writes_out, aw_pending, w_pending = 0, 0, [], []
        offer = Offer(dut.decoded, [layout.const(d) for d in decoded], rng, 0.8)
        while offer.i < len(reqs) or reads_out or writes_out:
            offer.drive(ctx)
            for port in (dut.entries, dut.ar, dut.aw, dut.w):
                ctx.set(port.ready, rng.random() < 0.6)
            r_done = reads_out > 0 and rng.random() < 0.3
            b_done = writes_out > 0 and rng.random() < 0.3
            ctx.set(dut.r_done, r_done)
            ctx.set(dut.b_done, b_done)
            fire = {p: ctx.get(getattr(dut, p).valid) and ctx.get(getattr(dut, p).ready)
                    for p in ("entries", "ar", "aw", "w")}
            if fire["entries"]:
                entries.append(ctx.get(dut.entries.payload))
            if fire["ar"]:
                assert writes_out == 0, "a read issued while a write is outstanding"
                reads.append(ctx.get(dut.ar.payload))
            if fire["aw"]:
                assert reads_out == 0, "a write issued while a read is outstanding"
                aw_pending.append(ctx.get(dut.aw.payload))
            if fire["w"]:
                w_pending.append(ctx.get(dut.w.payload))
            while aw_pending and w_pending:      # a write beat lands at its address, by its strobes
                address, beat = aw_pending.pop(0), w_pending.pop(0)
                data = int(beat.data).to_bytes(64, "little")
                for k in range(64):
                    if int(beat.strobe) >> k & 1:
                        image[address + k] = data[k]
            reads_out += fire["ar"] - r_done
            writes_out += fire["aw"] - b_done
            offer.advance(ctx)
            await ctx.tick()
        counters = ctx.get(dut.counters)
        assert {k: int(getattr(counters, k)) for k in memory.counters.as_dict()} == memory.counters.as_dict()
    run_to_end(dut, bench)
    assert [(e.op, e.error, e.runs, e.count) for e in entries] == \
        [(r["op"], d["error"], d["runs"], r["count"]) for r, d in zip(reqs, decoded)]
    assert reads == reads_wanted
    assert np.array_equal(image, memory.data)


def test_response_assembler_packs_beats_into_the_golden_responses(rng):
    """Entries (the model's decode of good requests, and bad ones) with the memory's beats
    (each run's column; an AXI error on some) and write responses, all with random
    stalls: each response in order carries the golden gather's packed line or the read
    line, and the worst error of its beats or the entry's own code."""
    dut = ResponseAssembler()
    memory = golden.RowMemory(MEM, row_bytes=ROW, banks=BANKS)
    memory.data[:] = np.frombuffer(bytes(rng.getrandbits(8) for _ in range(MEM)), dtype=np.uint8)
    reqs = [_random_request(rng, bad=0.1) for _ in range(200)]
    entries, r_beats, b_beats, wanted = [], [], [], []
    for r in reqs:
        d = _decode(r)
        entries.append(completion_layout.const({"op": r["op"], "error": d["error"], "size8": r["size"] == 8,
                                                "count": r["count"], "runs": d["runs"], "run": d["run"],
                                                "lane": d["lane"]}))
        if d["error"]:
            wanted.append((r["op"], d["error"], None))
            continue
        codes = [int(rng.choice([AxiResp.OKAY] * 8 + [AxiResp.SLVERR, AxiResp.DECERR])) for _ in range(d["runs"])]
        worst = max(codes)
        error = {AxiResp.OKAY: 0, AxiResp.SLVERR: int(ErrorCode.SLVERR), AxiResp.DECERR: int(ErrorCode.DECERR)}[worst]
        if r["op"] & 1:
            b_beats += codes
            wanted.append((r["op"], error, None))
            continue
        columns = [d["column"][j] for j in range(r["count"]) if d["starts"] >> j & 1] if r["op"] & 2 else [0]
        base = r["address"]
        for column, code in zip(columns, codes):
            a = base + column * 64
            r_beats.append(read_beat_layout.const({"data": int.from_bytes(memory.data[a:a + 64].tobytes(), "little"),
                                                   "resp": code}))
        line = memory.row_gather(base, r["size"], r["offsets"][:r["count"]]) if r["op"] & 2 else \
            memory.line_read(base)
        wanted.append((r["op"], error, None if error else int.from_bytes(line, "little")))
    got = []

    async def bench(ctx):
        offers = [Offer(dut.entries, entries, rng), Offer(dut.r, r_beats, rng), Offer(dut.b, b_beats, rng)]
        while len(got) < len(wanted):
            for offer in offers:
                offer.drive(ctx)
            ready = rng.random() < 0.6
            ctx.set(dut.responses.ready, ready)
            if ctx.get(dut.responses.valid) and ready:
                got.append(ctx.get(dut.responses.payload))
            for offer in offers:
                offer.advance(ctx)
            await ctx.tick()
        assert [o.i for o in offers] == [len(entries), len(r_beats), len(b_beats)]
    run_to_end(dut, bench)
    for g, (op, error, line) in zip(got, wanted):
        assert (g.op, g.error) == (op, error)
        if line is not None:
            assert int(g.data) == line
    assert any(e for _, e, _ in wanted) and any(line is not None for *_, line in wanted)
