"""Device benchmark (part of `make perf`): the dma_copy engine and the host link, on
the simulated card through the public driver API.

1. Copy efficiency = bytes copied per cycle / the memory port's peak (one bus word
   per cycle per direction), at memory latencies of 64 and 200 cycles, per size:
   - ``single``: one command, from the engine taking it to its completion
     (``cpl_cycles``): includes one memory round trip;
   - ``batch``: a full queue (16 commands) released at once (``Device.batch``), from
     the first start to the last completion (``cpl_start`` + ``cpl_cycles``): what
     the engine sustains on back-to-back commands;
   - ``driver loop``: the same commands submitted one after another while earlier
     ones run (register writes and completion reads over the modelled link in
     between): what a simple host loop gets.
2. Host DMA over the modelled PCIe link (Gen3 x16 by default): the device cycles
   the sim transport charged, as GB/s at the nominal clock, against the link's
   payload peak.
3. Simulation speed: device cycles per wall second while the engine copies, and
   host-DMA MB/s of wall time through the sim transport.

Prints tables and writes build/perf/device_copy.json.  QUICK=1 trims the sizes.
MEMORY=hbm2_pc (or ddr4_2400): the copies and host DMA on that DRAM preset
(build/perf/device_copy-<preset>.json).
"""
from __future__ import annotations

import json
import os
import time

import ndpkit
from ndpkit_tools.paths import build_root

OUT = build_root() / "perf" / "device_copy.json"
BOARD_MHZ = 200         # the Alveo and SmartSSD builds' engine clock


def memory_main(memory: str, sizes, dma_sizes) -> int:
    """The copies and host DMA on a DRAM preset (``MEMORY=hbm2_pc``): the copy's bytes
    read and written a cycle against the channel's peak, both directions on one bus."""
    from ndpkit_spec.dram import preset
    out = OUT.with_name(f"device_copy-{memory}.json")
    # at the board builds' engine clock, as the other engines' preset runs
    with ndpkit.open(f"sim?mem_size=32M&queue_depth=16&memory={memory}&clock_mhz={BOARD_MHZ}") as dev:
        rows = copy_efficiency(dev, sizes, None, memory)
        dma = host_dma(dev, dma_sizes)
        clock, word_bytes = dev.clock_mhz, dev.word_bytes
    peak = preset(memory).peak_bytes_per_cycle(clock)      # the channel, bytes a device cycle
    for r in rows:
        for mode in ("single", "batch", "driver_loop"):
            r[f"{mode}_of_memory"] = 2 * r["bytes"] * (r["commands"] if mode != "single" else 1) \
                / r[f"{mode}_cycles"] / peak
    print(f"\ndma_copy on {memory} ({peak:.1f} B per {clock} MHz cycle, reads and writes on one bus): "
          "bytes/cycle of the port's one direction, and bytes read + written of the channel's peak")
    print(f"{'bytes':>9} {'single cyc':>11} {'single':>7} {'batch cyc':>10} {'batch':>7} {'of memory':>10} "
          f"{'loop cyc':>10} {'loop':>7}")
    for r in rows:
        print(f"{r['bytes']:>9} {r['single_cycles']:>11} {r['single_efficiency']:>7.3f} {r['batch_cycles']:>10} "
              f"{r['batch_efficiency']:>7.3f} {r['batch_of_memory']:>10.3f} {r['driver_loop_cycles']:>10} "
              f"{r['driver_loop_efficiency']:>7.3f}")
    print(f"host DMA into {memory}: " + ", ".join(f"{r['bytes']} B H2C {r['h2c_gbps']:.2f} C2H {r['c2h_gbps']:.2f} GB/s"
                                                 for r in dma))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"copy": rows, "host_dma": dma, "memory": memory, "clock_mhz": clock,
                               "memory_bytes_per_cycle": peak, "word_bytes": word_bytes}, indent=2))
    print(f"wrote {out}")
    return 0


def _span(done):
    """Cycles from the first command's start to the last one's completion."""
    return (done[-1].start + done[-1].cycles - done[0].start) & 0xFFFF_FFFF


