"""Every device a test opens puts guard regions around each buffer it allocates
(``Device(guard_bytes=)``); freeing a buffer, ``free_all`` and closing the device
check them, so a command that writes outside its buffers fails the test that ran it.

Fixtures of the device-level suite (tb/device and each engine's device tests): the same
tests on the model and the sim card.

``dev`` is one open device per transport per pytest worker (the sim card's server
starts once, ~5 s with a cached build); every sim-device test is in one xdist group
so they share that server.  ``rng`` prints its seed (``SEED=...`` reproduces).
"""
import contextlib
import os
import random

import pytest

os.environ.setdefault("NDPKIT_GUARD_BYTES", "64")

import ndpkit  # noqa: E402  (after the guard setting)

TRANSPORTS = [pytest.param("model", id="model"),
              # the UART transport and the bridge protocol (in Python) in front of a model card
              pytest.param("uart:model", id="uart"),
              pytest.param("sim", id="sim", marks=[pytest.mark.sim, pytest.mark.xdist_group("device_sim")])]


@contextlib.contextmanager
def opened_once():
    """A function that opens a URI's device the first time it is asked for it and
    hands back that device after; every one of them closed at the end."""
    opened = {}

    def get(uri):
        if uri not in opened:
            opened[uri] = ndpkit.open(uri)
        return opened[uri]

    try:
        yield get
    finally:
        for dev in opened.values():
            dev.close()


@pytest.fixture(scope="session")
def devices():
    with opened_once() as get:
        yield get


@pytest.fixture(scope="module")
def cards():
    """:func:`opened_once` for a module's cards (closed when the module's tests end)."""
    with opened_once() as get:
        yield get


@pytest.fixture(params=TRANSPORTS)
def dev(request, devices):
    device = devices(request.param)
    yield device
    # leave the device clean for the next test: nothing in flight, every buffer freed
    # (free_all checks every buffer's guard regions first: nothing written outside)
    device.wait_all()
    for client in device.engines.values():
        client.regs.write("irq", 0b11)
    device.free_all()


@pytest.fixture
def rng():
    seed = int(os.environ["SEED"]) if os.environ.get("SEED") else random.randrange(1 << 30)
    print(f"seed={seed} (SEED={seed} reproduces)")
    return random.Random(seed)
