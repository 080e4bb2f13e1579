# amaranth: UnusedElaboratable=no
"""The engine registry is the one list of engines: every consumer derives from it.

Two kinds of proof: (1) for the real registry, each consumer holds exactly the
registry's engines with the registry's classes, blocks and kinds; (2) a seventh engine
added to the registry alone (here ``echo``: dma_copy's gateware and golden model under
another name and kind) appears in every consumer without touching any of them.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from ndpkit_spec import registry as registry_module
from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.engines import dma_copy as dma_copy_spec
from ndpkit_spec.registry import ALL_BLOCKS, ENGINE_BLOCKS, REGISTRY, EngineKind
from ndpkit_spec.shell import engine_block
from ndpkit.engines.dma_copy.client import DmaCopyClient

ROOT = Path(__file__).resolve().parents[2]


def test_entries_are_consistent():
    kinds = [spec.kind for spec in REGISTRY.values()]
    assert len(set(kinds)) == len(kinds)
    assert {k.name.lower(): int(k) for k in EngineKind} == {name: spec.kind for name, spec in REGISTRY.items()}
    assert ENGINE_BLOCKS == {name: spec.block for name, spec in REGISTRY.items()}
    assert ALL_BLOCKS[1:] == tuple(spec.block for spec in REGISTRY.values())
    for name, spec in REGISTRY.items():
        assert spec.name == name == spec.block.name


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_reference_resolves_and_every_place_exists(name):
    spec = REGISTRY[name]
    assert inspect.isclass(spec.gateware_class())
    assert spec.gateware_class().max_in_flight == spec.max_in_flight
    assert spec.client_class().name == name
    golden = spec.golden_module()
    # the one golden contract: check(cmd, *, word_bytes, window_base, window_size),
    # execute(memory, cmd, *, word_bytes, base, window_base, window_size), each with the
    # instance's state beyond memory as keywords with defaults where the module keeps some
    # (model_state(card, constants, word_bytes) makes them; started(cmd, ...) sees a command start)
    check, execute = inspect.signature(golden.check), inspect.signature(golden.execute)
    state = list(golden.model_state({}, spec.constants, 16)) if hasattr(golden, "model_state") else []
    assert list(check.parameters) == ["cmd", "word_bytes", "window_base", "window_size", *state]
    assert list(execute.parameters) == ["memory", "cmd", "word_bytes", "base", "window_base", "window_size", *state]
    for keyword in state:
        assert check.parameters[keyword].default is None and execute.parameters[keyword].default is None
    if hasattr(golden, "started"):
        assert list(inspect.signature(golden.started).parameters) == [
            "cmd", "word_bytes", "window_base", "window_size", *state]
    # and command_ranges(cmd, word_bytes): what the driver checks a command's Buffers against
    assert list(inspect.signature(golden.command_ranges).parameters) == ["cmd", "word_bytes"]
    # the mirrored folders and the document
    for folder in (f"spec/ndpkit_spec/engines/{name}.py", f"hw/ndpkit_hw/engines/{name}",
                   f"sw/ndpkit/engines/{name}", f"tb/engines/{name}", spec.doc_path, f"fusesoc/{name}.core"):
        assert (ROOT / folder).exists(), folder


def test_golden_check_and_execute_on_a_model_card_command():
    """The model card's engine loop is the golden contract and nothing else."""
    from ndpkit.transport.model import ModelDevice, run_command
    device = ModelDevice(mem_size=1 << 16, data_width=128, engines=tuple(REGISTRY))
    device.memory[:64] = np.arange(64, dtype=np.uint8)
    golden = REGISTRY["dma_copy"].golden_module()
    cmd = {"op": 0, "src": 0, "dst": 4096, "length": 64, "pattern": 0}
    assert run_command(golden, device, cmd, (0, 1 << 16)) == (0, 64, 64, 0)
    assert (device.memory[4096:4160] == np.arange(64)).all()
    assert run_command(golden, device, dict(cmd, length=0), (0, 1 << 16))[0] == 4    # ZERO_LENGTH


