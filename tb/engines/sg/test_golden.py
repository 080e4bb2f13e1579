"""The scatter-gather unit's golden model (ndpkit.engines.sg.golden): round trips against NumPy
indexing, traffic counts by hand, and its errors."""
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.sg import golden as sg


@pytest.mark.parametrize("size", [4, 8])
@pytest.mark.parametrize("row_bytes", [2048, 8192])
def test_gather_scatter_round_trip(size, row_bytes):
    seed = 11 * size + row_bytes
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    mem = sg.RowMemory(1 << 18, row_bytes=row_bytes)
    dtype = np.uint32 if size == 4 else np.uint64
    n = 5000
    table = 4096
    ref = rng.integers(0, np.iinfo(dtype).max, n, dtype=dtype)
    mem.data[table:table + n * size] = np.frombuffer(ref.tobytes(), dtype=np.uint8)
    idx = rng.integers(0, n, 3000)
    assert np.array_equal(sg.gather(mem, table, idx, size), ref[idx])
    # scatter with repeats: the last value of a repeated index wins, as NumPy's fancy assignment
    vals = rng.integers(0, np.iinfo(dtype).max, len(idx), dtype=dtype)
    sg.scatter(mem, table, idx, vals, size)
    ref[idx] = vals
    got = np.frombuffer(mem.data[table:table + n * size].tobytes(), dtype=dtype)
    assert np.array_equal(got, ref)
    assert mem.data[:table].sum() == 0 and mem.data[table + n * size:].sum() == 0


def test_counts_by_hand():
    mem = sg.RowMemory(1 << 16, row_bytes=2048, banks=2)
    mem.line_read(0)                                  # row 0, bank 0: activation
    mem.line_read(64)                                 # row 0 open: no activation
    mem.row_gather(2048, 4, [0, 1, 16, 17, 500])      # row 1 (bank 1): columns 0, 0, 1, 1, 31 -> 3 runs
    mem.row_gather(2048, 4, [0, 16, 1])               # columns 0, 1, 0 -> 3 runs, row 1 still open
    mem.row_gather(4096, 8, [0])                      # row 2 (bank 0): closes row 0
    mem.line_read(0)                                  # row 0 again: activation
    c = mem.counters
    assert (c.requests, c.activations, c.column_accesses) == (6, 4, 1 + 1 + 3 + 3 + 1 + 1)
    assert c.link_bytes == 3 * (8 + 64) + (8 + 2 * 5 + 64) + (8 + 2 * 3 + 64) + (8 + 2 + 64)
    assert c.useful_bytes == 8 * 4 + 8


def test_gather_packing():
    mem = sg.RowMemory(8192, row_bytes=2048)
    mem.data[2048:4096] = np.arange(2048) % 251
    line = mem.row_gather(2048, 4, [3, 0])
    assert line[:8] == bytes(mem.data[2048 + 12:2048 + 16]) + bytes(mem.data[2048:2052])
    assert line[8:] == bytes(56)


@pytest.mark.parametrize("call, code, field", [
    (lambda m: m.row_gather(0, 2, [0]), ErrorCode.BAD_FIELD, "size"),
    (lambda m: m.row_gather(0, 4, []), ErrorCode.BAD_FIELD, "count"),
    (lambda m: m.row_gather(0, 8, list(range(9))), ErrorCode.BAD_FIELD, "count"),
    (lambda m: m.row_gather(64, 4, [0]), ErrorCode.UNALIGNED, "row"),
    (lambda m: m.row_gather(8192, 4, [0]), ErrorCode.OUT_OF_WINDOW, "row"),
    (lambda m: m.row_scatter(0, 4, [512], bytes(64)), ErrorCode.BAD_INDEX, "offsets"),
    (lambda m: m.line_read(32), ErrorCode.UNALIGNED, "address"),
    (lambda m: m.line_write(8192, bytes(64)), ErrorCode.OUT_OF_WINDOW, "address"),
    (lambda m: sg.gather(m, 2, [0], 4), ErrorCode.UNALIGNED, "table"),
])
def test_errors_change_nothing(call, code, field):
    mem = sg.RowMemory(8192, row_bytes=2048)
    before = mem.data.copy()
    with pytest.raises(sg.SgError) as e:
        call(mem)
    assert (e.value.code, e.value.field) == (code, field)
    assert np.array_equal(mem.data, before) and mem.counters.requests == 0


def test_grouping_is_row_local_and_stable():
    reqs = sg.group_by_row([4096 + 4, 0, 4096 + 8, 2044, 8], 4, 2048)
    assert [(r, o.tolist(), p.tolist()) for r, o, p in reqs] == [
        (4096, [1, 2], [0, 2]), (0, [0, 2, 511], [1, 4, 3])]
