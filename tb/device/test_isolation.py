"""Memory isolation: every engine, given an address window, fails a command that
reaches outside it with OUT_OF_WINDOW before moving any data — on the behavioural
model and on the RTL (sim).

For each engine an "inside" arena (the window) and an "outside" arena are filled
with random bytes; commands that read from or write to the outside arena must fail
and leave both arenas as they were (the attention engine's per-request checks: the
request fails, its status word says so, nothing else changes); the same command
inside the window then works, and with the window reset it may use all of memory.
"""
import numpy as np
import pytest

import ndpkit
from ndpkit import DeviceError, ErrorCode
from ndpkit.engines.attention import golden as attention_golden
from ndpkit.engines.adam.golden import scalars_for_step

CARDS = {"dma_copy": "{}", "adam": "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M",
         "decomp": "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M",
         "attention": "{}?data_width=128&engines=attention&mem_size=8M"}
ARENA = 64 << 10
GROUPS = {"dma_copy": "device_sim", "adam": "device_sim_adam", "decomp": "device_sim_adam",
          "attention": "device_sim_attention"}


def _cases():
    for engine in CARDS:
        yield pytest.param("model", engine, id=f"model-{engine}")
        yield pytest.param("sim", engine, id=f"sim-{engine}",
                           marks=[pytest.mark.sim, pytest.mark.xdist_group(GROUPS[engine])])