def copy_efficiency(dev, sizes, latency, memory=None):
    """``latency``: the ideal memory's (cycles), or None on a DRAM preset ``memory``."""
    if memory is None:
        dev.transport.set_memory(read_latency=latency, write_latency=latency)
    port, count = dev.word_bytes, dev.queue_depth
    rows = []
    src = dev.alloc(max(sizes) * count)
    dst = dev.alloc(max(sizes) * count)
    for size in sizes:
        single = dev.copy(dst, src, size)
        with dev.batch():           # queued while held, released together: the engine's own rate
            cmds = [dev.copy(dst.address + i * size, src.address + i * size, size, wait=False)
                    for i in range(count)]
        batch = _span([c.wait() for c in cmds])
        # the driver submitting as it goes (register writes and completion reads in between)
        cmds = [dev.copy(dst.address + i * size, src.address + i * size, size, wait=False) for i in range(count)]
        loop = _span([c.wait() for c in cmds])
        rows.append({"latency": latency if memory is None else memory, "bytes": size, "commands": count, "single_cycles": single.cycles,
                     "single_efficiency": size / single.cycles / port,
                     "batch_cycles": batch, "batch_efficiency": count * size / batch / port,
                     "driver_loop_cycles": loop, "driver_loop_efficiency": count * size / loop / port})
    src.free()
    dst.free()
    return rows


def host_dma(dev, sizes):
    link = dev.transport.link
    rows = []
    buf = dev.alloc(max(sizes))
    for size in sizes:
        payload = os.urandom(size)
        c0 = dev.transport.cycles()
        t0 = time.perf_counter()
        buf.write(payload)
        c1 = dev.transport.cycles()
        t1 = time.perf_counter()
        back = buf.read(size)
        c2 = dev.transport.cycles()
        t2 = time.perf_counter()
        assert back == payload
        ns_per_cycle = 1000 / dev.clock_mhz
        rows.append({"bytes": size,
                     "h2c_gbps": size / ((c1 - c0) * ns_per_cycle), "c2h_gbps": size / ((c2 - c1) * ns_per_cycle),
                     "link_peak_gbps": link.peak_bytes_per_ns,
                     "wall_h2c_mbps": size / (t1 - t0) / 1e6, "wall_c2h_mbps": size / (t2 - t1) / 1e6})
    buf.free()
    return rows


def sim_speed(dev, size):
    src, dst = dev.alloc(size), dev.alloc(size)
    c0, t0 = dev.transport.cycles(), time.perf_counter()
    dev.copy(dst, src)
    c1, t1 = dev.transport.cycles(), time.perf_counter()
    src.free()
    dst.free()
    return {"cycles": c1 - c0, "seconds": t1 - t0, "cycles_per_second": (c1 - c0) / (t1 - t0)}


def main() -> int:
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    sizes = [4 << 10, 64 << 10, 256 << 10] if quick else [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
    dma_sizes = [4 << 10, 1 << 20] if quick else [4 << 10, 64 << 10, 1 << 20, 8 << 20]
    memory = os.environ.get("MEMORY") or None
    if memory:
        return memory_main(memory, sizes, dma_sizes)
    with ndpkit.open("sim?mem_size=32M&queue_depth=16") as dev:
        rows = copy_efficiency(dev, sizes, 64) + copy_efficiency(dev, sizes, 200)
        dma = host_dma(dev, dma_sizes)
        dev.transport.set_memory(read_latency=64, write_latency=64)
        speed = sim_speed(dev, (1 << 20) if quick else (4 << 20))
        link = dev.transport.link.describe()
        word_bytes = dev.word_bytes
    print(f"\ndma_copy efficiency (bytes/cycle / {word_bytes} B port peak)")
    print(f"{'latency':>8} {'bytes':>9} {'single cyc':>11} {'single':>7} {'batch cyc':>10} {'batch':>7} "
          f"{'loop cyc':>10} {'loop':>7}")
    for r in rows:
        print(f"{r['latency']:>8} {r['bytes']:>9} {r['single_cycles']:>11} {r['single_efficiency']:>7.3f} "
              f"{r['batch_cycles']:>10} {r['batch_efficiency']:>7.3f} {r['driver_loop_cycles']:>10} "
              f"{r['driver_loop_efficiency']:>7.3f}")
    print(f"\nhost DMA over the modelled link ({link}); device time at the nominal clock")
    print(f"{'bytes':>9} {'H2C GB/s':>9} {'C2H GB/s':>9} {'peak':>6} {'wall H2C MB/s':>14} {'wall C2H MB/s':>14}")
    for r in dma:
        print(f"{r['bytes']:>9} {r['h2c_gbps']:>9.2f} {r['c2h_gbps']:>9.2f} {r['link_peak_gbps']:>6.2f} "
              f"{r['wall_h2c_mbps']:>14.1f} {r['wall_c2h_mbps']:>14.1f}")
    print(f"\nsimulation speed: {speed['cycles_per_second']:,.0f} device cycles/s "
          f"({speed['cycles']} cycles in {speed['seconds']:.2f} s)")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"copy": rows, "host_dma": dma, "sim_speed": speed, "link": link,
                               "word_bytes": word_bytes}, indent=2))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
