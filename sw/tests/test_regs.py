"""Register declaration, behavioural model, driver accessors and generated files."""
import re
import shutil
import subprocess

import pytest
from hypothesis import given, strategies as st

from ndpkit_tools import regs_doc as generate
from ndpkit.regs.access import RegisterFile
from ndpkit_spec.registry import ALL_BLOCKS
from ndpkit_spec.engines.dma_copy import BLOCK as DMA_COPY
from ndpkit_spec.regs import Access, Field, Register, RegisterBlock
from ndpkit.regs.model import RegisterModel, UnmappedRegister


def test_declaration_rejects_bad_layouts():
    with pytest.raises(ValueError, match="overlaps"):
        Register("r", 0, [Field("a", 0, 4, Access.RW), Field("b", 3, 2, Access.RW)])
    with pytest.raises(ValueError, match="multiple of 4"):
        Register.single("r", 2, Access.RW)
    with pytest.raises(ValueError, match="does not fit"):
        Field("a", 0, 3, Access.RW, reset=8)
    with pytest.raises(ValueError, match="outside 0..31"):
        Field("a", 30, 4, Access.RW)
    with pytest.raises(ValueError, match="lower_snake_case"):
        Field("Bad", 0, 1, Access.RW)
    with pytest.raises(ValueError, match="two registers at offset"):
        RegisterBlock("b", [Register.single("x", 0, Access.RW), Register.single("y", 0, Access.RO)])
    with pytest.raises(ValueError, match="power of two"):
        RegisterBlock("b", [Register.single("x", 0x10, Access.RW)], size=0x10)
    with pytest.raises(ValueError, match="no reset"):
        Field("p", 0, 1, Access.W1S, reset=1)


def test_block_size_covers_registers():
    block = RegisterBlock("b", [Register.single("x", 0x24, Access.RW)])
    assert block.size == 0x40 and block.addr_width == 6


def test_model_semantics():
    block = RegisterBlock("b", [
        Register("ctrl", 0, [Field("en", 0, 1, Access.RW, reset=1), Field("go", 1, 1, Access.W1S),
                             Field("hi", 8, 8, Access.RW, reset=0xAB)]),
        Register("st", 4, [Field("busy", 0, 1, Access.RO), Field("done", 4, 2, Access.W1C)]),
        Register.single("last", 0xC, Access.RW),
    ])
    model = RegisterModel(block)
    assert model.read(0) == 0xAB01
    assert model.write(0, 0x0002) == {"ctrl_go": 1}          # pulse, and en cleared by the full write
    assert model.read(0) == 0x0000
    model.write(0, 0xFF00, strb=0b0010)                        # only byte 1
    assert model.read(0) == 0xFF00
    model.set_input("st", "busy", 1)
    model.set_bits("st", "done", 0b11)
    assert model.read(4) == 0x31
    model.write(4, 0x10)                                       # clear done[0] only; busy is RO
    assert model.read(4) == 0x21
    with pytest.raises(UnmappedRegister):
        model.read(8)                                          # a hole in the map
    assert model.read(0x10) == model.read(0)                   # decoded within the 16-byte window
    with pytest.raises(ValueError, match="not RO"):
        model.set_input("ctrl", "en", 1)


def test_register_file_merges_fields():
    model = RegisterModel(DMA_COPY)
    writes = []

    def write32(addr, value):
        writes.append((addr, value))
        model.write(addr, value)

    regs = RegisterFile(DMA_COPY, model.read, write32, base=0)
    regs.write("src", 0x1000)
    assert regs.read("src") == 0x1000
    regs.write("irq_enable", done=1)
    regs.write("irq_enable", overflow=1)                       # keeps done: read-modify-write
    assert regs.fields("irq_enable") == {"done": 1, "overflow": 1}
    regs.write("doorbell", submit=1)
    assert writes[-1] == (DMA_COPY.register("doorbell").offset, 1)
    with pytest.raises(ValueError, match="read-only"):
        regs.write("status", busy=1)
    with pytest.raises(KeyError, match="no field"):
        regs.write("doorbell", begin=1)
    with pytest.raises(ValueError, match="does not fit"):
        regs.write("doorbell", submit=2)
    with pytest.raises(KeyError, match="no register"):
        regs.read("nope")


@given(st.integers(0, 2**32 - 1), st.integers(0, 15))
def test_model_rw_register_honours_strobes(value, strb):
    block = RegisterBlock("b", [Register.single("x", 0, Access.RW, reset=0x5A5A5A5A)])
    model = RegisterModel(block)
    model.write(0, value, strb)
    mask = sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)
    assert model.read(0) == (0x5A5A5A5A & ~mask) | (value & mask)


def test_generated_files_are_current():
    for path, text in generate.outputs().items():
        assert path.exists() and path.read_text() == text, f"{path} is stale: run `make regs`"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_c_header_compiles_and_matches(tmp_path):
    src = tmp_path / "t.c"
    checks = []
    for b in ALL_BLOCKS:
        for r in b.registers:
            name = f"NDPKIT_{b.name.upper()}_{r.name.upper()}"
            checks.append(f'printf("%u %u\\n", {name}_OFFSET, {name}_RESET);')
    src.write_text('#include <stdio.h>\n#include "ndpkit_regs.h"\nint main(void){' + "".join(checks) + "return 0;}\n")
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-Wall", "-Werror", "-I", str(generate.header_path().parent), str(src), "-o", str(exe)],
                   check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    expected = [f"{r.offset} {r.reset}" for b in ALL_BLOCKS for r in b.registers]
    assert lines[:len(expected)] == expected


def test_markdown_lists_every_field():
    text = generate.markdown(ALL_BLOCKS)
    for b in ALL_BLOCKS:
        for r in b.registers:
            for f in r.fields:
                assert re.search(rf"\| {f.name} \|", text)
