"""The device-server process behind the sim transport.

``python -m ndpkit_tools.sim.device_server --socket PATH --config JSON`` builds (or
reuses) the Verilator model of :class:`ndpkit_hw.sim_card.SimCard` for the
configuration and runs :mod:`ndpkit_tools.sim.device_server_bench` in it, which connects
to the host's socket.  One process per simulated card; the host starts it in its
own session and kills the whole group on close.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from ndpkit.transport.sim_protocol import DEFAULTS   # the server's configuration defaults, shared with the driver

__all__ = ["DEFAULTS", "card_params", "main"]


def card_params(config: dict) -> dict:
    """The SimCard constructor arguments of a configuration (what the build depends on)."""
    from ndpkit_spec.registry import instance_counts
    engines = tuple(name if n == 1 else f"{name}*{n}" for name, n in instance_counts(config["engines"]).items())
    params = {"data_width": config["data_width"], "mem_base": config["mem_base"], "mem_size": config["mem_size"],
              "engines": engines, "queue_depth": config["queue_depth"],
              "clock_mhz": config["clock_mhz"], "attention_lanes": config["attention_lanes"]}
    # (only when not the default, so the default builds keep their cache key)
    if config["mem_queue"] is not None:
        params["mem_max_outstanding"] = config["mem_queue"]
    if config["memory_ports"] != DEFAULTS["memory_ports"]:
        params["memory_ports"] = config["memory_ports"]
    if config["memory"] != DEFAULTS["memory"]:
        params["mem_timing"] = config["memory"]
    return params


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--config", required=True, help="JSON configuration (see DEFAULTS)")
    ap.add_argument("--run-dir", required=True)
    args = ap.parse_args(argv)
    config = dict(DEFAULTS, **json.loads(args.config))

    from ndpkit_tools.sim.runner import Design, run_bench, BenchFailed
    from ndpkit_hw.sim_card import SimCard

    os.environ["NDP_WAVES"] = ("vcd" if str(config["waves"]).endswith(".vcd") else "1") if config["waves"] else "0"
    run_dir = Path(args.run_dir)
    design = Design(SimCard(**card_params(config)), "ndpkit_sim_card",
                    key=json.dumps(card_params(config), sort_keys=True))
    try:
        run_bench(design, "ndpkit_tools.sim.device_server_bench", params=config, test_dir=run_dir,
                  extra_env={"NDP_SOCKET": args.socket}, seed=1)
    except BenchFailed as e:
        print(f"device server: {e}", file=sys.stderr)
        return 1
    finally:
        if config["waves"]:
            for dump in ("dump.fst", "dump.vcd"):
                if (run_dir / dump).exists():
                    shutil.copy(run_dir / dump, config["waves"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
