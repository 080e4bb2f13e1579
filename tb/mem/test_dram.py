"""The DRAM timing presets: their validation (fast) and the gateware model's bench
(:mod:`tb.mem.dram_bench`): exact idle latencies, Shuhai-style microbenchmarks, data
and error responses under random stalls."""
import math

import pytest

from ndpkit_spec.dram import PRESETS, parse_mapping, preset


def row_stride(timing, mapping=None) -> int:
    """Bytes from an address to the same bank's next row (every bank's row once)."""
    return timing.column_bytes * timing.banks * timing.columns


def next_column(timing, mapping=None) -> int:
    """Bytes from an address to the next column of the same bank and row."""
    bit = int(math.log2(timing.column_bytes))
    for name, lo, width in parse_mapping(timing.mapping_spec(mapping), timing, None):
        if name == "co" and lo == 0:
            return 1 << bit
        bit += width or 0
    raise AssertionError("no column bit 0")


def bench_config(name, *, engine_mhz, data_width, size=1 << 20, crossing=0, mapping=None, **extra):
    from ndpkit_hw.mem.memory_model import AxiMemoryModel
    timing = PRESETS[name]
    model = AxiMemoryModel(size=size, data_width=data_width, dram=timing, engine_mhz=engine_mhz, mapping=mapping,
                           crossing=crossing, max_outstanding=64, stall_per_256=extra.get("stall_per_256", 0),
                           seed=extra.get("seed", 1))
    d = model.dram
    params = dict(size=size, base=0, data_width=data_width, span=size, row_stride=row_stride(timing),
                  peak_bytes_per_cycle=min(data_width // 8, timing.peak_bytes_per_cycle(engine_mhz)),
                  expected_latency={"hit": d.read_latency_cycles(0), "closed": d.read_latency_cycles(timing.tRCD_RD),
                                    "miss": d.read_latency_cycles(timing.tRP + timing.tRCD_RD)},
                  hit_offset=next_column(timing), preset=name, mapping=mapping, **extra)
    return model, params


# ---- fast: the presets and their refusals -------------------------------------------
def test_presets_valid_and_cited():
    from ndpkit_spec.dram import SOURCES, TIMING_FIELDS
    for name, timing in PRESETS.items():
        timing.validate()
        cited = " ".join(SOURCES[name])
        for field in TIMING_FIELDS:
            assert field in cited, f"{name}: {field} has no source"
    assert PRESETS["hbm2_pc"].peak_bytes_per_s == 14.4e9
    assert PRESETS["ddr4_2400"].peak_bytes_per_s == 19.2e9


@pytest.mark.parametrize("change, field", [
    (dict(tRAS=10), "tRAS"), (dict(tCCD_L=1), "tCCD_L"), (dict(tREFI=100), "tREFI"),
    (dict(tRRD_L=2), "tRRD_L"), (dict(tCCD_S=1), "tCCD_S"), (dict(bank_groups=3), "bank_groups"),
    (dict(tCWL=40), "tCWL"), (dict(tRP=-1), "tRP"),
])
def test_jedec_relations_refused(change, field):
    with pytest.raises(ValueError, match=field):
        PRESETS["hbm2_pc"].with_(**change)


@pytest.mark.parametrize("spec, words", [
    ("row bg ba", "does not cover"), ("row bg ba co co", "twice"), ("bg ba co", "no row"),
    ("row bg[2] ba co", "outside"), ("row bank co", "not a field"),
])
def test_bad_mappings_refused(spec, words):
    with pytest.raises(ValueError, match=words):
        parse_mapping(spec, PRESETS["hbm2_pc"], None)


def test_unknown_preset_and_small_memory_refused():
    with pytest.raises(ValueError, match="unknown memory preset 'hbm3'.*hbm2_pc"):
        preset("hbm3")
    with pytest.raises(ValueError, match="smaller than one row in every bank"):
        parse_mapping(PRESETS["ddr4_2400"].mapping_spec(), PRESETS["ddr4_2400"], 32 << 10)
    with pytest.raises(ValueError, match="power-of-two"):
        parse_mapping(PRESETS["hbm2_pc"].mapping_spec(), PRESETS["hbm2_pc"], 3 << 20)


# ---- the gateware ----------------------------------------------------------------------
def _points(t, burst):
    rs = row_stride(t)
    return [dict(pattern="read", burst=256, stride=256, total=32 << 10),
            dict(pattern="read", burst=burst, stride=rs, total=8 << 10),
            dict(pattern="write", burst=256, stride=256, total=32 << 10),
            dict(pattern="mixed", burst=256, stride=256, total=16 << 10)]


CONFIGS = {
    # Shuhai's set-up: the HBM port's 450 MHz / 256 bits, DDR4's MIG 300 MHz / 512 bits
    "hbm2_pc-450MHz-256b": dict(name="hbm2_pc", engine_mhz=450, data_width=256, timing_checks=True,
                                master_stall=0.0, iterations=30),
    "ddr4_2400-300MHz-512b": dict(name="ddr4_2400", engine_mhz=300, data_width=512, timing_checks=True,
                                  master_stall=0.0, iterations=30),
    # a card's engines: 200 MHz, 512 bits, behind a clock crossing, random stalls everywhere
    "hbm2_pc-200MHz-512b-stalls": dict(name="hbm2_pc", engine_mhz=200, data_width=512, crossing=8,
                                       stall_per_256=60, master_stall=0.3, iterations=60),
}


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_dram_model(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    c = dict(CONFIGS[config])
    name = c.pop("name")
    model, params = bench_config(name, **c)
    if c.get("timing_checks"):
        params["points"] = _points(PRESETS[name], PRESETS[name].column_bytes)
    run_bench(Design(model, "dram_model", quick_build=True), "tb.mem.dram_bench", params=params)
