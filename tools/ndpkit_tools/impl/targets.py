"""The fit-and-timing targets every implementation row is held to, and, for each target a
row misses, the reason and the next step (both reports print them; a missed target with
no note here fails ``tb/impl/test_targets.py``).

Targets (the fit-and-timing issue):

- logic depth: at most :data:`~ndpkit_tools.impl.depth.DEPTH_TARGET` levels between
  registers on the UltraScale+ netlist, every engine and unit;
- ECP5 routed Fmax: every engine at least 100 MHz at a configuration that fits the
  LFE5UM5G-85F (dma_copy and the burst engine decomp at least 125 MHz), and routing
  completes for every row; the FP units at least 150 MHz (div, sqrt, exp 125 MHz);
- area (UltraScale+ ``synth_xilinx`` estimate): the FP units' LUT and DSP48E2 budgets,
  attention at 32 lanes at most 22k LUT (issue 40: all 32 HBM channels) and 80 DSP, at 128 lanes at most
  42.9k (18 instances on the U55C, the grouped-query build), the port-rate Adam at most 35k LUT.
"""
from __future__ import annotations

from dataclasses import dataclass

from ndpkit_tools.impl.depth import DEPTH_TARGET

__all__ = ["Check", "engine_checks", "unit_checks", "note", "UNIT_MHZ", "UNIT_AREA", "ENGINE_AREA"]

#: ECP5 routed Fmax targets (MHz): every engine 100, the copy and burst engines 125
ENGINE_MHZ = {"dma_copy": 125, "decomp": 125}
ENGINE_MHZ_DEFAULT = 100
#: FP units' ECP5 targets (MHz), 150 for the others
UNIT_MHZ = {"div": 125, "sqrt": 125, "exp": 125}
UNIT_MHZ_DEFAULT = 150
#: UltraScale+ area budgets: FP units (LUT, DSP48E2) and engine configurations
UNIT_AREA = {"mul": (200, 2), "add": (450, 0), "fma": (1000, 2), "div": (1200, 0), "sqrt": (1200, 0),
             "exp": (800, 8)}
ENGINE_AREA = {("attention", "max"): {"LUT": 22_000, "DSP": 80}, ("attention", "gqa"): {"LUT": 42_900},
               ("adam", "max"): {"LUT": 35_000}}

_SUBNORMALS = ("binary32 with subnormal inputs and outputs, bit-exact to NumPy, needs a leading-zero count, "
               "a normalising shifter and a sticky mask at full significand width (AMD's Floating-Point "
               "Operator treats subnormal operands as zero, PG109)")