def _commands(dev, engine, inside, outside):
    """(command args inside the window, [args reaching outside]) for ``engine``."""
    a, b = inside.address, outside.address
    if engine == "dma_copy":
        good = {"op": 0, "src": a, "dst": a + ARENA // 2, "length": 4096, "pattern": 0}
        return good, [{**good, "dst": b}, {**good, "src": b}, {**good, "op": 1, "dst": a + ARENA - 2048}]
    if engine == "adam":
        n = 1024
        good = {"format_mode": 1, "format_grad": 0, "format_copy": 0, "format_sparse": 0, "count": n,
                "p": a, "m": a + 4 * n, "v": a + 8 * n, "g": a + 12 * n, "copy": 0, "pairs": 0, "idx": 0,
                **scalars_for_step(1, lr=1e-3).bits()}
        return good, [{**good, "m": b}, {**good, "g": b + 4096}, {**good, "format_copy": 1, "copy": b}]
    if engine == "decomp":
        good = {"format": 0, "count": 256, "pairs": 16, "idx": a, "val": a + 4096, "dst": a + 8192}
        return good, [{**good, "dst": b}, {**good, "idx": b}, {**good, "val": b + 64}]
    raise AssertionError(engine)


def _attention_commands(inside, outside, word):
    """The attention engine: the table, q and out inside; the cache inside or outside."""
    a, b = inside.address, outside.address
    d, g = 64, 2
    table, q, out = a, a + 1024, a + 2048
    k_in, v_in = a + 8192, a + 16384
    req = {"q": q, "out": out, "k": k_in, "v": v_in, "length": 10, "capacity": 16, "window": 0, "flags": 0}
    args = {"format_q": 1, "format_kv": 1, "format_out": 0, "table": table, "requests": 1, "shape_head_dim": d,
            "shape_group": g, "shape_kv_heads": 1, "shape_block_size": 0,
            "scale": int(np.float32(0.125).view(np.uint32))}
    return args, req, [{**req, "k": b}, {**req, "v": b + 4096}, {**req, "out": b}]


def _attention_paged(inside, outside, args):
    """The attention engine's paged mode (block size 16, a pool of 2 blocks, the request in
    block 1): (command args, the good request and its block ids, [(a bad request, its block ids,
    the code)]) — a pool or the block table outside the window, an id past the pool."""
    a, b = inside.address, outside.address
    req = {"q": a + 1024, "out": a + 2048, "k": a + 8192, "v": a + 16384, "length": 10, "capacity": 0,
           "window": 0, "flags": 1, "k_new": a + 6144, "v_new": a + 6400, "block_table": a + 4096, "blocks": 1,
           "pool_blocks": 2}
    bad = [({**req, "k": b}, [1], ErrorCode.OUT_OF_WINDOW), ({**req, "v": b + 4096}, [1], ErrorCode.OUT_OF_WINDOW),
           ({**req, "block_table": b}, [1], ErrorCode.OUT_OF_WINDOW),
           ({**req, "block_table": a + ARENA - 32}, [1], ErrorCode.OUT_OF_WINDOW),
           (req, [2], ErrorCode.BAD_INDEX)]
    return {**args, "shape_block_size": 16}, (req, [1]), bad


@pytest.mark.parametrize("transport, engine", list(_cases()))
def test_engine_cannot_leave_its_window(transport, engine):
    rng = np.random.default_rng(11)
    with ndpkit.open(CARDS[engine].format(transport)) as dev:
        client = dev.engine(engine)
        inside, outside = dev.alloc(ARENA), dev.alloc(ARENA)
        image = {buf: rng.integers(0, 256, ARENA, dtype=np.uint8) for buf in (inside, outside)}
        if engine == "adam":        # finite values: the step's own results do not matter here
            image[inside][:] = np.frombuffer(rng.standard_normal(ARENA // 4).astype(np.float32).tobytes(),
                                             np.uint8)
        if engine == "decomp":      # indices < count
            image[inside][:1024] = np.frombuffer((rng.integers(0, 256, 256)).astype(np.uint32).tobytes(),
                                                 np.uint8)
        for buf, data in image.items():
            buf.write(data)

        def unchanged():
            for buf, data in image.items():
                got = np.frombuffer(buf.read(), np.uint8)
                assert np.array_equal(got, data), f"{engine}: bytes changed at {np.flatnonzero(got != data)[:4]}"

        client.set_window(inside.address, ARENA)
        assert client.window == (inside.address, ARENA)
        if engine == "attention":
            args, good_req, bad_reqs = _attention_commands(inside, outside, dev.word_bytes)
            table_at = args["table"] - inside.address
            for req in bad_reqs:
                raw = attention_golden.pack_descriptors([req])
                inside.write(raw, table_at)
                image[inside][table_at:table_at + len(raw)] = np.frombuffer(raw, np.uint8)
                done = client.submit(args).wait(check=False)
                assert done.error == ErrorCode.OK and done.aux == 1, done
                status = attention_golden.unpack_descriptors(inside.read(64, table_at), 1)[0]["status"]
                assert status == attention_golden.STATUS_DONE | ErrorCode.OUT_OF_WINDOW, hex(status)
                image[inside][table_at + 40:table_at + 44] = np.frombuffer(np.uint32(status).tobytes(), np.uint8)
                unchanged()
            # paged: a pool or the block table outside, an id past the pool (BAD_INDEX)
            paged_args, (paged_req, paged_ids), paged_bad = _attention_paged(inside, outside, args)
            for req, ids, code in paged_bad + [(paged_req, paged_ids, ErrorCode.OK)]:
                raw = attention_golden.pack_descriptors([req])
                entries = np.array(ids, np.uint32).tobytes()
                ids_at = paged_req["block_table"] - inside.address
                for at, data in ((table_at, raw), (ids_at, entries)):
                    inside.write(data, at)
                    image[inside][at:at + len(data)] = np.frombuffer(data, np.uint8)
                done = client.submit(paged_args).wait(check=False)
                assert done.error == ErrorCode.OK and done.aux == int(code != ErrorCode.OK), (done, code)
                status = attention_golden.unpack_descriptors(inside.read(64, table_at), 1)[0]["status"]
                assert status == attention_golden.STATUS_DONE | code, (hex(status), code)
                image[inside][table_at + 40:table_at + 44] = np.frombuffer(np.uint32(status).tobytes(), np.uint8)
                if code != ErrorCode.OK:
                    unchanged()
            inside.write(attention_golden.pack_descriptors([good_req]), table_at)
            done = client.submit(args).wait(check=False)
            assert done.error == ErrorCode.OK and done.aux == 0, done
        else:
            good, bad = _commands(dev, engine, inside, outside)
            for args in bad:
                with pytest.raises(DeviceError) as e:
                    client.submit(args).wait()
                assert e.value.code == ErrorCode.OUT_OF_WINDOW, (args, e.value)
                unchanged()
            assert client.submit(good).wait().ok
            # with the window reset the engine may use all of card memory again
            client.set_window()
            assert client.window == (dev.mem_base, dev.mem_size)
            assert client.submit(bad[0]).wait(check=False).error != ErrorCode.OUT_OF_WINDOW
