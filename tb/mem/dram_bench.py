"""Bench: the memory model with a DRAM timing preset (:mod:`ndpkit_hw.mem.dram`).

- ``idle_latency``: page hit, page closed and page miss reads, each latency equal to
  what the timing set gives (:meth:`DramChannel.read_latency_cycles`);
- ``microbenchmarks``: Shuhai's access patterns -- back-to-back bursts of one size at
  one stride, one AXI ID, reads only, writes only, or both at once -- each point's
  bytes per cycle written to ``NDP_PARAMS["out"]`` (JSON) for the calibration table;
  the bench checks what any DRAM must show (sequential reads within refresh's cost of
  the peak, a row-miss stride slower than sequential, mixed traffic below the two
  directions' sum);
- ``random_bursts`` / ``error_windows`` (the ideal model's bench): data, strobes and
  error responses unchanged with the timing model, under random stalls.
"""
import json
import random

import cocotb
from cocotb.triggers import RisingEdge, ReadOnly

from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset
from tb.mem.test_memory_model import first_beat_latency


def _idle(dut):
    for name in ("arvalid", "awvalid", "wvalid"):
        getattr(dut, f"bus_{name}").value = 0
    dut.bus_rready.value = 1
    dut.bus_bready.value = 1
    dut.error_base.value = 0
    dut.error_size.value = 0


async def _read_latency(dut, addr, word):
    """One single-beat read's latency, then the memory left idle again."""
    cycles = await first_beat_latency(dut, addr, 0, word)
    for _ in range(300):
        await RisingEdge(dut.clk)
    return cycles


@cocotb.test(timeout_time=10, timeout_unit="ms")
async def idle_latency(dut):
    p = bench_params()
    if not p.get("timing_checks"):
        return
    _idle(dut)
    await start_clock_and_reset(dut)
    word = p["data_width"] // 8
    same_bank_other_row = p["row_stride"]          # bytes to the same bank's next row
    closed = await _read_latency(dut, 0, word)
    hit = await _read_latency(dut, p["hit_offset"], word)
    miss = await _read_latency(dut, same_bank_other_row, word)
    got = {"hit": hit, "closed": closed, "miss": miss}
    dut._log.info("idle latency (cycles): %s, expected %s", got, p["expected_latency"])
    assert got == p["expected_latency"], f"latency {got}, expected {p['expected_latency']}"


def bank_of(p: dict):
    """A function: byte offset -> the bank it falls in, under the bench's preset and mapping."""
    from ndpkit_spec.dram import PRESETS, decode_address, parse_mapping
    t = PRESETS[p["preset"]]
    runs = parse_mapping(t.mapping_spec(p.get("mapping")), t, p["size"])

    def bank(offset):
        f = decode_address(runs, t.column_bytes, offset)
        return f["bg"] * t.banks_per_group + f["ba"]
    return bank