#: why a target is missed and what comes next: {(subject, config or "", kind): text};
#: kind is "levels", "area", "ecp5" (routed Fmax below target, or none at a fitting
#: configuration) or "routing" (a fitting row whose routing did not finish)
NOTES = {
    # ---- FP units ------------------------------------------------------------------------
    ("add", "", "area"): f"{_SUBNORMALS}: here an alignment shifter and a normalising shifter of 28 bits, "
                         "a 31-bit magnitude compare and the rounding. Next: a leading-zero anticipator "
                         "beside the adder, and the normalising shift limited to the close path.",
    ("mul", "", "area"): f"{_SUBNORMALS}: one bidirectional shifter over the 48-bit product (a subnormal "
                         "operand's left shift, a subnormal result's right shift), its 48-bit leading-zero "
                         "count and sticky mask are most of the LUTs; the 24x24 product is 2 DSP48E2. Next: "
                         "pre-normalise a subnormal operand's 24-bit significand instead (a product of two "
                         "normal significands needs at most one place), the result shift limited to 26.",
    ("fma", "", "area"): f"{_SUBNORMALS}: each subnormal operand normalised first (a 24-bit shifter and "
                         "leading-zero count per operand), the smaller of product and addend aligned over 51 "
                         "bits, the sum normalised with its own count, then one rounding. Next: align the "
                         "addend against the unnormalised product (one operand shifter instead of three).",
    ("div", "", "area"): "radix-2 non-restoring division: 27 stages, each a 27-bit add/subtract with its "
                         "pipeline registers, plus both significands normalised (two 24-bit shifters). "
                         "Next: radix-4 stages (half the adders and registers, a small digit-selection table).",
    ("exp", "", "area"): "the 24 x 40-bit reduction product with log2(e) and the degree-2 polynomial's "
                         "products, cut into 27x18 pieces by the DSP mapping (16 DSP48E2), and the "
                         "normalising shifter. Next: a 27-bit log2(e) and 18-bit polynomial products (the "
                         "golden model changes with them), 8 DSP.",
    # the ECP5 causes: nextpnr's critical path of each unit's routed netlist (build/impl/<unit>/nextpnr.log)
    ("mul", "", "ecp5"): "111 MHz (127 in the run before 2026-11-28 evening's, with the same cell counts: "
                         "nextpnr's placement moved): the normalising stage (3 -> 4), an exponent add's "
                         "carry chain into the 48-bit product shifted by a registered 7-bit amount (a "
                         "seven-deep multiplexer tree of ECP5 LUT4s) with the sticky mask. "
                         "Next: the shift over two stages (the amount's high bits first).",
    ("fma", "", "ecp5"): "126 MHz (124 before): the normalising shift (stage 8 -> 9, a multiplexer tree) and "
                         "the adder behind it. Next: the adder a stage later (latency 15).",
    ("dot", "", "ecp5"): "128 MHz: a lane product's normalising stage, as mul. Next: as mul.",
    # ---- engines -------------------------------------------------------------------------
    ("adam", "default", "levels"): "10 levels: the fma that serves both Adam's L2 term and AdamW's decay: its "
                                   "static scalar operand (weight_decay or decay, by the mode) selected inside the "
                                   "fma's special-value logic of its last stage (the stream decompressor's "
                                   "last-vector test, 10 before, is 8 now). Next: the selected scalar as one "
                                   "register of its own.",
    ("adam", "max", "levels"): "10 levels (11 before the updater's input registers): an fma's normalising "
                               "stage in a lane (s10 -> s11: the leading-zero count's limits selecting the "
                               "shift amount), 8 levels in the unit alone. Next: the count over two stages.",
    ("adam", "max", "area"): "4 lanes (the port's element rate at 512 bits) of 4 mul, 5 fma, sqrt, div and the "
                             "conversions, bit-exact binary32 with subnormals: ≈ 12k LUT of FP units a lane "
                             "(docs/arith_impl.md), the rest the operands' delay lines, the readers, writers and "
                             "word packing. Next: the FP units at their own targets (≈ 8.5k a lane) and the "
                             "delay lines in block RAM; the 35k goal needs both.",
    ("adam", "default", "ecp5"): "79.9 MHz routed (52.0 before the last-vector flags and the updater's registered inputs): the gradient from the read buffer's "
                                 "block RAM output (unregistered: 4.7 ns to the first LUT) through the stream "
                                 "decompressor's selection into the fp16 -> fp32 widening. Next: the read buffers' "
                                 "output registered (the updater's inputs now are).",
    ("adam", "max", "ecp5"): "does not fit (97.6k LUT sites); the default configuration's 79.9 MHz stands for "
                             "the engine. Next: as the default's.",
    ("attention", "default", "levels"): "9 levels (11 before the timing stages of 2026-11-26; 25 before the request checks were "
                                    "staged): several paths of 9, in the netlist of 2026-11-29 evening (the value sums' "
                                    "options, the scale multiplier's count a stage ahead, the checks' pairs from a table) the "
                                    "score side's bank event into the bank state (block.datapath.score.$signal -> "
                                    "datapath.bank0_state) first, beside the score lanes' rounding, the epilogue's flushes in "
                                    "flight into its state and the reciprocal's rounding add; that morning the score lanes' "
                                    "rounding first. Next: the score lanes' rounding a stage more (the dot's increment and its "
                                    "carry apart), the banks' events registered, then the FP units' normalising stages split",
    ("attention", "max", "levels"): "9 levels (10 before the DMA tracker took a finished burst from registers on 2026-11-26; 11 "
                                    "before RowDot's lane specials and rounding were registered). Several paths of 9: in the "
                                    "netlist of 2026-11-29 evening the q loader's format flag into its fp16 widening "
                                    "(block.datapath.q_banks.q_fp32 -> qload_fp16_to_fp322_s1_2) first, beside the epilogue's "
                                    "denominator read into the serial reciprocal (that morning's first), a writer's burst end "
                                    "into the W route's level and the paged pieces' issue (ABC's order of equal paths moves "
                                    "with the netlist; the checks' pairs from a table by the age took a path of 10 out of the "
                                    "gqa row's netlist). Next: the reciprocal's operand registered, the W route's level as a "
                                    "pair of counts",
    ("attention", "gqa", "levels"): "9 levels (10 on the evening's first netlist: the request checks' pair select, a case a "
                                    "pair on the age, now a table by the age, and the scale multiplier's normalising "
                                    "count and limits into its shift amount, now a stage ahead; a flush's gate on the value "
                                    "side's beat issue is registered, 9 from the epilogue's flush line before): the second "
                                    "unit's value sums, in block RAM, read into the update's stage-1 register first (a "
                                    "Yosys-named register), beside the epilogue's fold fma's normalising stage, the score "
                                    "lanes' rounding and the epilogue's group count into the value side's and the banks' "
                                    "states. Next: as the max configuration's, and the block RAM's read word registered "
                                    "before the update's compares (a stage of the sums' read-modify-write: REVISIT 7)",
    ("attention", "gqa", "area"): "42.2k LUT, 178 DSP, 51.5 BRAM36, 19 URAM at 128 lanes (the U55C's grouped-query build: "
                                  "18 instances with their ports' 4k LUT each within 70 % of its LUTs need at most 42.9k): "
                                  "the value sums one copy with the epilogue's flushes on the beats' read port (38 blocks "
                                  "of RAM, not 76) and the second unit's in block RAM, non-transparent (a transparent "
                                  "block-RAM port is a soft bypass: 44.1k with it). Two copies: 42.4k LUT, 32.5 BRAM36 and 76 "
                                  "URAM (8 instances a card by its URAM).",
    ("attention", "gqa", "ecp5"): "as the default configuration's (128 lanes do not fit the part either).",
    ("attention", "gqa_pairs", "levels"): "9 levels (2026-11-29 night, the gqa configuration with pair_words): the "
                                          "engine's control state into itself (block.control_state -> "
                                          "block.control_state) first, beside the gqa row's own paths of 9 (a unit's "
                                          "value sums read into the update's stage, a FixedDot's rounding, the "
                                          "epilogue's group count into the value side's and the banks' states); the "
                                          "pairs' own logic (the rows' second read ports, the partner's row integer "
                                          "added a stage ahead of the rounding, the q and sums addresses by the mode) "
                                          "is not among the deepest. Next: as the gqa configuration's",
    ("attention", "gqa_pairs", "ecp5"): "as the gqa configuration's.",
    ("attention", "ecp5", "levels"): "9 levels (10 on 2026-11-28 evening, 9 that afternoon, 10 that morning, 9 on 2026-11-27, 11 "
                                     "before 2026-11-26): in the netlist of 2026-11-29 evening the score side's bank event "
                                     "into the bank state (block.datapath.score.$signal -> datapath.bank0_state) first, "
                                     "beside the epilogue's flushes in flight into its state, the reciprocal and the last "
                                     "request into the q reader's flag queue; that morning the epilogue's state into the "
                                     "engine's control state (the datapath's idle). Next: the banks' events and the "
                                     "datapath's idle registered",
    ("attention", "max", "area"): "21.6k LUT at 32 lanes, 64 DSP, 38 BRAM36, 20 URAM: met on 2026-11-29 (that "
                                  "evening the request checks' pairs from a table by the age, -0.1k; the "
                                  "row buffers of beats where a word is two beats, -0.8k; the table on the q "
                                  "reader, -0.4k; the burst splitter from the command's last word, -0.1k; the "
                                  "synthesis wrapper's XOR tree taken out of the figure, -0.2k; the status "
                                  "writer's fixed strobe, narrower counters). 23.5k before (2026-11-28 evening: register chains "
                                  "under 8 stages kept in flip-flops, as the board projects tell Vivado "
                                  "(-shreg_min_size 8; 743 of the 847 SRLs, +2.6k FF), -0.7k; 24.2k before: the "
                                  "value side's sums 39 bits, V_BITS 17 and W_BITS 16, a slot ten URAM288 a copy, "
                                  "24 -> 20 URAM and -1.0k; a V element's sign applied as its sum's carry in, not "
                                  "negated a lane, -0.1k; the command's counters on one adder each, -0.1k); 25.5k before "
                                  "(2026-11-28 afternoon: the command's and the "
                                  "request's products -- heads x group, kv_heads x a head's bytes and the attended "
                                  "rows, blocks x block_size -- on DSP48E2s, each slice's product registered, not "
                                  "adder trees of shifted partial sums and block-size shifts, -0.9k, +9 DSP; the "
                                  "serial request checks' ranges in a register file read a side of the pair, not "
                                  "a select of eight ranges' registers a side, -0.3k; a paged piece's and the "
                                  "paged append's block offset as id x block bytes on a DSP, -0.1k, +3 DSP); "
                                  "26.8k before (re-measured on 2026-11-28 from main: the 26.5k row "
                                  "was measured before the per-head walk's one-base turn became a 1-bit register "
                                  "(the lint change), the same logic mapped by ABC 1 % apart); 26.5k (27.1k that morning: the fp32 -> fp16 conversions of the "
                                  "q loader and the epilogue without the normalising path, a 13-bit shift and one "
                                  "rounding add, -0.55k; 27.9k on 2026-11-27: the row buffers' four slots at "
                                  "d = 64, +0.2k; the softmax corrections in a register file a sweep unit, read "
                                  "where the epilogue folds, not 32 registers and a copy of 16, -0.6k; one writer "
                                  "for the new token's K and V rows, -0.1k; bf16 conversions as one add, not "
                                  "the normalising path, and the q loader's one 16-bit element select, -0.25k; "
                                  "31.8k before 2026-11-27's second half: the burst "
                                  "engines without a window check of their own, the request's checks covering "
                                  "every transfer, -1.4k; descriptors and block ids on one light reader, four "
                                  "interconnect ports; the request's 8 ranges and 23 pairs walked by one checker, "
                                  "-0.8k; narrow pending counts, -0.2k; the epilogue writing on the output "
                                  "writer's credit, no queue of its own, -0.3k; the outputs o x (1 / l), a serial "
                                  "reciprocal a query head and the fold's fmas, not a pipelined divider, "
                                  "-1.1k); distributed RAMs counted by their "
                                  "LUT sites since 2026-11-27 (by the old count, a LUT a RAM32M16, 28.9k before "
                                  "this; 32.4k before the serial epilogue; 38.6k before the block-fixed score lanes, "
                                  "34.8k before the block-fixed value lanes: RowDot's 402 LUT a lane became KeyAlign "
                                  "and FixedDot's 154, RunningSums' 491 the V aligner and WeightedSums' 317, "
                                  "docs/impl_lanes.json). The target is issue 40's, 22k with the ports: the lanes "
                                  "are a quarter of an instance, the rest repeats in every instance whatever its "
                                  "lanes (docs/engines/attention.md): next, the sequencer, sweep and epilogue "
                                  "shared by two channels' datapaths",
    ("attention", "default", "ecp5"): "does not fit: 224 DP16KD > 208 (the buffers are sized by the largest "
                                      "query group and head dimension, not by the lanes); the ecp5 configuration "
                                      "(64-bit, 8 lanes, 202 DP16KD) is the one placed.",
    ("attention", "max", "ecp5"): "as the default configuration's.",
    ("attention", "ecp5", "routing"): "placed (76.8 MHz post-placement estimate); routing not converged in 45 "
                                      "min: 202 of the 208 block RAMs used, the router's overuse fell from 24k to "
                                      "6k wires in 11 iterations. Next: block RAM below 80 % (score and weight "
                                      "banks sized by the group in use) and a longer routing budget.",
    ("graph", "ecp5", "levels"): "8 levels on the delay mapping (2026-11-29 night, 45.9k LUT there, 45.0k on the area mapping): the sg unit's inbox into its decoder's verdict first (block.unit.inbox.consume -> block.unit.decode.a_error), beside the PageRank divider's and FMA's stages and a row-sums FMA stage, as the default's. Before (area mapping): "
                                 "10 levels, re-synthesised on 2026-11-29 (the burst splitter from the command's "
                                 "last word; 44.4k LUT without the synthesis wrapper's XOR tree): an adder stage "
                                 "of the row sums' tree first (block.sums$734.tree.sum_l1_1_s4_1 -> sum_l1_1_s5_2), "
                                 "the FP add's normalising stage. Before: 10 levels, re-synthesised on 2026-11-28 afternoon (the row sums' partials in "
                                 "distributed RAM, 47.3k -> 44.9k LUT): the dangling-rank multiplier's stage "
                                 "(block.scale.lane0_s3_0 -> block.scale.lane0_s4_4) and the sg unit's decoder into "
                                 "its counters. In the morning, with the four row-sum FMAs, also 10 (its measurement "
                                 "before, 17, was of 2026-11-26's netlist: the default's timing stages since reach it "
                                 "too): the collector's slot count into the response table's members, the sg unit's "
                                 "decoder, the command's fields into the state. Before: 17 levels (21 before 2026-11-26, 24 on 2026-11-24): the reducer, from the "
                                 "response table's ids (a distributed RAM) through the arrived test, the "
                                 "weight's 33-bit add, the min's compare and the result selection into the "
                                 "writer's word (block.table.sent_ids.consume -> block.data__payload$407). Gone on "
                                 "2026-11-26: the collector's source address add (now in the window stage's "
                                 "register) and the row's changed-test behind the min (a cycle later, from "
                                 "registers: 19 -> 17). Next: the reducer as two stages (the value and the "
                                 "weight's sum registered before the min).",
    ("graph", "ecp5", "ecp5"): "fits and places (2026-11-30, the 8-level netlist: 54.7k LUT4, 6.7k CCU2C, 1,061 "
                               "DPR16X4, 37.4k FF, 126 DP16KD; 77.7k of 83.6k TRELLIS_COMB sites, 92 %); "
                               "post-placement estimate 71.3 MHz (25.8 on the 24-level netlist); routing stopped "
                               "at router2's third iteration, 77.9k wires overused (the earlier 58k-site netlist: "
                               "8.3k after 18 iterations, 35 min), so the row has no ECP5 figures. Next: a "
                               "configuration of at most about 70 % of the part's sites (the 512-bit datapath "
                               "stays: fewer row-sum partials in distributed RAM, a smaller window and unit), "
                               "then route again.",
    ("decomp", "default", "ecp5"): "117.3 MHz routed (121.0 on an earlier netlist): the index reader's block "
                                   "RAM output word, selected by the unpacker's pair position, into the pairs "
                                   "queue's distributed-RAM write in one cycle. Next: the selected pair "
                                   "registered before the queue.",
    ("decomp", "max", "levels"): "7 levels on the delay mapping (2026-11-29 night, 3.4k LUT on both mappings): the pairs queue's pop into the W beat's sent flag first (block.pairs.consume -> w_sent), beside the pair unpacker's value position into the value reader's buffer level; the writers' W queue heads are registers now, so WLAST no longer starts at a distributed-RAM read. Before (area mapping): "
                                 "9 levels, re-synthesised on 2026-11-29 (the burst splitter from the command's "
                                 "last word): the pair unpacker's value position into the value reader's buffer "
                                 "level first (block.unpacker.val_pos -> read_val.buffer.inner_level), beside a "
                                 "writer's burst end into the W route's level (ABC's order of equal paths). "
                                 "Before: 9 levels: a writer's burst end (its W queue's read) into the interconnect's "
                                 "W route queue's level (block.write_zero_fill.w_queue.consume -> block."
                                 "interconnect.w_route.level; re-synthesised 2026-11-27: the pair unpacker's "
                                 "value position into the value reader's buffer level was the path of 9 before). "
                                 "Next: the W route's pop from a registered burst end.",
    ("decomp", "max", "routing"): "6.5k LUT4 placed, routing not converged in 45 min (router2; 512-bit words "
                                  "into 46 block RAMs in a few columns: congestion). Next: more seeds and a "
                                  "longer budget, or the read buffers' words split across RAM columns.",
    ("sg", "default", "levels"): "7 levels on the delay mapping (2026-11-29 night, 17.5k LUT there, 16.9k on the area mapping): the inbox's pop into the decoder's verdict first (block.unit.inbox.consume -> block.unit.decode.a_error); the issuer's 44-bit counters add registered increments and its next run is found by compares (the decoder into the counters, 4 LUTs and 11 CARRY4, was the deepest path when this engine's netlist inside the graph engine was first mapped for delay). Before (area mapping): "
                                 "8 levels (re-synthesised on 2026-11-29 night, 16.6k LUT: the issuer's last-run "
                                 "test a register set as each run issues, not the run count's compare behind the "
                                 "port's ready, which with the decoder's two stage loads and the inbox's pop took 9): "
                                 "the issuer's run into the synthesis wrapper's output first "
                                 "(block.unit.issue.issue_run -> result), beside the decoder's head into its output "
                                 "and the inbox's pop into stage A's verdict, all 8; the writer's burst end into its "
                                 "queues 8 too. Before: 9 levels (2026-11-28 evening): the decoder's output into its "
                                 "stage A's valid (the last-run test behind the decoder's ready), and the writer's "
                                 "burst end into the crossbar's W route queue's level.",
    ("sg", "default", "routing"): "28k LUT4 sites placed (23.9k LUT4 after the scatter-beat change, 47k before), "
                                  "post-placement estimate 66.7 MHz (40.8 before); routing not finished in 28 "
                                  "min (router2: overused wires 48k -> 22k in 5 iterations, on a machine running "
                                  "three other jobs). Next: a routing run alone with a longer budget; the "
                                  "512-bit row buffers' words spread over more RAM columns.",
    ("graph", "default", "ecp5"): "did not fit the LFE5UM5G-85F (87.6k LUT sites with its distributed RAMs) "
                                  "before the sg unit's scatter change, which took 15k LUT4 off the ecp5 "
                                  "configuration (4 banks, 16 cache lines and response ids, same datapath): "
                                  "that one fits and places. Next: re-synthesise the default.",
    ("graph", "default", "levels"): "8 levels on the delay mapping (2026-11-30 with the window exchange's second window set: 105.7k LUT there, 102.5k on the area mapping the cell counts are of, 178 RAMB36; 2026-11-29 night without it, 99.8k and 97.9k, 120 RAMB36): the sg unit's inbox into its decoder's verdict first (block.unit.inbox.consume -> block.unit.decode.a_error), beside its run starts, the PageRank divider's and FMA's stages, the W route's pop into the writer's buffer level, the column words into the window stage, the packer's count, a row-sums FMA stage, the validator and both reducers' adds, all 8. The area mapping (synth_xilinx's own, LUTs of unit delay beside boxes in picoseconds) mapped the same netlist at 11: its area recovery deepens paths of LUTs alone at will (the binary32 adder's normalising stage: 7 levels alone, 11 inside this engine), so the levels are now counted on a mapping for delay (ndpkit_tools.impl.flow.DELAY_LUT_LIBRARY). On it the netlist before this night's changes had 9 levels: the command's fields through the window base's select into the window stage's address add, the judging flag into the byte count's three-input add, the writer's W queue read (a distributed RAM) through WLAST into the interconnect's W route level, the reducer's resolved queue read into its 33-bit add, then the state into the packer's count and a row-sums FMA's normalising count; each now starts at a register (the window base and the pass's bytes registered, the writer's W queue and the reducer's queue buffered, the packer's pass kind registered, the FMA's count of a sum's low half taken a stage ahead while its high half adds: the same latency). And the sg unit's 44-bit counters add registered increments, its run mask is compares, not a shifted subtraction. Before (area mapping): "
                                    "11 levels (2026-11-29 night, 97.3k LUT: the sg unit's run start into itself "
                                    "first (block.unit.issue.run_start -> block.unit.issue.run_start), beside an adder "
                                    "stage of the sums' tree, the sg decoder's head into its output, the vertex "
                                    "dataflow's and a row-sums FMA's stages and the streams' reservations; none from "
                                    "the command into the control any more: PageRank's tolerance compare and the "
                                    "contributions-into-the-window flag registered (a cycle a vertex pass), which took "
                                    "those three paths of 11 (block.cmd -> control_state, bytes_written and the FSM's "
                                    "next state) off; with the section split and the sg issuer's registered last run "
                                    "before that, 97.2k LUT and 11, the command's paths the only ones at 11, the rest "
                                    "at 10: ABC maps the same fp32 stages at 10 or 11 from one netlist to the next. "
                                    "How much of it is the mapping (measured 2026-11-29 night on the same top.v): synth_xilinx maps with LUTs of unit delay beside carry and mux boxes timed in picoseconds, so ABC may deepen a path of LUTs alone up to a carry chain's delay when that saves area; mapped instead with LUTs of the boxes' unit (abc9 -lut, 642 ps a LUT, no delay target) the netlist has 10 levels at 100.5k LUT (+3 %), its deepest a carry chain (the sg unit's decoder into its 44-bit counters: 4 LUTs and 11 CARRY4) and the fp32 FMA's stage at 9, the sg unit's run start at 8; with a 5.9 ns delay target as well, worse (the sg unit alone 10 levels, not 8). A flow with consistent delays would re-synthesise every row; it is not this report's. Before: 11 levels (2026-11-29 evening: the row sums' 128 partials, every row at eight "
                                    "entries a cycle, and PageRank's vertex passes at eight vertices a cycle: "
                                    "97.5k LUT, 75.8k FF, 34 DSP, 120 BRAM36; with the 128 partials and four vertex "
                                    "lanes 81.1k LUT, 58.4k FF, 26 DSP): the command's fields into the state first "
                                    "(block.cmd -> block.$639), beside the sg unit's inbox into its decoder's error, "
                                    "an adder stage of the sums' tree, the vertex dataflow's add and a row-sums FMA's "
                                    "stage, all 11: no new path (the four more vertex lanes are copies of the "
                                    "dataflow). Before: 11 levels (re-synthesised with the burst splitter from the command's last word, 79.0k LUT without the "
                                    "synthesis wrapper's XOR tree): a row-sums FMA's stage first "
                                    "(a fold's lane0_s4_1 into lane0_s5_2), beside the command's "
                                    "fields into the state. Earlier that day: "
                                    "11 levels (2026-11-29 afternoon: PageRank's vertex passes four vertices a cycle, "
                                    "79.4k LUT, 26 DSP, 119.5 BRAM36): paths of 11 from the command's fields through "
                                    "the passes' ends into the state (block.cmd -> block.control_state, beside the "
                                    "completion, iterations and the judging flag: the program's compares, the new "
                                    "contributions-into-the-window flag among them), a vertex dataflow FMA's and the "
                                    "scale multiplier's normalising stage. Morning: 66.2k LUT, 20 DSP, the same 11 "
                                    "(block.cmd -> block.$590), the dropped pass's end from the word packer's own "
                                    "done. Three syntheses of the change: 11 (the new select of the "
                                    "validation's byte count from the command), 12 with the edge streams' enables "
                                    "registered (the scale multiplier's stage mapped deeper by ABC), 11 with the "
                                    "validator's column count registered (the tail's select into the column reader's "
                                    "pops gone). Next: the pass's end and the program's compares as registers ahead of "
                                    "the state, then the fp32 units' normalising stages split. Before: "
                                    "10 levels (2026-11-28 afternoon, 67.1k LUT, 20 DSP, and that evening, 66.4k with "
                                    "register chains under 8 stages in flip-flops, the same paths: the row sums' 64 partials in "
                                    "distributed RAM and eight FMAs; paths of 10: the sg unit's decoder, its run starts into "
                                    "its verdict (block.unit.decode.a_starts -> block.unit.decode.decoded), the command's "
                                    "fields into the val reader's buffer, the assembler's entry into the pending queue. Tried "
                                    "and not kept: those three shortened (the streams' enables from registered command tests, "
                                    "the decoder's in-count mask registered, the last-beat test without a subtract): 11, the "
                                    "fp32 units' own stages mapped deeper by ABC. Morning: 10 levels (2026-11-28; 11 before: the command's state into the row pointers' "
                                    "unpacker, block.control_state into block.words.unpack_rowptr.last, and the empty-head "
                                    "compare into the output writer's status queue, gone with the empty-head test "
                                    "registered among the command's sizes and the word router's phase selects a cycle "
                                    "late; then the single path's and the vertex passes' runs a cycle late and the row pointers' count registered; the afternoon's four row-sum FMAs took it to 11, the command's fields through the sums' idle (a wide OR of four FMAs' tags) into the state, and the validator's compares into the state: both registered, back to 10, 74.6k LUT, 12 DSP). Paths of 10 now: the command's fields into the engine's state (block.cmd -> block.control_state: the program's compares beside the pass's end), the sg unit's inbox into its decoder's verdict, the collector's slot count into the response table; before the FMAs: the validator's column count's compare into the engine's state (block.validator.col_taken -> control_state), the sg unit's run start (a shifted mask and a priority chain), its decoder and its assembler into the pending queue, an adder stage of the sums' tree (the fp32 add's normalising stage: 7 levels alone). Tried and not kept: the validator's done registered (10, the collector's key compares and the vertex passes' adder then the deepest: ABC maps the netlist as a whole) and the run start as a compare a bit (the sg unit's row would need re-measuring; 10 either way). Next: the fp32 add's and multiply's normalising stages split (a stage more each), then the collector and the sg unit. Before: 11 levels (re-synthesised 2026-11-27: the command's state into the row pointers' unpacker (block.control_state -> block.words.unpack_rowptr.last) among them; 15 on 2026-11-26 morning, the first measurement: native Yosys, "
                                    "the WebAssembly build's 4 GiB ran out). Each step measured: the collector's "
                                    "joins by each slot's own hit, a group's leaving registered ahead of the "
                                    "compares -> 15; the edge generator's source outside the state's gate -> 13; "
                                    "the row sums' entry registered before the FMA -> 12; the windowed queue "
                                    "three deep (two passed an edge every other cycle) -> 13; with the edge "
                                    "lanes 13 (two paths: the collector's key compares into the joined slot's "
                                    "offsets, and the pass's end through the collector's flush into its take); "
                                    "the collector's input register with its match bits computed as the edge "
                                    "enters (forwarding the key of a group opened that cycle) and the flush "
                                    "registered -> 12 (the word packer's last-element compare); that compare "
                                    "and the vertex passes' one registered a cycle ahead -> 11; the sums' two "
                                    "FMAs and eight banks (the sum lanes) 11; the packer's and the vertex passes' "
                                    "counts as down-counters, the arrays' lengths, the passes' count and the "
                                    "last iteration registered -> 10 to 11: no path from the command register "
                                    "or a count is among the deepest, which are now the fp32 units' own "
                                    "stages, measured at 9 to 11 levels in this flattened netlist (7 to 8 "
                                    "alone, docs/arith_impl.md) depending on how ABC maps them: here the "
                                    "dangling-rank multiplier's, beside the sums' FMA at 10, the sg unit's "
                                    "response checks and the collector's send into the response table at 10. "
                                    "Next: the fp32 units' normalising stages split (a stage more each), the "
                                    "sg unit's inbox and run-start paths registered.",
}


