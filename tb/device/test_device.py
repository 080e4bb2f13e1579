"""Device-level suite: public API -> transport -> device, on the model and on the sim card.

Every buffer a command may touch sits between guard regions filled with random
bytes; every test checks the guards afterwards, so a write outside the command's
destination fails the test.
"""
import pytest

import ndpkit
from ndpkit_spec.registry import REGISTRY
from ndpkit import DeviceError, ErrorCode, RegisterAccessError
from ndpkit_spec.shell import ENGINE_STRIDE, GLOBAL, NDPKIT_MAGIC, VERSION

GUARD = 4096


class Guarded:
    """``size`` bytes of card memory with random guard regions on both sides."""

    def __init__(self, dev, size, rng, fill=True):
        self.dev, self.size = dev, size
        self.outer = dev.alloc(size + 2 * GUARD, align=GUARD)
        self.address = self.outer.address + GUARD
        self.guards = rng.randbytes(GUARD), rng.randbytes(GUARD)
        self.outer.write(self.guards[0], 0)
        self.outer.write(self.guards[1], GUARD + size)
        self.contents = rng.randbytes(size) if fill else bytes(size)
        self.outer.write(self.contents, GUARD)

    def read(self):
        return self.outer.read(self.size, GUARD)

    def check_guards(self):
        assert self.outer.read(GUARD, 0) == self.guards[0], "guard below the buffer was written"
        assert self.outer.read(GUARD, GUARD + self.size) == self.guards[1], "guard above the buffer was written"


def test_identity_and_build_parameters(dev):
    info = dev.info()
    assert dev.shell.read("id") == NDPKIT_MAGIC
    assert info["version"] == f"{VERSION[0]}.{VERSION[1]}"
    # a default model card carries every engine; the default sim card only dma_copy (each
    # engine a card carries is minutes more of Verilator build)
    assert info["engines"] == (["dma_copy"] if dev.transport.kind == "sim" else list(REGISTRY))
    assert dev.word_bytes == 64 and dev.queue_depth == 4 and dev.clock_mhz == 250
    assert dev.mem_size == 16 << 20 and dev.mem_base == 0
    assert dev.engine("dma_copy").regs.read("kind") == ndpkit.EngineKind.DMA_COPY


def test_scratch_and_cycle_counter(dev, rng):
    value = rng.getrandbits(32)
    dev.shell.write("scratch", value)
    assert dev.shell.read("scratch") == value
    first = dev.cycles()
    second = dev.cycles()
    assert second > first


def test_copy_random_sizes_with_guards(dev, rng):
    word = dev.word_bytes
    for _ in range(6):
        length = rng.randrange(1, 200) * word
        src, dst = Guarded(dev, length, rng), Guarded(dev, length, rng, fill=False)
        done = dev.copy(dst.address, src.address, length)
        assert done.ok and done.bytes_read == length and done.bytes_written == length
        assert dst.read() == src.contents
        assert src.read() == src.contents
        src.check_guards()
        dst.check_guards()