def _random_offset(rng, span, burst, window, recent, bank, column):
    """A random burst-aligned offset; with ``window`` > 0, none touching a bank that one of
    the last ``window`` requests touched (what a controller reordering over that many
    requests achieves: no two close requests wait on one bank)."""
    while True:
        offset = rng.randrange(span // burst) * burst
        if not window:
            return offset
        banks = {bank(offset + c) for c in range(0, burst, column)}
        if not any(banks & r for r in recent):
            recent.append(banks)
            del recent[:-window]
            return offset


async def _stream(dut, direction, base, burst, stride, count, word, span, done, bank=None):
    """``count`` bursts of ``burst`` bytes at ``base + i*stride`` (mod ``span``), back to back;
    stride 0: random addresses; stride -W: random, no bank used by the last W requests."""
    beats = burst // word
    bus = dut
    if direction == "r":
        issued = 0
        bus.bus_arid.value = 0
        bus.bus_arlen.value = beats - 1
        bus.bus_arsize.value = word.bit_length() - 1
        bus.bus_arburst.value = 1
        rng = random.Random(1)
        recent = []
        offset = None          # the request on the bus: drawn once, held until accepted
        while issued < count:
            if offset is None:
                offset = (_random_offset(rng, span, burst, -stride, recent, bank, word) if stride <= 0
                          else (issued * stride) % span)
            bus.bus_araddr.value = base + offset
            bus.bus_arvalid.value = 1
            await RisingEdge(dut.clk)
            if int(bus.bus_arready.value):
                issued += 1
                offset = None
        bus.bus_arvalid.value = 0
    else:
        bus.bus_awid.value = 0
        bus.bus_awlen.value = beats - 1
        bus.bus_awsize.value = word.bit_length() - 1
        bus.bus_awburst.value = 1
        bus.bus_wdata.value = 0
        bus.bus_wstrb.value = (1 << word) - 1
        aw_sent, w_sent = 0, 0
        total_w = count * beats
        while aw_sent < count or w_sent < total_w:
            bus.bus_awvalid.value = int(aw_sent < count)
            bus.bus_awaddr.value = base + (aw_sent * stride) % span
            bus.bus_wvalid.value = int(w_sent < total_w)
            bus.bus_wlast.value = int(w_sent % beats == beats - 1)
            await RisingEdge(dut.clk)
            if aw_sent < count and int(bus.bus_awready.value):
                aw_sent += 1
            if w_sent < total_w and int(bus.bus_wready.value):
                w_sent += 1
        bus.bus_awvalid.value = 0
        bus.bus_wvalid.value = 0
    done.append(direction)


async def _measure(dut, pattern, burst, stride, total, word, span, bank=None):
    """Cycles from the first request to the last data beat of ``total`` bytes a direction."""
    count = max(1, total // burst)
    directions = {"read": "r", "write": "w", "mixed": "rw"}[pattern]
    done = []
    r_beats_expected = count * burst // word if "r" in directions else 0
    start = 0
    for d in directions:
        # the write stream works in the upper half of the span, apart from the reads
        base = span // 2 if (d == "w" and pattern == "mixed") else 0
        cocotb.start_soon(_stream(dut, d, base, burst, stride, count, word,
                                  span // 2 if pattern == "mixed" else span, done, bank))
    cycles, r_beats = 0, 0
    last_data = 0
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        cycles += 1
        if int(dut.bus_rvalid.value) and int(dut.bus_rready.value):
            r_beats += 1
            last_data = cycles
        if "w" in directions and int(dut.bus_wvalid.value) and int(dut.bus_wready.value):
            last_data = cycles
        if len(done) == len(directions) and r_beats >= r_beats_expected:
            break
    await RisingEdge(dut.clk)
    for _ in range(400):
        await RisingEdge(dut.clk)
    moved = count * burst * len(directions)
    return {"pattern": pattern, "burst": burst, "stride": stride, "bytes": moved, "cycles": last_data - start,
            "bytes_per_cycle": moved / max(1, last_data - start)}


@cocotb.test(timeout_time=2000, timeout_unit="ms")
async def microbenchmarks(dut):
    p = bench_params()
    if not p.get("points"):
        return
    _idle(dut)
    await start_clock_and_reset(dut)
    word = p["data_width"] // 8
    results = []
    for point in p["points"]:
        r = await _measure(dut, point["pattern"], point["burst"], point["stride"], point["total"], word, p["span"],
                           bank_of(p) if point["stride"] < 0 else None)
        dut._log.info("%s", r)
        results.append(r)
    if p.get("out"):
        with open(p["out"], "w") as f:
            json.dump(results, f, indent=1)
    by = {(r["pattern"], r["burst"], r["stride"]): r["bytes_per_cycle"] for r in results}
    peak = p["peak_bytes_per_cycle"]
    for (pattern, burst, stride), rate in by.items():
        assert rate <= peak * (2 if pattern == "mixed" else 1) * 1.001, f"{pattern} {burst}/{stride}: above the peak"
        if pattern == "read" and stride == burst and burst >= 256:
            # sequential: only refresh (tRFC + tRP every tREFI) and the row changes cost
            assert rate >= 0.85 * peak, f"sequential reads of {burst} B at {rate:.2f} B/cycle, peak {peak:.2f}"
        if pattern == "mixed":
            assert rate <= peak * 1.001, f"mixed {burst}/{stride}: {rate:.2f} B/cycle over one shared bus"
    miss = [r for (pat, b, s), r in by.items() if pat == "read" and s == p["row_stride"]]
    # (stride 0: random addresses)
    seq = [r for (pat, b, s), r in by.items() if pat == "read" and s == b]
    if miss and seq:
        assert max(miss) < min(seq), "a stride that misses the row every burst should be slower than sequential"


# the ideal model's data and error tests, after the timing ones (which need a fresh memory)
from tb.mem.test_memory_model import random_bursts, error_windows   # noqa: E402,F401
