"""FuseSoC packaging: the cores' lint target runs here (generator -> Amaranth ->
Verilog -> ``verilator --lint-only -Wall`` with the project's waivers), and the
generator refuses bad parameters with a message naming them.  `make sim` installs
FuseSoC (the ``boards`` extra); the full set is ``make fusesoc-lint``."""
import shutil
from pathlib import Path

import pytest

from ndpkit_tools.fusesoc_lint import cores_root, fusesoc_lint, fusesoc_run

pytestmark = [pytest.mark.long,
              pytest.mark.skipif(shutil.which("fusesoc", path=str(Path(__import__("sys").executable).parent)) is None,
                                 reason="fusesoc missing: make fusesoc-lint installs it")]


@pytest.mark.parametrize("core", ["dma_copy", "decomp"])
def test_lint_target_passes(core, tmp_path):
    run = fusesoc_lint(core, tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert list(tmp_path.glob(f"build/*/lint-verilator")), "fusesoc did not run the verilator lint"


def test_generator_names_a_bad_parameter(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("ndpkit_gen", cores_root() / "ndpkit_gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with pytest.raises(SystemExit, match="'top' must be one of"):
        gen.generate({"parameters": {"top": "gpu"}}, tmp_path)
    with pytest.raises(SystemExit, match="bad parameters for dma_copy.*lanes"):
        gen.generate({"parameters": {"top": "dma_copy", "lanes": 3}}, tmp_path)
    core = gen.generate({"vlnv": "x:y:dma_copy_gen:1", "parameters": {"top": "dma_copy", "data_width": 128}}, tmp_path)
    assert core.name == "dma_copy_gen.core" and "module ndpkit_dma_copy" in (tmp_path / "dma_copy.v").read_text()


def test_device_sim_target_runs_the_smoke_test(tmp_path):
    """Verilator --binary of the SystemVerilog smoke test on a small device."""
    run = fusesoc_run("device", "sim", tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "PASS: ndpkit device smoke test" in run.stdout + run.stderr


def test_smoke_test_magic_is_the_register_maps():
    from ndpkit_spec.shell import NDPKIT_MAGIC
    assert f"32'h{NDPKIT_MAGIC:08X}" in (cores_root() / "tb" / "device_smoke_tb.sv").read_text()


@pytest.mark.parametrize("board", ["alveo_u280", "alveo_u55c", "smartssd"])
def test_vivado_targets_set_up_for_each_board_part(board, tmp_path):
    """`--setup` writes the Vivado project (no Vivado needed) with the board's part."""
    from ndpkit_tools.boards import load_board
    run = fusesoc_run("dma_copy", f"synth_{board}", tmp_path, setup_only=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    tcl = list(tmp_path.glob(f"build/*/synth_{board}-vivado/*.tcl"))
    assert tcl, "no Vivado project script was written"
    text = "".join(t.read_text() for t in tcl)
    assert load_board(board).part in text and "ndpkit_dma_copy" in text