def test_every_consumer_holds_the_registry():
    import ndpkit
    from ndpkit.transport.model import ModelDevice
    from ndpkit_hw.device import Device
    from ndpkit_tools.fusesoc_lint import default_cores
    from ndpkit_tools.impl.engines_report import CONFIGS
    from ndpkit_tools.tops import TOPS

    names = list(REGISTRY)
    model = ModelDevice(mem_size=1 << 20, engines=names)
    assert {e.name: e.kind for e in model.engines.values()} == {n: s.kind for n, s in REGISTRY.items()}
    with ndpkit.open("model", engines=names, mem_size=1 << 20) as dev:
        assert {n: type(c) for n, c in dev.engines.items()} == {n: s.client_class() for n, s in REGISTRY.items()}
    hw = Device(mem_size=1 << 20, engines=names)
    assert {n: (type(core), fe.block) for n, (_, core, fe) in hw.engines.items()} == \
        {n: (s.gateware_class(), s.block) for n, s in REGISTRY.items()}
    assert default_cores()[:-1] == names
    assert {n: {k: dict(v) for k, v in c.items()} for n, c in CONFIGS.items()} == \
        {n: {k: dict(v) for k, v in s.configs.items()} for n, s in REGISTRY.items()}
    assert set(TOPS["device_hbm"]().engine_names) == set(names)


# ---- a seventh engine, added to the registry and nowhere else --------------------------

class EchoClient(DmaCopyClient):
    name = "echo"


ECHO = EngineSpec(
    name="echo", kind=7,
    block=engine_block("echo", [r for r in dma_copy_spec.BLOCK.registers if r.offset >= 0x40], doc="A test engine."),
    summary="dma_copy under another name (registry test)",
    gateware="ndpkit_hw.engines.dma_copy:DmaCopy",
    golden="ndpkit.engines.dma_copy.golden",
    client=f"{__name__}:EchoClient",
    max_in_flight=2,
    configs={"default": {"data_width": 128}},
)


@pytest.fixture
def echo_registered(monkeypatch):
    monkeypatch.setitem(REGISTRY, "echo", ECHO)
    monkeypatch.setitem(ENGINE_BLOCKS, "echo", ECHO.block)
    monkeypatch.setattr(registry_module, "ALL_BLOCKS", (*ALL_BLOCKS, ECHO.block))
    yield ECHO


def test_a_new_registry_entry_reaches_every_consumer(echo_registered, tmp_path, monkeypatch):
    import ndpkit
    from amaranth.hdl import Fragment
    from ndpkit_hw.device import Device
    from ndpkit_hw.engines import build
    from ndpkit_tools import regs_doc
    from ndpkit_tools.boards import device_options, load_board
    from ndpkit_tools.fusesoc_lint import default_cores

    # the driver on the model card: the engine is found, runs its golden model, errors name arguments
    with ndpkit.open("model", engines=("dma_copy", "echo"), mem_size=1 << 20) as dev:
        assert isinstance(dev.engines["echo"], EchoClient)
        src = dev.upload(np.arange(256, dtype=np.uint8))
        dst = dev.alloc(256)
        done = dev.engines["echo"].copy(dst.address, src.address, 256).wait()
        assert done.ok and done.bytes_written == 256
        assert (dst.download(np.uint8) == np.arange(256)).all()
        with pytest.raises(ndpkit.DeviceError, match="argument 'length'"):
            dev.engines["echo"].copy(dst.address, src.address, 0).wait()
    # the gateware: the top level builds it behind its own front end at its kind's BAR0 block
    assert type(build("echo", data_width=128)).__name__ == "DmaCopy"
    device = Device(data_width=128, mem_size=1 << 20, engines=("dma_copy", "echo"))
    assert device.engines["echo"][0] == 7
    Fragment.get(device, None)
    # the register document, the board builds, FuseSoC's default cores
    assert "echo" in regs_doc.markdown(registry_module.ALL_BLOCKS)
    from ndpkit_tools.boards import BoardError, resources
    with pytest.raises(BoardError, match="engine 'echo' has no implementation figures"):    # the fit check asks
        device_options(load_board("alveo_u280"), engines="dma_copy,echo", memory_ports=2)
    for name in ("TABLE", "DEPTH_TABLE"):                 # once the impl report has measured it
        table = json.loads(getattr(resources, name).read_text())
        table["echo"] = table["dma_copy"]
        figures = tmp_path / getattr(resources, name).name
        figures.write_text(json.dumps(table))
        monkeypatch.setattr(resources, name, figures)
    assert "echo" in device_options(load_board("alveo_u280"), engines="dma_copy,echo", memory_ports=2)["engines"]
    assert "echo" in default_cores()
