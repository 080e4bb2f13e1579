"""DRAM timing for the simulated memory: when each beat's data can move, as a real
channel (an HBM2 pseudo-channel, DDR4) would move it.  Simulation only.

:class:`DramChannel` sits beside :class:`~ndpkit_hw.mem.memory_model.AxiMemoryModel`'s
storage and decides time only; the storage still holds the data.  It keeps a calendar
in DRAM time (an exact rational multiple of both clocks: ``u_per_tck`` units a tCK,
``u_per_cycle`` units an engine cycle) and schedules column commands on it:

- **banks and rows**: each bank has an open row (open-page policy); a column to another
  row precharges (after tRAS, tRTP or tWR) and activates (after tRP), a closed bank
  activates; activates obey tRRD_S/L and tFAW, columns tRCD_RD/WR and tCCD_S/L;
- **one data bus**: reads and writes share it; a read after a write waits tWTR_S/L after
  the write's data, a write after a read tCL + BL/2 + 2 - tCWL;
- **refresh**: every tREFI all banks are precharged and refreshed for tRFC;
- **controller policy**: requests in order within each direction, activates and
  precharges looked ahead (a bank's next row opens while other banks transfer), writes
  posted into a buffer and drained in groups (reads first; writes when the buffer is
  past three quarters, or nothing else waits; back to reads below a quarter or after half
  a buffer's worth of writes while reads wait), as the
  AMD HBM and MIG controllers group reads and writes to save turnarounds;
- **address mapping**: which address bits pick bank group, bank, column and row
  (:func:`ndpkit_spec.dram.parse_mapping`).

Requests are cut into *units* of ``max(beat, column)`` bytes: a unit is one or more
column commands (a 64-byte beat on a 32-byte HBM column: two) or one column shared by
several beats (16-byte beats on a 64-byte DDR4 column).  Up to ``units_per_cycle`` units
of one direction are scheduled a cycle (enough to run ahead of the memory's peak), a
read unit's data time goes into a record buffer (the controller's read queue) and the
read path releases a beat once its record's time has come.  The calendar runs at most
``LOOKAHEAD_COLUMNS`` column slots ahead of now (the controller's command queue; posted
writes leave the write buffer only that early).  A read's latency is its data's end plus the fixed
controller/PHY pipeline (fitted to Shuhai's page-hit latency) plus ``crossing`` engine
cycles (the clock crossing between the engines and the memory's port).

What it leaves out, stated: request reordering (each direction is scheduled in order;
the AMD HBM controller reorders within its queue, which is where the model's random
128-byte reads fall short of AMD's figure: docs/architecture.md), the command bus (one command a
tCK is never the bound at these burst lengths), per-bank refresh, and the AXI port's
own rate (the HBM port's 256 bits at 450 MHz and the MIG's 512 bits at 300 MHz equal
the DRAM's peak).
"""
from __future__ import annotations

import math
from functools import reduce

from amaranth.hdl import Array, Const, Module, Mux, ResetSignal, Signal, Cat
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.dram import DramTiming, parse_mapping

__all__ = ["DramChannel", "calendar_units", "TIME_BITS", "CROSSING_CYCLES", "DRAM_PORT_QUEUE"]

#: requests a DRAM port queues by default: enough for single-beat reads at its latency
#: (the depth AMD's HBM random-access figures use)
DRAM_PORT_QUEUE = 64

#: engine-clock cycles a read spends in the clock crossing between the engines and the
#: memory's port on a card, there and back (the board designs' SmartConnect/XPM
#: crossings, a few cycles each way: an estimate, not a measurement)
CROSSING_CYCLES = 8

TIME_BITS = 48     # DRAM time in units; no wrap in any simulation (2^48 units)
#: how far (column slots) the calendar may run ahead of now: the controller's command queue
LOOKAHEAD_COLUMNS = 32


def calendar_units(dram_mhz: float, engine_mhz: float) -> tuple[int, int]:
    """The exact calendar's units: (units a DRAM clock, units an engine cycle).

    >>> calendar_units(900, 200)
    (2, 9)
    """
    dram_khz, eng_khz = round(dram_mhz * 1000), round(engine_mhz * 1000)
    g = math.gcd(dram_khz, eng_khz)
    return eng_khz // g, dram_khz // g


def _vmax(m, *values):
    """The largest of ``values``, each step a wire (a nested Mux that names its operands
    twice would double the expression at every step)."""
    def step(a, b):
        wire = Signal(TIME_BITS + 4, name="max")
        m.d.comb += wire.eq(Mux(a > b, a, b))
        return wire
    return reduce(step, values)


