"""The sg unit's completion stage (its stage 3): responses in request order.  A gather's
R beats are unpacked into the response line (every element of run ``r`` from beat
``r``, in parallel), a line read's beat is its line, a write waits for its B responses,
and the worst AXI response becomes the error code; a bad request's entry answers at
once with its code."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.engines.sg.issue import completion_layout
from ndpkit_hw.engines.sg.requests import MAX_OFFSETS, ResponseLayout, axi_error_code

__all__ = ["ResponseAssembler", "read_beat_layout"]

read_beat_layout = data.StructLayout({"data": 8 * LINE, "resp": 2})


class ResponseAssembler(wiring.Component):
    """``entries`` in (:data:`~.issue.completion_layout`, one per request in order), the
    memory's ``r`` beats and ``b`` responses (their ``resp`` codes) in, ``responses``
    out (:data:`~.requests.ResponseLayout`)."""

    def __init__(self):
        super().__init__({"entries": In(stream.Signature(completion_layout)),
                          "r": In(stream.Signature(read_beat_layout)), "b": In(stream.Signature(2)),
                          "responses": Out(stream.Signature(ResponseLayout))})

    def elaborate(self, platform):
        m = Module()
        done, r, b, out = self.entries.payload, self.r, self.b, self.responses
        done_write, done_row = done.op[0], done.op[1]
        beat_run = Signal(5)            # the beat (run) of the request being completed
        error_seen = Signal(2)          # the worst response of its earlier beats
        assembled = Signal(8 * LINE)    # its earlier runs' elements
        response = out.payload
        m.d.comb += response.op.eq(done.op)
        last_beat = beat_run == done.runs - 1
        with m.If(self.entries.valid & (done.error != 0)):
            m.d.comb += [response.error.eq(done.error), out.valid.eq(1), self.entries.ready.eq(out.ready)]
        with m.Elif(self.entries.valid & ~done_write):
            m.d.comb += r.ready.eq(out.ready)
            # this beat's elements into their slots (slots of earlier runs kept)
            filled = Signal(8 * LINE)
            m.d.comb += filled.eq(Mux(beat_run == 0, 0, assembled))
            for j in range(MAX_OFFSETS):
                with m.If((j < done.count) & (done.run[j] == beat_run[:4])):
                    with m.If(done.size8):
                        if j < LINE // 8:
                            m.d.comb += filled.word_select(j, 64).eq(r.payload.data.word_select(done.lane[j][3:], 64))
                    with m.Else():
                        m.d.comb += filled.word_select(j, 32).eq(r.payload.data.word_select(done.lane[j][2:], 32))
            worst = Mux(r.payload.resp > error_seen, r.payload.resp, error_seen)
            m.d.comb += [response.data.eq(Mux(done_row, filled, r.payload.data)),
                         response.error.eq(axi_error_code(worst)), out.valid.eq(r.valid & last_beat)]
            with m.If(r.valid & r.ready):
                with m.If(last_beat):
                    m.d.comb += self.entries.ready.eq(1)
                    m.d.sync += [beat_run.eq(0), error_seen.eq(0)]
                with m.Else():
                    m.d.sync += [assembled.eq(filled), beat_run.eq(beat_run + 1), error_seen.eq(worst)]
        with m.Elif(self.entries.valid):
            m.d.comb += b.ready.eq(out.ready)
            worst = Mux(b.payload > error_seen, b.payload, error_seen)
            m.d.comb += [response.error.eq(axi_error_code(worst)), out.valid.eq(b.valid & last_beat)]
            with m.If(b.valid & b.ready):
                with m.If(last_beat):
                    m.d.comb += self.entries.ready.eq(1)
                    m.d.sync += [beat_run.eq(0), error_seen.eq(0)]
                with m.Else():
                    m.d.sync += [beat_run.eq(beat_run + 1), error_seen.eq(worst)]
        return m
