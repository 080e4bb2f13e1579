"""Driver of the ``sg`` engine: ``dev.sg.gather`` / ``dev.sg.scatter`` of 4- or 8-byte
elements of a card table at arbitrary indices, and ``dev.sg.run`` for a raw batch of
descriptors.

The **driver** groups indices by DRAM row (``ndpkit.engines.sg.golden.group_by_row``: rows in
order of first appearance, elements within a row sorted by address so each column
is read or written once, at most 64 bytes of elements per request), builds the
descriptor table in card memory, runs one command per batch and unpacks the packed
responses back into index order.  A repeated index in a scatter keeps its last value.
"""
from __future__ import annotations

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.engine import Command, EngineClient
from ndpkit.engines.sg import golden
from ndpkit.memory import Buffer, address_of

__all__ = ["SgClient"]

MAX_REQUESTS = 1 << 16           # descriptors per command (8 MiB of table at most)


class SgClient(EngineClient):
    name = "sg"
    row_bytes = golden.DEVICE_ROW_BYTES

    def blame_run(self, args, code):
        if code in (ErrorCode.BAD_FIELD, ErrorCode.BAD_INDEX, ErrorCode.UNALIGNED, ErrorCode.OUT_OF_WINDOW):
            return "table"        # one of the descriptors (its own checks)
        return None

    def run(self, op: int, table, requests: int, out=None, *, wait: bool = True):
        """One command over ``requests`` descriptors at ``table`` (see
        :func:`ndpkit.engines.sg.golden.pack_descriptor`); reads answer into ``out``.  Returns
        the Completion (``aux`` = link bytes) or, with ``wait=False``, the Command."""
        args = {"op": int(op), "table": address_of(table, "table"), "requests": int(requests),
                "out": address_of(out, "out") if out is not None else 0}
        cmd = self.submit(args, work_bytes=int(requests) * (golden.DESCRIPTOR_BYTES + golden.LINE))
        return cmd.wait() if wait else cmd

    def _elements(self, table, indices, dtype):
        if not isinstance(table, Buffer):
            raise TypeError(f"table must be a Buffer, not {type(table).__name__}")
        dtype = np.dtype(dtype)
        if dtype.itemsize not in (4, 8):
            raise ValueError(f"dtype: elements of 4 or 8 bytes, not {dtype} ({dtype.itemsize} bytes)")
        if table.address % dtype.itemsize:
            raise ValueError(f"table: address {table.address:#x} is not aligned to its {dtype.itemsize}-byte elements")
        idx = np.asarray(indices)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise TypeError("indices must be a one-dimensional integer array")
        n = table.size // dtype.itemsize
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            raise IndexError(f"indices: indices[{int(bad[0])}] = {int(idx[bad[0]])} is outside the "
                             f"{n}-element table")
        return dtype, idx.astype(np.int64)

    def _batches(self, op, table, idx, size, values=None):
        """(descriptor bytes, requests, positions per request) per command."""
        requests = golden.group_by_row(table.address + idx * size, size, self.row_bytes)
        gop = golden.Op.ROW_GATHER if op == golden.OP_READ else golden.Op.ROW_SCATTER
        for start in range(0, len(requests), MAX_REQUESTS):
            chunk = requests[start:start + MAX_REQUESTS]
            raw = b"".join(golden.pack_descriptor(gop, row, size=size, offsets=offs,
                                                  data=b"" if values is None else values[pos].tobytes())
                           for row, offs, pos in chunk)
            yield raw, chunk

    def gather(self, table, indices, dtype=np.float32) -> np.ndarray:
        """``table[indices]`` for a card Buffer of ``dtype`` elements (4 or 8 bytes)."""
        dtype, idx = self._elements(table, indices, dtype)
        out = np.zeros(len(idx), dtype=dtype)
        size = dtype.itemsize
        region = self.device.region_of(table)      # the descriptors beside the table, where an instance works
        for raw, chunk in self._batches(golden.OP_READ, table, idx, size):
            desc = self.device.upload(raw, region=region)
            resp = self.device.alloc(len(chunk) * golden.LINE, region=region)
            try:
                self.run(golden.OP_READ, desc, len(chunk), resp)
                lines = resp.download(dtype).reshape(len(chunk), golden.LINE // size)
            finally:
                desc.free()
                resp.free()
            for i, (_, _, pos) in enumerate(chunk):
                out[pos] = lines[i, :len(pos)]
        return out

    def scatter(self, table, indices, values) -> None:
        """``table[indices] = values`` (the values' dtype gives the element size); a
        repeated index keeps its last value."""
        values = np.ascontiguousarray(values)
        dtype, idx = self._elements(table, indices, values.dtype)
        if values.shape != idx.shape:
            raise ValueError(f"values: shape {values.shape} does not match indices {idx.shape}")
        region = self.device.region_of(table)
        for raw, chunk in self._batches(golden.OP_WRITE, table, idx, dtype.itemsize, values):
            desc = self.device.upload(raw, region=region)
            try:
                self.run(golden.OP_WRITE, desc, len(chunk))
            finally:
                desc.free()