@dataclass(frozen=True)
class Check:
    target: str
    measured: str
    met: bool
    kind: str

    def status(self) -> str:
        return "met" if self.met else "**missed**"


def note(subject: str, config: str, kind: str) -> str:
    """The reason and next step of a missed target ("" when none is recorded)."""
    return NOTES.get((subject, config, kind), "")


def _levels(levels) -> Check:
    if levels is None:
        return Check(f"≤ {DEPTH_TARGET} levels", "not measured", False, "levels")
    return Check(f"≤ {DEPTH_TARGET} levels", f"{levels:g}", levels <= DEPTH_TARGET, "levels")


def unit_checks(row: dict) -> list[Check]:
    """An FP unit's row of ``make impl`` against its targets."""
    unit, x = row["unit"], row["xcup"]
    out = [_levels(row.get("levels"))]
    mhz = UNIT_MHZ.get(unit, UNIT_MHZ_DEFAULT)
    fmax = row.get("ecp5_fmax_mhz")
    out.append(Check(f"ECP5 ≥ {mhz} MHz", "not routed" if fmax is None else f"{fmax} MHz",
                     fmax is not None and fmax >= mhz, "ecp5"))
    if unit in UNIT_AREA:
        lut, dsp = UNIT_AREA[unit]
        out.append(Check(f"≤ {lut} LUT, ≤ {dsp} DSP", f"{x['LUT']:,} LUT, {x['DSP']} DSP",
                         x["LUT"] <= lut and x["DSP"] <= dsp, "area"))
    return out