class DramChannel(wiring.Component):
    """The timing of one DRAM channel behind an AXI port of ``beat_bytes`` a beat.

    Ports (one cycle of the engine clock each):

    - ``rd_valid``/``rd_addr``/``rd_beats`` -- the oldest read request not yet
      scheduled (``rd_pop`` takes it);
    - ``wr_valid``/``wr_addr``/``wr_beats`` -- likewise for writes (``wr_pop``);
      ``wr_beat_in`` -- a W beat entered the write buffer this cycle; ``wr_space`` --
      the buffer can take another beat;
    - ``rd_beat_ready`` -- the next read beat's data is there; ``rd_beat_take`` -- the
      read path sends it (one a cycle).
    """

    def __init__(self, timing: DramTiming, *, engine_mhz: float, beat_bytes: int, base: int, size: int,
                 addr_width: int = 32, mapping: str | None = None, crossing: int = 0, read_queue: int = 32):
        timing.validate()
        self.timing = timing
        self.runs = parse_mapping(timing.mapping_spec(mapping), timing, size)
        self.mapping = timing.mapping_spec(mapping)
        if engine_mhz <= 0:
            raise ValueError(f"engine_mhz must be positive, not {engine_mhz}")
        self.u_per_tck, self.u_per_cycle = calendar_units(timing.clock_mhz, engine_mhz)
        self.engine_mhz, self.beat_bytes, self.base, self.size = engine_mhz, beat_bytes, base, size
        self.addr_width, self.crossing = addr_width, crossing
        col = timing.column_bytes
        self.unit_bytes = max(beat_bytes, col)
        self.cols_per_unit = self.unit_bytes // col
        self.beats_per_unit = self.unit_bytes // beat_bytes
        # units a cycle: enough to outpace the memory's peak (bytes an engine cycle)
        peak = timing.peak_bytes_per_cycle(engine_mhz)
        self.units_per_cycle = max(1, math.ceil(peak / self.unit_bytes))
        self.read_queue = max(read_queue, 2 * self.units_per_cycle)
        self.write_buffer_beats = max(timing.write_buffer // beat_bytes, self.beats_per_unit)
        #: bench statistics: activates issued, and data-bus time used (calendar units;
        #: ``u_per_cycle`` to an engine cycle)
        self.stat_activations = Signal(40, name="stat_activations")
        self.stat_bus_units = Signal(TIME_BITS, name="stat_bus_units")
        super().__init__({
            "rd_valid": In(1), "rd_addr": In(addr_width), "rd_beats": In(9), "rd_pop": Out(1),
            "wr_valid": In(1), "wr_addr": In(addr_width), "wr_beats": In(9), "wr_pop": Out(1),
            "wr_beat_in": In(1), "wr_space": Out(1),
            "rd_beat_ready": Out(1), "rd_beat_take": In(1),
        })

    # -- helpers ------------------------------------------------------------------
    def u(self, tck: int) -> int:
        """``tck`` DRAM clocks in calendar units."""
        return tck * self.u_per_tck

    def read_latency_cycles(self, extra_tck: int) -> int:
        """Engine cycles from the request to its first beat for a column that needs
        ``extra_tck`` beyond a page hit (0, tRCD, tRP + tRCD), idle memory -- what the
        bench checks the model against."""
        t = self.timing
        units = self.u(t.read_pipeline + t.tCL + t.tBURST + extra_tck) + self.crossing * self.u_per_cycle
        # + the request queue's cycle and the read path's register
        return math.ceil(units / self.u_per_cycle) + 2

    def _decode(self, rel):
        """(bank group, bank, row) of a byte offset in the memory."""
        fields = {"bg": [], "ba": [], "co": [], "row": []}
        bit = int(math.log2(self.timing.column_bytes))
        for name, lo, width in self.runs:
            fields[name].append((lo, rel[bit:bit + width]))
            bit += width
        def join(name):
            parts = sorted(fields[name], key=lambda p: p[0])
            return Cat(*(v for _, v in parts)) if parts else Const(0, 1)
        return join("bg"), join("ba"), join("row")

    # -- one column command on the calendar ----------------------------------------
    def _column(self, st, valid, is_wr, rel, now):
        """Schedule one column command at byte offset ``rel``; returns (new state, data end)."""
        t, u = self.timing, self.u
        bg, ba, row = self._decode(rel)
        bank = Signal(range(max(2, t.banks)), name="bank")
        self._m.d.comb += bank.eq(bg * t.banks_per_group + ba)
        opened = Array(st["open"])[bank]
        hit = opened & (Array(st["row"])[bank] == row)
        pre = _vmax(self._m, Array(st["pre_ok"])[bank], now)
        act = _vmax(self._m, Mux(opened, pre + u(t.tRP), _vmax(self._m, Array(st["act_ok"])[bank], now)),
                    st["last_act"] + u(t.tRRD_S), Array(st["last_act_bg"])[bg] + u(t.tRRD_L),
                    st["faw"][3] + u(t.tFAW))
        act_at = Mux(hit, Array(st["act_t"])[bank], act)
        rcd = Mux(is_wr, u(t.tRCD_WR), u(t.tRCD_RD))
        turnaround = Mux(is_wr, st["last_rd"] + u(t.tRTW),
                         st["last_wr_end"] + Mux(st["last_wr_bg"] == bg, u(t.tWTR_L), u(t.tWTR_S)))
        col = Signal(TIME_BITS, name="col_t")
        self._m.d.comb += col.eq(_vmax(self._m, act_at + rcd, now, st["last_col"] + u(t.tCCD_S),
                                       Array(st["last_col_bg"])[bg] + u(t.tCCD_L), turnaround))
        data_end = col + Mux(is_wr, u(t.tCWL), u(t.tCL)) + u(t.tBURST)
        pre_after = Mux(is_wr, data_end + u(t.tWR), col + u(t.tRTP))
        new_pre = _vmax(self._m, Mux(hit, Array(st["pre_ok"])[bank], act + u(t.tRAS)), pre_after)
        miss = valid & ~hit
        self._activations.append(miss)
        self._columns.append(valid)
        out = dict(st)
        sel = [valid & (bank == b) for b in range(t.banks)]
        out["open"] = [Mux(s, 1, o) for s, o in zip(sel, st["open"])]
        out["row"] = [Mux(s, row, r) for s, r in zip(sel, st["row"])]
        out["act_t"] = [Mux(s & ~hit, act, a) for s, a in zip(sel, st["act_t"])]
        out["pre_ok"] = [Mux(s, new_pre, p) for s, p in zip(sel, st["pre_ok"])]
        out["last_act"] = Mux(miss, act, st["last_act"])
        out["last_act_bg"] = [Mux(miss & (bg == g), act, a) for g, a in enumerate(st["last_act_bg"])]
        out["faw"] = [Mux(miss, act, st["faw"][0])] + [Mux(miss, st["faw"][i - 1], st["faw"][i]) for i in (1, 2, 3)]
        out["last_col"] = Mux(valid, col, st["last_col"])
        out["last_col_bg"] = [Mux(valid & (bg == g), col, c) for g, c in enumerate(st["last_col_bg"])]
        out["last_rd"] = Mux(valid & ~is_wr, col, st["last_rd"])
        out["last_wr_end"] = Mux(valid & is_wr, data_end, st["last_wr_end"])
        out["last_wr_bg"] = Mux(valid & is_wr, bg, st["last_wr_bg"])
        return self._signals(out, st), self._signal(data_end, TIME_BITS, "data_end")

    def _signal(self, value, width, name):
        """``value`` as a wire: the next command reads it through an Array, which would
        copy a whole expression into every branch."""
        sig = Signal(width, name=name)
        self._m.d.comb += sig.eq(value)
        return sig

    def _signals(self, out, old):
        wires = {}
        for name, value in out.items():
            if isinstance(value, list):
                wires[name] = [v if v is o else self._signal(v, len(o), f"{name}{i}_n")
                               for i, (v, o) in enumerate(zip(value, old[name]))]
            else:
                wires[name] = value if value is old[name] else self._signal(value, len(old[name]), f"{name}_n")
        return wires

    def elaborate(self, platform):
        m = self._m = Module()
        t = self.timing
        TW = TIME_BITS
        self._activations, self._columns = [], []     # per column command: its ACT, its issue

        # The calendar's state and the read records have no reset of their own: a register
        # with one depends on the top-level ``rst``, so Verilator evaluates its next-state
        # logic on every input change (twice a clock) rather than once a cycle -- most of
        # the model's simulation time.  The state is cleared by ``rst`` a cycle late
        # instead (the same state at the end of any reset: no request reaches the
        # calendar in the cycle after one); the records need none (their pointers reset).
        def regs(name, n=None, width=TW):
            if n is None:
                return Signal(width, name=name, reset_less=True)
            return [Signal(width, name=f"{name}{i}", reset_less=True) for i in range(n)]

        nb, ng = t.banks, t.bank_groups
        row_bits = sum(w for name, _, w in self.runs if name == "row") or 1
        bg_bits = max(1, int(math.log2(ng)))
        state = {
            "open": regs("open", nb, 1), "row": regs("row", nb, row_bits), "act_t": regs("act_t", nb),
            "pre_ok": regs("pre_ok", nb), "act_ok": regs("act_ok", nb),
            "last_act": regs("last_act"), "last_act_bg": regs("last_act_bg", ng), "faw": regs("faw", 4),
            "last_col": regs("last_col"), "last_col_bg": regs("last_col_bg", ng), "last_rd": regs("last_rd"),
            "last_wr_end": regs("last_wr_end"), "last_wr_bg": regs("last_wr_bg", None, bg_bits),
        }
        # the calendar starts long after time 0, so the zero-initialised history (the
        # last activates, columns, writes) constrains nothing
        start = self.u(1 << 16)
        now = Signal(TW, init=start)
        m.d.sync += now.eq(now + self.u_per_cycle)
        next_ref = Signal(TW, init=start + self.u(t.tREFI))

        # ---- request walkers: the head request's next beat, per direction ----------
        bb, bpu, S = self.beat_bytes, self.beats_per_unit, self.units_per_cycle
        beat_shift = int(math.log2(bb))

        def walk(valid, addr, beats, pos, avail=None):
            """Up to S units of the head request from beat ``pos``: per unit (valid,
            byte offset of its first column, beats it covers), and the new position."""
            units = []
            p = pos
            budget = avail
            for _ in range(S):
                beat_index = (addr - self.base)[beat_shift:] + p
                if bpu == 1:
                    n = Const(1, 9)
                else:
                    into = beat_index[:int(math.log2(bpu))]
                    n = Mux(beats - p < bpu - into, beats - p, bpu - into)
                ok = valid & (p < beats)
                if budget is not None:
                    ok = ok & (n <= budget)
                rel = Cat(Const(0, beat_shift), beat_index)[int(math.log2(self.unit_bytes)):]
                units.append((ok, Cat(Const(0, int(math.log2(self.unit_bytes))), rel), n))
                p = Mux(ok, p + n, p)
                if budget is not None:
                    budget = Mux(ok, budget - n, budget)
            return units, p

        rd_pos, wr_pos = Signal(9), Signal(9)
        w_unsched = Signal(range(self.write_buffer_beats + 1))   # beats in the buffer, not yet scheduled
        rd_units, rd_next = walk(self.rd_valid, self.rd_addr, self.rd_beats, rd_pos)
        wr_units, wr_next = walk(self.wr_valid, self.wr_addr, self.wr_beats, wr_pos, w_unsched)

        # ---- read records: (data time, beats) of each scheduled read unit ----------
        depth = self.read_queue
        rec_due = regs("rec_due", depth)
        rec_beats = regs("rec_beats", depth, 9)
        rec_w, rec_r = Signal(range(depth)), Signal(range(depth))
        rec_count = Signal(range(depth + 1))
        taken = Signal(9)                   # beats of the head record already sent

        # ---- mode (reads / writes) and refresh ---------------------------------------
        write_mode = Signal()
        reads_ready = self.rd_valid & (rec_count <= depth - S)
        writes_ready = wr_units[0][0]
        hi, lo = (3 * self.write_buffer_beats) // 4, self.write_buffer_beats // 4
        to_writes = writes_ready & ((w_unsched >= hi) | ~reads_ready)
        # a write group ends below the low mark, or after hi - lo beats while reads wait
        # (the controller's starvation limit: writes arriving as fast as they drain
        # would otherwise hold the reads off for good)
        group = Signal(range(self.write_buffer_beats + 1))
        to_reads = ~writes_ready | (reads_ready & ((w_unsched <= lo) | (group >= hi - lo)))
        writing = Signal()
        m.d.comb += writing.eq(Mux(write_mode, ~to_reads, to_writes))
        m.d.sync += write_mode.eq(writing)
        horizon = _vmax(m, now, state["last_col"])
        refresh = Signal()
        m.d.comb += refresh.eq(next_ref <= horizon)
        # the controller's command queue: the calendar runs at most LOOKAHEAD_COLUMNS
        # column slots ahead of now (posted writes leave the buffer only that early)
        ahead_ok = state["last_col"] <= now + self.u(LOOKAHEAD_COLUMNS * t.tCCD_S)

        # ---- the chained column commands of this cycle --------------------------------
        st = state
        dues = []
        for j in range(S):
            rv, rrel, _ = rd_units[j]
            wv, wrel, _ = wr_units[j]
            uvalid = ~refresh & ahead_ok & Mux(writing, wv, rv & reads_ready)
            urel = Mux(writing, wrel, rrel)
            end = None
            for c in range(self.cols_per_unit):
                st, end = self._column(st, uvalid, writing, urel + c * t.column_bytes, now)
            dues.append((uvalid & ~writing, end))

        # statistics for the benches (cocotb reads them by name): activates, and the data
        # bus's busy time in calendar units (a column's burst each)
        m.d.sync += [self.stat_activations.eq(self.stat_activations + sum(Mux(a, 1, 0) for a in self._activations)),
                     self.stat_bus_units.eq(self.stat_bus_units
                                            + sum(Mux(c, 1, 0) for c in self._columns) * self.u(t.tBURST))]

        # refresh: close every bank once it may be precharged, then tRFC
        ready_after = _vmax(m, next_ref, *state["pre_ok"]) + self.u(t.tRP + t.tRFC)
        clear = Signal(init=1, reset_less=True)
        m.d.sync += clear.eq(ResetSignal())
        with m.If(clear):
            for value in state.values():
                for reg in value if isinstance(value, list) else [value]:
                    m.d.sync += reg.eq(reg.init)
        with m.Elif(refresh):
            m.d.sync += next_ref.eq(next_ref + self.u(t.tREFI))
            for b in range(nb):
                m.d.sync += [state["open"][b].eq(0), state["act_ok"][b].eq(ready_after)]
        with m.Else():
            for name, value in st.items():
                if isinstance(value, list):
                    for reg, v in zip(state[name], value):
                        if reg is not v:
                            m.d.sync += reg.eq(v)
                elif value is not state[name]:
                    m.d.sync += state[name].eq(value)

        # positions and pops
        rd_done = Signal()
        wr_done = Signal()
        go = Signal()
        m.d.comb += go.eq(~refresh & ahead_ok)
        m.d.comb += [rd_done.eq(go & ~writing & reads_ready & (rd_next == self.rd_beats) & self.rd_valid),
                     wr_done.eq(go & writing & (wr_next == self.wr_beats) & self.wr_valid),
                     self.rd_pop.eq(rd_done), self.wr_pop.eq(wr_done)]
        with m.If(go & ~writing & reads_ready):
            m.d.sync += rd_pos.eq(Mux(rd_done, 0, rd_next))
        with m.If(go & writing):
            m.d.sync += wr_pos.eq(Mux(wr_done, 0, wr_next))
        scheduled_w = Signal(range(self.write_buffer_beats + 1))
        m.d.comb += scheduled_w.eq(Mux(go & writing, wr_next - wr_pos, 0))
        with m.If(writing):
            m.d.sync += group.eq(Mux(group + scheduled_w > self.write_buffer_beats, self.write_buffer_beats,
                                     group + scheduled_w))
        with m.Else():
            m.d.sync += group.eq(0)
        m.d.sync += w_unsched.eq(w_unsched + self.wr_beat_in - scheduled_w)
        m.d.comb += self.wr_space.eq(w_unsched < self.write_buffer_beats)

        # record writes (several a cycle) and the read side's release
        extra = self.u(t.read_pipeline) + self.crossing * self.u_per_cycle
        wptr = rec_w
        for j, (valid, end) in enumerate(dues):
            n = rd_units[j][2]
            for e in range(depth):
                with m.If(valid & (wptr == e)):
                    m.d.sync += [rec_due[e].eq(end + extra), rec_beats[e].eq(n)]
            wptr = Mux(valid, Mux(wptr == depth - 1, 0, wptr + 1), wptr)
        pushed = sum(Mux(v, 1, 0) for v, _ in dues)
        m.d.sync += rec_w.eq(wptr)
        head_due = Array(rec_due)[rec_r]
        head_beats = Array(rec_beats)[rec_r]
        m.d.comb += self.rd_beat_ready.eq((rec_count != 0) & (head_due <= now))
        popped = Signal()
        m.d.comb += popped.eq(self.rd_beat_take & (taken + 1 == head_beats))
        with m.If(self.rd_beat_take):
            m.d.sync += taken.eq(Mux(popped, 0, taken + 1))
        with m.If(popped):
            m.d.sync += rec_r.eq(Mux(rec_r == depth - 1, 0, rec_r + 1))
        m.d.sync += rec_count.eq(rec_count + pushed - popped)
        return m
