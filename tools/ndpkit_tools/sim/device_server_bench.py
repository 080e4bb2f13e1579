"""cocotb side of the sim transport: serve one host connection against ``SimCard``.

The host (``ndpkit.transport.sim``) listens on a Unix socket and starts this bench;
the bench connects and answers requests (:mod:`ndpkit.transport.sim_protocol`) until SHUTDOWN
or until the host goes away.  Simulation time advances only inside requests: a
register access costs its AXI4-Lite cycles plus the PCIe link's latency, a host DMA
the link model's transfer time (the data itself goes through the memory model's
backdoor, no per-beat Python, unless the server runs with ``dma="axi"``, which
drives the real ``s_axi`` port with cocotbext-axi), and WAIT_IRQ runs until a line
rises or the cycle budget is spent.  Engines run concurrently with all of it.
"""
import json
import os
import socket
import struct
import time

import cocotb
from cocotb.triggers import First, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster

from ndpkit.pcie import PcieLink, StorageLink
from ndpkit_tools.sim.bench import BulkBackdoor, RegionBackdoor, bench_params, start_clock_and_reset
from ndpkit.transport.sim_protocol import Op, Status, recv_frame, send_frame

PERIOD_NS = 10      # the simulator's clock period (a cycle is a cycle; the nominal MHz is a register)


