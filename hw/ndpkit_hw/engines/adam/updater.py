"""The Adam/AdamW update datapath: ``lanes`` elements per cycle, bit-exact to
:func:`ndpkit.engines.adam.golden.adam_step` (the operation order is documented there).

``i`` (valid/ready): per lane fp32 ``p``, ``m``, ``v`` and the gradient ``g``: fp32,
or fp16/bf16 in its low 16 bits (``grad_format``), widened exactly inside.  ``o`` (valid/ready):
per lane the new ``p``, ``m``, ``v``, the 16-bit copy of ``p`` (fp16 or bf16, by
``copy_bf16``) and a non-finite-gradient flag.  The scalars, ``mode`` and
``copy_bf16`` are inputs that must stay constant while vectors are in flight (the
engine changes them only when ``idle``): they are not carried along the pipeline.

Inside, a fixed-latency dataflow graph (:class:`ndpkit_hw.arith.dataflow.Dataflow`)
accepts one vector per cycle; flow control is by credits: a vector enters only when
the output FIFO will have room for it whatever the consumer does, so the graph
never stalls and ``o`` can be back-pressured freely.
"""
from __future__ import annotations


from amaranth.hdl import Module, Signal, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.adam import SCALARS, Format, Mode
from ndpkit_hw.arith.dataflow import Dataflow, Timed

__all__ = ["AdamUpdater", "SCALARS", "updater_latency"]



def _lane_layout(lanes):
    return data.StructLayout({name: data.ArrayLayout(32, lanes) for name in ("p", "m", "v", "g")})


def _out_layout(lanes):
    return data.StructLayout({"p": data.ArrayLayout(32, lanes), "m": data.ArrayLayout(32, lanes),
                              "v": data.ArrayLayout(32, lanes), "copy": data.ArrayLayout(16, lanes),
                              "nonfinite": lanes})


def _nonzero(x):
    return x[:31] != 0


def build_lane(m, name, p, mom, var, g, s, mode, copy_bf16, grad_format, platform=None):
    """One lane's graph; returns (Dataflow, {output: Timed}).  ``g`` is the raw
    gradient word: fp32, or fp16/bf16 in its low 16 bits (``grad_format``)."""
    df = Dataflow(m, name, platform)

    def registered(x):
        # each input registered once before any arithmetic: the engine's word selection
        # ahead of the updater and a unit's first stage are never one cycle
        return Timed(df.at(df.input(x), 1), 1)
    P, M, V, graw = (registered(x) for x in (p, mom, var, g))
    G = df.select(df.static(grad_format == Format.FP16), df.op("fp16_to_fp32", Timed(graw.value[:16], 1)),
                  Timed(Mux(grad_format == Format.BF16, graw.value[:16] << 16, graw.value), 1))
    S = {k: df.static(v) for k, v in s.items()}
    l2 = df.static((mode == Mode.ADAM) & _nonzero(s["weight_decay"]))
    decayed = df.static((mode == Mode.ADAMW) & _nonzero(s["decay"]))
    adamw = df.static(mode == Mode.ADAMW)
    g1 = df.op("mul", G, S["grad_scale"])                                        # 1
    # steps 2 (Adam's L2 term) and 7 (AdamW's decoupled decay) are each one mode's: one
    # fma serves both, fma(P, weight_decay, g1) or fma(P, decay, P)
    decay_fma = df.op("fma", P, df.select(adamw, S["decay"], S["weight_decay"]), df.select(adamw, P, g1))
    g2 = df.select(l2, decay_fma, g1)                                            # 2
    m2 = df.op("fma", g2, S["one_minus_beta1"], df.op("mul", M, S["beta1"]))     # 3
    v2 = df.op("fma", df.op("mul", g2, g2), S["one_minus_beta2"], df.op("mul", V, S["beta2"]))   # 4
    d = df.op("fma", df.op("sqrt", v2), S["bias_correction2"], S["eps"])         # 5
    u = df.op("div", m2, d)                                                      # 6
    p1 = df.select(decayed, decay_fma, P)                                        # 7
    p2 = df.op("fma", u, S["step_size"], p1)                                     # 8
    copy = df.select(df.static(copy_bf16), df.op("fp32_to_bf16", p2), df.op("fp32_to_fp16", p2))
    nonfinite = Timed(G.value[23:31] == 0xFF, G.time)
    return df, {"p": p2, "m": m2, "v": v2, "copy": copy, "nonfinite": nonfinite}


def updater_latency() -> int:
    """The graph's latency in cycles (elaborates one lane)."""
    m = Module()
    m._MustUse__silence = True
    z = Signal(32)
    df, _ = build_lane(m, "probe", z, z, z, z, {k: z for k in SCALARS}, Signal(1), Signal(1), Signal(2))
    return df.latency


class AdamUpdater(wiring.Component):
    def __init__(self, *, lanes: int = 16):
        if lanes < 1:
            raise ValueError("lanes must be at least 1")
        self.lanes = lanes
        self.latency = updater_latency()
        # the FIFO absorbs everything in flight: latency + a few cycles of slack
        self.fifo_depth = 1 << (self.latency + 4).bit_length()
        members = {
            "i": In(stream.Signature(_lane_layout(lanes))),
            "o": Out(stream.Signature(_out_layout(lanes))),
            "mode": In(1),
            "copy_bf16": In(1),
            "grad_format": In(2),
            "idle": Out(1),
        }
        members.update({name: In(32) for name in SCALARS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        out_layout = _out_layout(lanes)
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFOBuffered(width=out_layout.size, depth=self.fifo_depth)

        # credits: vectors in the graph plus vectors in the FIFO never exceed its depth
        occupancy = Signal(range(self.fifo_depth + 1))
        accept = Signal()
        m.d.comb += [accept.eq(self.i.valid & (occupancy < self.fifo_depth)),
                     self.i.ready.eq(occupancy < self.fifo_depth)]
        popped = out_fifo.r_en & out_fifo.r_rdy
        m.d.sync += occupancy.eq(occupancy + accept - popped)
        m.d.comb += self.idle.eq(occupancy == 0)

        scalars = {name: getattr(self, name) for name in SCALARS}
        result = Signal(out_layout)
        latency = None
        for lane in range(lanes):
            df, outs = build_lane(m, f"lane{lane}", self.i.payload.p[lane], self.i.payload.m[lane],
                                  self.i.payload.v[lane], self.i.payload.g[lane], scalars, self.mode,
                                  self.copy_bf16, self.grad_format, platform)
            latency = df.latency
            m.d.comb += [
                result.p[lane].eq(df.at(outs["p"], latency)),
                result.m[lane].eq(df.at(outs["m"], latency)),
                result.v[lane].eq(df.at(outs["v"], latency)),
                result.copy[lane].eq(df.at(outs["copy"], latency)),
                result.nonfinite[lane].eq(df.at(outs["nonfinite"], latency)),
            ]
        assert latency == self.latency

        valid = accept
        for stage in range(latency):
            nxt = Signal(name=f"valid_s{stage + 1}")
            m.d.sync += nxt.eq(valid)
            valid = nxt
        m.d.comb += [out_fifo.w_en.eq(valid), out_fifo.w_data.eq(result),
                     self.o.valid.eq(out_fifo.r_rdy), self.o.payload.eq(out_fifo.r_data),
                     out_fifo.r_en.eq(self.o.ready)]
        return m