def test_fill_pattern(dev, rng):
    length = rng.randrange(1, 100) * dev.word_bytes
    dst = Guarded(dev, length, rng)
    pattern = rng.getrandbits(32)
    done = dev.fill(dst.address, pattern, length)
    assert done.ok and done.bytes_read == 0 and done.bytes_written == length
    assert dst.read() == pattern.to_bytes(4, "little") * (length // 4)
    dst.check_guards()


def test_numpy_round_trip_and_buffers(dev):
    import numpy as np
    data = np.arange(12345, dtype=np.float32)
    src = dev.upload(data)
    dst = dev.alloc(src.size)
    dev.copy(dst, src)
    assert np.array_equal(dst.download(np.float32, count=data.size), data)
    with pytest.raises(ValueError, match="nbytes"):
        dev.copy(dst, src, src.size + dev.word_bytes)


@pytest.mark.parametrize("case", ["unaligned_src", "unaligned_dst", "unaligned_length", "zero_length",
                                  "dst_past_end", "src_past_end", "huge_length", "overlap"])
def test_bad_copy_is_rejected_and_writes_nothing(dev, rng, case):
    word = dev.word_bytes
    length = 16 * word
    src, dst = Guarded(dev, length, rng), Guarded(dev, length, rng)
    end = dev.mem_base + dev.mem_size
    args, code, field = {
        "unaligned_src": ((dst.address, src.address + 4, length), ErrorCode.UNALIGNED, "src"),
        "unaligned_dst": ((dst.address + 8, src.address, length), ErrorCode.UNALIGNED, "dst"),
        "unaligned_length": ((dst.address, src.address, length - 4), ErrorCode.UNALIGNED, "length"),
        "zero_length": ((dst.address, src.address, 0), ErrorCode.ZERO_LENGTH, "length"),
        "dst_past_end": ((end - word, src.address, length), ErrorCode.OUT_OF_WINDOW, "dst"),
        "src_past_end": ((dst.address, end - word, length), ErrorCode.OUT_OF_WINDOW, "src"),
        "huge_length": ((dst.address, src.address, 0xFFFF_FFC0), ErrorCode.OUT_OF_WINDOW, "dst"),
        "overlap": ((src.address + word, src.address, length), ErrorCode.OVERLAP, "dst"),
    }[case]
    with pytest.raises(DeviceError) as err:
        dev.copy(*args)
    assert err.value.code == code and err.value.field == field and err.value.engine == "dma_copy"
    assert dst.read() == dst.contents and src.read() == src.contents
    src.check_guards()
    dst.check_guards()
    # the next good command works
    assert dev.copy(dst.address, src.address, length).ok
    assert dst.read() == src.contents


def test_bad_opcode_at_the_registers(dev, rng):
    client = dev.engine("dma_copy")
    dst = Guarded(dev, 1024, rng)
    cmd = client.submit({"op": 7, "src": 0, "dst": dst.address, "length": 1024, "pattern": 0})
    done = cmd.wait(check=False)
    assert done.error == ErrorCode.BAD_OPCODE and done.bytes_written == 0
    with pytest.raises(DeviceError, match="BAD_OPCODE"):
        client.submit({"op": 2, "src": 0, "dst": dst.address, "length": 1024, "pattern": 0}).wait()
    dst.check_guards()
    assert dst.read() == dst.contents


def test_unmapped_registers_answer_errors(dev):
    with pytest.raises(RegisterAccessError) as err:
        dev.transport.read32(0x0F00)              # inside the shell block, no register
    assert err.value.resp == 2
    with pytest.raises(RegisterAccessError) as err:
        dev.transport.write32(ENGINE_STRIDE + 0xFFC, 1)   # reserved offset in the engine block
    assert err.value.resp == 2 and err.value.write
    with pytest.raises(RegisterAccessError) as err:
        dev.transport.read32(7 * ENGINE_STRIDE)    # no engine there
    assert err.value.resp == 3
    # read-only registers ignore writes
    dev.transport.write32(GLOBAL.register("id").offset, 0)
    assert dev.shell.read("id") == NDPKIT_MAGIC


def test_queue_overflow_drops_only_the_extra_command(dev, rng):
    """Ring more doorbells than the engine and its queue can hold, directly at the registers."""
    client = dev.engine("dma_copy")
    regs = client.regs
    length = 256 << 10              # long enough that none finishes while we ring
    src = Guarded(dev, length, rng)
    dsts = [Guarded(dev, length, rng, fill=False) for _ in range(dev.queue_depth + 3)]
    regs.write("irq", 0b11)
    for reg, value in (("op", 0), ("src", src.address), ("length", length)):
        regs.write(reg, value)
    capacity = dev.queue_depth + 2  # queued + the two in the engine
    for tag, dst in enumerate(dsts):
        regs.write("dst", dst.address)
        regs.write("tag", 100 + tag)
        regs.write("doorbell", 1)
    assert regs.field("irq", "overflow") == 1
    tags = []
    for _ in range(200):
        status = regs.fields("cpl_status")
        if status["valid"]:
            assert status["error"] == 0
            tags.append(status["tag"])
            regs.write("cpl_pop", 1)
        elif len(tags) == capacity:
            break
        else:
            dev.transport.wait_irq(1 << client.kind, 0.01)
            regs.write("irq", done=1)
    assert tags == [100 + i for i in range(capacity)]
    for i, dst in enumerate(dsts):
        assert dst.read() == (src.contents if i < capacity else dst.contents)
        dst.check_guards()
    regs.write("irq", 0b11)
    assert regs.fields("status")["busy"] == 0


def test_many_queued_commands_through_the_driver(dev, rng):
    length = 8 * dev.word_bytes
    src = Guarded(dev, 32 * length, rng)
    dst = Guarded(dev, 32 * length, rng, fill=False)
    commands = [dev.copy(dst.address + i * length, src.address + i * length, length, wait=False)
                for i in range(32)]
    results = [c.wait() for c in commands]
    assert [r.tag for r in results] == [c.tag for c in commands]
    assert dst.read() == src.contents
    dst.check_guards()


def test_interrupt_mask_and_status(dev, rng):
    client = dev.engine("dma_copy")
    dst = Guarded(dev, 1024, rng)
    dev.shell.write("irq_mask", lines=0)
    cmd = dev.fill(dst.address, 0x12345678, 1024, wait=False)
    assert dev.transport.wait_irq(1 << client.kind, 0.0001) == 0       # masked: the line stays low
    assert dev.shell.field("irq_status", "lines") & (1 << client.kind)  # but the status shows it
    dev.shell.write("irq_mask", lines=1 << client.kind)
    assert dev.transport.wait_irq(1 << client.kind, 0.001) == 1 << client.kind
    assert cmd.wait().ok
    dst.check_guards()


def test_soft_reset_recovers_the_engines(dev, rng):
    length = 64 << 10
    src = Guarded(dev, length, rng)
    dsts = [Guarded(dev, length, rng, fill=False) for _ in range(3)]
    client = dev.engine("dma_copy")
    for dst in dsts:
        client.copy(dst.address, src.address, length)
    dev.soft_reset()
    assert dev.shell.field("reset_status", "pending") == 0
    status = client.regs.fields("status")
    assert status["busy"] == 0 and status["completions"] == 0
    # the two commands the engine had taken finished whole; the queued one never ran
    assert [dst.read() == src.contents for dst in dsts] == [True, True, False]
    assert dsts[2].read() == dsts[2].contents
    for dst in dsts:
        dst.check_guards()
    # and the engine works again
    assert dev.copy(dsts[2].address, src.address, length).ok
    assert dsts[2].read() == src.contents


def test_batch_holds_commands_then_starts_them_together(dev, rng):
    length = 16 << 10
    src = Guarded(dev, length, rng)
    dsts = [Guarded(dev, length, rng, fill=False) for _ in range(dev.queue_depth)]
    client = dev.engine("dma_copy")
    with dev.batch():
        cmds = [dev.copy(d.address, src.address, length, wait=False) for d in dsts]
        status = client.regs.fields("status")
        assert status["queued"] == dev.queue_depth and status["completions"] == 0
        assert all(d.read() == d.contents for d in dsts)          # nothing ran yet
        with pytest.raises(ndpkit.NdpkitError, match="batch holds at most"):
            dev.copy(dsts[0].address, src.address, length, wait=False)
    done = [c.wait() for c in cmds]
    assert all(d.ok for d in done)
    for d in dsts:
        assert d.read() == src.contents
        d.check_guards()


def test_global_irq_clear_and_timeout(dev, rng):
    client = dev.engine("dma_copy")
    kind = client.kind
    dst = Guarded(dev, 4096, rng)
    cmd = dev.fill(dst.address, 0xABCD0123, 4096, wait=False)
    dev.transport.wait_irq(1 << kind, 0.001)
    assert dev.shell.field("irq_status", "lines") >> kind & 1
    dev.shell.write("irq_clear", lines=1 << kind)          # the shell clears the engine's bits
    assert client.regs.fields("irq") == {"done": 0, "overflow": 0}
    assert not dev.shell.field("irq_status", "lines") >> kind & 1
    assert cmd.wait().ok                                   # the completion itself is still queued
    # a masked line never fires: waiting gives DeviceTimeout, not a hang; unmasked, it completes
    # (the model runs a command the moment the host looks, so only the card can time out)
    big = 1 << 20
    src, out = dev.alloc(big), dev.alloc(big)
    dev.shell.write("irq_mask", lines=0)
    cmd = dev.copy(out, src, wait=False)
    if dev.transport.kind == "sim":
        with pytest.raises(ndpkit.DeviceTimeout):
            cmd.wait(timeout=1e-5)
    dev.shell.write("irq_mask", lines=1 << kind)
    assert cmd.wait().ok
    dst.check_guards()