def engine_checks(row: dict, rows: list[dict]) -> list[Check]:
    """An engine configuration's row of ``make impl-report`` against its targets; ``rows``:
    every row (the ECP5 target is the engine's, met at any configuration that fits)."""
    engine, config, x = row["engine"], row["config"], row["xcup"]
    depth = row.get("xcup_depth") or {}
    out = [_levels(depth.get("levels"))]
    for resource, limit in ENGINE_AREA.get((engine, config), {}).items():
        out.append(Check(f"≤ {limit:,} {resource}", f"{x[resource]:,} {resource}", x[resource] <= limit, "area"))
    mhz = ENGINE_MHZ.get(engine, ENGINE_MHZ_DEFAULT)
    fmax = row.get("ecp5_fmax_mhz")
    ecp5_note = row.get("ecp5_note") or ""
    if fmax is not None:
        out.append(Check(f"ECP5 routed ≥ {mhz} MHz", f"{fmax} MHz", fmax >= mhz, "ecp5"))
    elif ecp5_note.startswith("placed"):
        out.append(Check("ECP5 routing completes", ecp5_note, False, "routing"))
    else:
        # does not fit: the engine's target stands on a configuration that does
        routed = [r for r in rows if r["engine"] == engine and r.get("ecp5_fmax_mhz") is not None]
        best = max(routed, key=lambda r: r["ecp5_fmax_mhz"], default=None)
        measured = (f"{ecp5_note or 'not routed'}; the {best['config']} configuration: {best['ecp5_fmax_mhz']} MHz"
                    if best else f"{ecp5_note or 'not routed'}; no configuration of {engine} routed")
        out.append(Check(f"ECP5 routed ≥ {mhz} MHz at a fitting configuration", measured,
                         best is not None and best["ecp5_fmax_mhz"] >= mhz, "ecp5"))
    return out


def markdown_section(checks: list[tuple[str, str, Check]], title: str = "Targets") -> list[str]:
    """The report's targets table: every target of every row, and for a missed one why
    and what comes next."""
    out = [f"## {title}", "", "| subject | config | target | measured | status | why, and the next step |",
           "|---|---|---|---|---|---|"]
    for subject, config, c in checks:
        why = "" if c.met else (note(subject, config, c.kind) or "(no note recorded)")
        out.append(f"| {subject} | {config or '—'} | {c.target} | {c.measured} | {c.status()} | {why} |")
    missed = sum(not c.met for _, _, c in checks)
    out += ["", f"{len(checks) - missed} of {len(checks)} targets met."]
    return out