class _Server:
    def __init__(self, dut, params):
        self.dut, self.p = dut, params
        self.word = params["data_width"] // 8
        self.base, self.size = params["mem_base"], params["mem_size"]
        self.link = PcieLink(**params["link"])
        self.storage = StorageLink(**params.get("storage", {}))
        self.clock_mhz = params["clock_mhz"]
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.axi = (AxiMaster(AxiBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
                    if params["dma"] == "axi" else None)
        ports = params.get("memory_ports", 1)
        if ports == 1:
            self.memory = BulkBackdoor(dut.memory.storage, dut.clk, self.word, self.base)
        else:          # one memory model per region (ndpkit_hw.sim_card)
            size = self.size // ports
            self.memory = RegionBackdoor(
                (self.base + p * size, size,
                 BulkBackdoor(getattr(dut, f"memory{p}").storage, dut.clk, self.word, self.base + p * size))
                for p in range(ports))
        self.reset_time = 0

    def cycles(self) -> int:
        return int(get_sim_time("ns") - self.reset_time) // PERIOD_NS

    async def run(self, cycles: int):
        if cycles > 0:
            await Timer(cycles * PERIOD_NS, "ns")
            await RisingEdge(self.dut.clk)

    async def link_delay(self, ns: float):
        await self.run(self.link.to_cycles(ns, self.clock_mhz))

    def set_memory(self, cfg: dict):
        d = self.dut
        if "read_latency" in cfg:
            d.mem_read_latency.value = int(cfg["read_latency"])
        if "write_latency" in cfg:
            d.mem_write_latency.value = int(cfg["write_latency"])
        if "error_base" in cfg:
            d.mem_error_base.value = int(cfg["error_base"])
        if "error_size" in cfg:
            d.mem_error_size.value = int(cfg["error_size"])
        if "error_resp" in cfg:
            if cfg["error_resp"] not in ("SLVERR", "DECERR"):
                raise ValueError(f"error_resp must be 'SLVERR' or 'DECERR', not {cfg['error_resp']!r}")
            d.mem_error_decerr.value = int(cfg["error_resp"] == "DECERR")

    def _check_range(self, address, length):
        if length < 0 or address < self.base or address + length > self.base + self.size:
            raise _DmaRangeError(f"card range [{address:#x}, {address + length:#x}) is outside card memory "
                                 f"[{self.base:#x}, {self.base + self.size:#x})")

    def _words(self, address, length):
        """The whole-word span around [address, address + length)."""
        first = address - (address - self.base) % self.word
        end = address + length
        return first, end + (-(end - self.base)) % self.word

    async def backdoor_write(self, address, data):
        first, last = self._words(address, len(data))
        if first != address or last != address + len(data):    # partial edge words: read-modify-write
            current = bytearray(await self.memory.read(first, last - first))
            current[address - first:address - first + len(data)] = data
            data = bytes(current)
        await self.memory.write(first, data)

    async def backdoor_read(self, address, length):
        first, last = self._words(address, length)
        return (await self.memory.read(first, last - first))[address - first:address - first + length]

    async def handle(self, op, payload):
        """(status, payload) for one request."""
        if op == Op.HELLO:
            return Status.OK, json.dumps(self.p).encode()
        if op == Op.READ32:
            (address,) = struct.unpack("<Q", payload)
            result = await self.axil.read(address, 4)
            await self.link_delay(self.link.read_latency_ns)
            if int(result.resp):
                return Status.AXI_ERROR, bytes([int(result.resp)])
            return Status.OK, struct.pack("<I", int.from_bytes(result.data, "little"))
        if op == Op.WRITE32:
            address, value = struct.unpack("<QI", payload)
            await self.link_delay(self.link.write_latency_ns)
            result = await self.axil.write(address, value.to_bytes(4, "little"))
            if int(result.resp):
                return Status.AXI_ERROR, bytes([int(result.resp)])
            return Status.OK, b""
        if op == Op.DMA_WR:
            (address,), data = struct.unpack("<Q", payload[:8]), payload[8:]
            self._check_range(address, len(data))
            if self.axi is not None:
                result = await self.axi.write(address, data)
                if int(result.resp):
                    return Status.AXI_ERROR, bytes([int(result.resp)])
            else:
                await self.backdoor_write(address, data)
                await self.link_delay(self.link.h2c_ns(len(data)))
            return Status.OK, b""
        if op == Op.DMA_RD:
            address, length = struct.unpack("<QQ", payload)
            self._check_range(address, length)
            if self.axi is not None:
                result = await self.axi.read(address, length)
                if int(result.resp):
                    return Status.AXI_ERROR, bytes([int(result.resp)])
                return Status.OK, bytes(result.data)
            await self.link_delay(self.link.c2h_ns(length))
            return Status.OK, await self.backdoor_read(address, length)
        if op == Op.P2P_WR:
            # the SSD's writes: backdoor data, time charged on the storage link (the
            # engines run meanwhile); the host link carries nothing
            (address,), data = struct.unpack("<Q", payload[:8]), payload[8:]
            self._check_range(address, len(data))
            await self.backdoor_write(address, data)
            await self.run(self.link.to_cycles(self.storage.transfer_ns(len(data)), self.clock_mhz))
            return Status.OK, b""
        if op == Op.P2P_RD:
            address, length = struct.unpack("<QQ", payload)
            self._check_range(address, length)
            await self.run(self.link.to_cycles(self.storage.transfer_ns(length), self.clock_mhz))
            return Status.OK, await self.backdoor_read(address, length)
        if op == Op.WAIT_IRQ:
            mask, budget, wall = struct.unpack("<IQd", payload)
            start = self.cycles()
            deadline = time.monotonic() + wall
            irq = self.dut.usr_irq_req
            while True:
                lines = int(irq.value) & mask
                waited = self.cycles() - start
                if lines or waited >= budget or time.monotonic() > deadline:
                    return Status.OK, struct.pack("<IQ", lines, waited)
                chunk = min(budget - waited, 20000)
                await First(irq.value_change, Timer(chunk * PERIOD_NS, "ns"))
                await RisingEdge(self.dut.clk)
        if op == Op.CYCLES:
            return Status.OK, struct.pack("<Q", self.cycles())
        if op == Op.RUN:
            (cycles,) = struct.unpack("<Q", payload)
            await self.run(cycles)
            return Status.OK, b""
        if op == Op.MEMORY:
            self.set_memory(json.loads(payload))
            return Status.OK, b""
        return Status.BAD_REQUEST, f"unknown op {op}".encode()


class _DmaRangeError(Exception):
    pass


@cocotb.test()
async def serve(dut):
    params = bench_params()
    server = _Server(dut, params)
    server.set_memory({"read_latency": params["read_latency"], "write_latency": params["write_latency"],
                       "error_base": 0, "error_size": 0, "error_resp": "SLVERR"})
    dut.usr_irq_ack.value = 0
    await start_clock_and_reset(dut)
    server.reset_time = get_sim_time("ns")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["NDP_SOCKET"])
    try:
        while True:
            try:
                op, payload = recv_frame(sock)
            except ConnectionError:
                dut._log.info("host closed the connection")
                return
            if op == Op.SHUTDOWN:
                send_frame(sock, Status.OK)
                return
            try:
                status, reply = await server.handle(op, payload)
            except _DmaRangeError as e:
                status, reply = Status.DMA_ERROR, str(e).encode()
            except (struct.error, ValueError, KeyError) as e:
                status, reply = Status.BAD_REQUEST, f"{type(e).__name__}: {e}".encode()
            try:
                send_frame(sock, status, reply)
            except OSError:
                dut._log.info("host went away mid-reply")
                return
    finally:
        sock.close()
