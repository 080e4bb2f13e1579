"""Check a generated Vivado project without Vivado: run its Tcl against recording stubs.

The stubs (Python commands in a Tcl interpreter: ``tkinter.Tcl()``, no display
needed) define exactly the Vivado commands the generator may use; any other command
is a Tcl error.  They record cells, ports, nets and properties, and reject at once a
pin that the cell does not have: the device's pins come from the generated Verilog,
the IP cores' from :data:`IP_PINS` (their product guides).  :func:`check_project`
then asserts that the script ran through, that every cell it connects was created
and every IP it created is connected, that every interface and port of the device
is connected, that the device runs on its own clock as stated (a clocking wizard's
output at the declared frequency, every AXI path crossing in a SmartConnect), that
the address map gives each device memory port exactly its region's memory (on HBM:
its pseudo-channels' address ranges, through the pseudo-channel its SmartConnect
reaches) and the host port all of it, and that the XDC references only top-level
ports of the block design and clocks it creates.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path

__all__ = ["TclCheckError", "Recorder", "check_project", "check_address_map", "IP_PINS", "verilog_ports"]


class TclCheckError(AssertionError):
    pass


def _hbm_pins():
    pins = {"HBM_REF_CLK_0", "HBM_REF_CLK_1", "APB_0_PCLK", "APB_1_PCLK", "APB_0_PRESET_N", "APB_1_PRESET_N",
            "DRAM_0_STAT_CATTRIP", "DRAM_1_STAT_CATTRIP", "apb_complete_0", "apb_complete_1"}
    intf = set()
    for pc in range(32):
        pins |= {f"AXI_{pc:02d}_ACLK", f"AXI_{pc:02d}_ARESET_N"}
        intf |= {f"SAXI_{pc:02d}", f"SAXI_{pc:02d}_8HI"}
    return pins, intf


# (plain pins, interface pins) per IP, from the product guides: XDMA PG195, HBM PG276,
# DDR4 MIG PG150, SmartConnect PG247, Processor System Reset PG164, Clocking Wizard PG065, and the IP
# Integrator utility cores (Utility Buffer, Constant, Utility Vector Logic).
IP_PINS = {
    "xilinx.com:ip:xdma": ({"sys_clk", "sys_clk_gt", "sys_rst_n", "axi_aclk", "axi_aresetn", "user_lnk_up",
                            "usr_irq_req", "usr_irq_ack", "msi_enable", "msi_vector_width"},
                           {"M_AXI", "M_AXI_LITE", "pcie_mgt", "S_AXI_LITE"}),
    "xilinx.com:ip:hbm": _hbm_pins(),
    "xilinx.com:ip:ddr4": ({"sys_rst", "c0_init_calib_complete", "c0_ddr4_ui_clk", "c0_ddr4_ui_clk_sync_rst",
                            "c0_ddr4_aresetn", "dbg_clk", "dbg_bus"},
                           {"C0_SYS_CLK", "C0_DDR4", "C0_DDR4_S_AXI", "C0_DDR4_S_AXI_CTRL"}),
    "xilinx.com:ip:smartconnect": ({"aclk", "aclk1", "aresetn"}, {"S00_AXI", "S01_AXI", "M00_AXI", "M01_AXI"}),
    "xilinx.com:ip:proc_sys_reset": ({"slowest_sync_clk", "ext_reset_in", "aux_reset_in", "mb_debug_sys_rst",
                                      "dcm_locked", "mb_reset", "bus_struct_reset", "peripheral_reset",
                                      "interconnect_aresetn", "peripheral_aresetn"}, set()),
    "xilinx.com:ip:util_ds_buf": ({"IBUF_OUT", "IBUF_DS_ODIV2", "BUFG_I", "BUFG_O"}, {"CLK_IN_D"}),
    "xilinx.com:ip:xlconstant": ({"dout"}, set()),
    "xilinx.com:ip:util_vector_logic": ({"Op1", "Op2", "Res"}, set()),
    "xilinx.com:ip:clk_wiz": ({"clk_in1", "clk_out1", "clk_out2", "reset", "resetn", "locked"}, set()),
}

# the pins that drive a clock, per IP (PG195, PG150, PG065 Clocking Wizard, Utility Buffer)
CLOCK_OUTPUTS = {"xilinx.com:ip:xdma": {"axi_aclk"}, "xilinx.com:ip:ddr4": {"c0_ddr4_ui_clk"},
                 "xilinx.com:ip:clk_wiz": {"clk_out1", "clk_out2"},
                 "xilinx.com:ip:util_ds_buf": {"IBUF_OUT", "IBUF_DS_ODIV2", "BUFG_O"}}

# the signals an interface port of a given type becomes in the wrapper
INTF_PORT_SIGNALS = {
    "xilinx.com:interface:diff_clock_rtl:1.0": ["clk_p", "clk_n"],
    "xilinx.com:interface:pcie_7x_mgt_rtl:1.0": ["rxp", "rxn", "txp", "txn"],
    "xilinx.com:interface:ddr4_rtl:1.0": ["act_n", "adr", "ba", "bg", "ck_c", "ck_t", "cke", "cs_n", "dm_n", "dq",
                                           "dqs_c", "dqs_t", "odt", "reset_n"],
}

AXI_PREFIX = re.compile(r"^(.*)_(aw|w|b|ar|r)(valid)$")


def verilog_ports(text: str, module: str) -> tuple[set[str], set[str]]:
    """(plain ports, AXI interface prefixes) of ``module`` in Verilog ``text``."""
    from ndpkit_tools.sim.runner import module_ports
    try:
        ports = set(module_ports(text, module))
    except ValueError:
        raise TclCheckError(f"module {module} not found in the generated Verilog") from None
    interfaces = {m.group(1) for p in ports if (m := AXI_PREFIX.match(p))}
    plain = {p for p in ports if not any(p.startswith(i + "_") for i in interfaces)}
    return plain, interfaces


@dataclasses.dataclass
class Recorder:
    module_ports: dict                    # module name -> (plain pins, interface pins)
    cells: dict = dataclasses.field(default_factory=dict)          # name -> vlnv / "module:<name>"
    ports: dict = dataclasses.field(default_factory=dict)          # top port -> kind/vlnv
    nets: list = dataclasses.field(default_factory=list)           # (kind, [endpoints])
    properties: list = dataclasses.field(default_factory=list)     # (dict, object)
    commands: list = dataclasses.field(default_factory=list)
    referenced_cells: set = dataclasses.field(default_factory=set)

    def _pins_of(self, cell):
        kind = self.cells[cell]
        if kind.startswith("module:"):
            return self.module_ports[kind[7:]]
        base = ":".join(kind.split(":")[:3])
        if base not in IP_PINS:
            raise TclCheckError(f"no pin table for IP {kind}")
        return IP_PINS[base]

    def pin(self, spec: str, interface: bool) -> str:
        spec = spec.lstrip("/")
        if "/" not in spec:
            raise TclCheckError(f"pin {spec!r} names no cell")
        cell, pin = spec.split("/", 1)
        if cell not in self.cells:
            raise TclCheckError(f"pin {spec}: cell {cell!r} was never created")
        self.referenced_cells.add(cell)
        plain, intf = self._pins_of(cell)
        if pin not in (intf if interface else plain):
            raise TclCheckError(f"{'interface pin' if interface else 'pin'} {spec}: {self.cells[cell]} has no "
                                f"{pin!r}")
        return spec

    def connected(self) -> set[str]:
        return {e for _, ends in self.nets for e in ends}

    def net_of(self, pin: str) -> set[str]:
        """Every pin on the same (plain) net as ``pin``: IP Integrator merges the
        ``connect_bd_net`` calls that share a pin."""
        net, grown = {pin}, True
        while grown:
            grown = False
            for kind, ends in self.nets:
                if kind == "net" and net & set(ends) and not set(ends) <= net:
                    net |= set(ends)
                    grown = True
        return net

    def clock_sources(self, net: set[str]) -> list[str]:
        sources = []
        for end in sorted(net):
            cell, pin = end.split("/", 1)
            kind = self.cells.get(cell, "")
            if pin in CLOCK_OUTPUTS.get(":".join(kind.split(":")[:3]), ()):
                sources.append(end)
        return sources

    def property_of(self, obj: str, name: str):
        found = None
        for props, objs in self.properties:
            if obj in objs.split() and f"CONFIG.{name}" in props:
                found = props[f"CONFIG.{name}"]
        return found


def _options(args, flags=()):
    """Split Tcl args into (options dict, positionals); ``flags`` take no value."""
    opts, pos, i = {}, [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1 and not a[1].isdigit():
            if a in flags:
                opts[a] = True
                i += 1
            else:
                opts[a] = args[i + 1]
                i += 2
        else:
            pos.append(a)
            i += 1
    return opts, pos


def _interp():
    import tkinter
    return tkinter.Tcl()


def run_project_tcl(script: Path, module_ports: dict) -> Recorder:
    tcl = _interp()
    rec = Recorder(module_ports)

    def split(value):
        return list(tcl.splitlist(value)) if value else []

    def cmd(name, flags=()):
        def wrap(fn):
            def call(*args):
                rec.commands.append(name)
                opts, pos = _options(list(args), flags)
                try:
                    result = fn(opts, pos)
                except TclCheckError as e:
                    rec.error = str(e)
                    raise
                return "" if result is None else result
            tcl.createcommand(name, call)
            return fn
        return wrap

    @cmd("create_project", flags=("-force",))
    def _(o, p):
        if "-part" not in o:
            raise TclCheckError("create_project without -part")
        rec.part = o["-part"]

    for simple in ("update_compile_order", "current_project", "current_fileset", "validate_bd_design",
                   "save_bd_design", "close_project", "get_runs"):
        cmd(simple, flags=("-fileset",))(lambda o, p, simple=simple: simple if simple.startswith("current") else
                                         (p[0] if p else ""))

    @cmd("add_files", flags=("-norecurse",))
    def _(o, p):
        rec.__dict__.setdefault("files", []).extend(p)

    @cmd("create_bd_design")
    def _(o, p):
        rec.bd = p[0]

    @cmd("create_bd_cell")
    def _(o, p):
        name = p[0]
        if name in rec.cells:
            raise TclCheckError(f"cell {name} created twice")
        if o.get("-type") == "module":
            if o["-reference"] not in rec.module_ports:
                raise TclCheckError(f"module reference {o['-reference']} is not in the generated Verilog")
            rec.cells[name] = "module:" + o["-reference"]
        elif o.get("-type") == "ip":
            base = ":".join(o["-vlnv"].split(":")[:3])
            if base not in IP_PINS:
                raise TclCheckError(f"IP {o['-vlnv']} is not one the checker knows")
            rec.cells[name] = o["-vlnv"]
        else:
            raise TclCheckError(f"create_bd_cell {name}: -type must be ip or module")
        return name

    @cmd("create_bd_port")
    def _(o, p):
        rec.ports[p[0]] = "port"
        return p[0]

    @cmd("create_bd_intf_port")
    def _(o, p):
        if o.get("-vlnv") not in INTF_PORT_SIGNALS:
            raise TclCheckError(f"interface port {p[0]}: unknown type {o.get('-vlnv')}")
        rec.ports[p[0]] = o["-vlnv"]
        return p[0]

    def lookup_ports(p, intf):
        names = []
        for pattern in p:
            hits = [n for n, kind in rec.ports.items() if fnmatch.fnmatch(n, pattern) and (kind != "port") == intf]
            if not hits:
                raise TclCheckError(f"{'interface port' if intf else 'port'} {pattern!r} does not exist")
            names += hits
        return " ".join(names)

    cmd("get_bd_ports")(lambda o, p: lookup_ports(p, False))
    cmd("get_bd_intf_ports")(lambda o, p: lookup_ports(p, True))
    cmd("get_bd_pins")(lambda o, p: " ".join(rec.pin(x, False) for x in p))
    cmd("get_bd_intf_pins")(lambda o, p: " ".join(rec.pin(x, True) for x in p))

    @cmd("get_bd_cells")
    def _(o, p):
        for name in p:
            if name not in rec.cells:
                raise TclCheckError(f"cell {name!r} does not exist")
        return " ".join(p)

    @cmd("get_bd_addr_spaces")
    def _(o, p):
        for space in p:
            rec.pin(space, True)
        return " ".join(p)

    @cmd("get_bd_addr_segs")
    def _(o, p):
        for seg in p:
            cell_pin = "/".join(seg.split("/")[:2])
            rec.pin(cell_pin, True)
        return " ".join(p)

    @cmd("assign_bd_address", flags=("-force",))
    def _(o, p):
        rec.__dict__.setdefault("addresses", []).append((o, p))

    def net(kind):
        def fn(o, p):
            ends = [e for arg in p for e in split(arg)]
            if len(ends) < 2:
                raise TclCheckError(f"{kind} with fewer than two ends: {ends}")
            rec.nets.append((kind, ends))
        return fn

    cmd("connect_bd_net")(net("net"))
    cmd("connect_bd_intf_net")(net("intf"))

    @cmd("set_property", flags=("-dict",))
    def _(o, p):
        if o.get("-dict"):
            pairs, objs = split(p[0]), p[1:]
        else:
            pairs, objs = p[:2], p[2:]
        if not objs or not "".join(objs).strip():
            raise TclCheckError(f"set_property {pairs} on nothing")
        rec.properties.append((dict(zip(pairs[::2], pairs[1::2])), " ".join(objs)))

    @cmd("make_wrapper", flags=("-top",))
    def _(o, p):
        rec.wrapper = True

    cmd("get_files")(lambda o, p: " ".join(p))
    rec.error = None
    try:
        tcl.eval(f"source {{{script}}}")
    except Exception as e:            # the Tcl error (an unknown command, a stub's rejection)
        raise TclCheckError(f"{script.name} did not run through: {rec.error or e}") from None
    return rec


def run_build_tcl(script: Path) -> list[str]:
    """Run build.tcl against stubs (runs complete at once); returns the commands."""
    tcl = _interp()
    seen = []
    for name in ("open_project", "launch_runs", "wait_on_run", "open_run", "report_timing_summary",
                 "report_utilization", "write_bitstream", "write_cfgmem", "close_project"):
        tcl.createcommand(name, lambda *a, name=name: seen.append(name) or "")
    tcl.createcommand("get_runs", lambda *a: a[-1])
    tcl.createcommand("get_property", lambda prop, obj: "100%" if prop == "PROGRESS" else "/runs/" + obj)
    try:
        tcl.eval(f"source {{{script}}}")
    except Exception as e:
        raise TclCheckError(f"{script.name} did not run through: {e}") from None
    return seen


def check_xdc(xdc: Path, top_ports: set[str]) -> dict:
    """Run the XDC against stubs: every get_ports names a top-level port, every
    get_clocks a clock the XDC creates.  Returns {port: properties}."""
    tcl = _interp()
    clocks, used = set(), {}
    errors = []

    def get_ports(*args):
        names = []
        for arg in args:
            for pattern in tcl.splitlist(arg):
                # a bus bit ("ddr4_dq[3]") names its bus; only * and ? are wildcards
                bus = re.sub(r"\[\d+\]$", "", pattern).replace("[", "[[]")
                hits = [p for p in top_ports if fnmatch.fnmatchcase(p, bus)]
                if not hits:
                    errors.append(f"{xdc.name}: get_ports {pattern!r}: no such top-level port "
                                  f"(ports: {', '.join(sorted(top_ports))})")
                    raise TclCheckError(errors[-1])
                names += hits
        for n in names:
            used.setdefault(n, {})
        return " ".join(names)

    def create_clock(*args):
        o, p = _options(list(args))
        clocks.add(o["-name"])
        return o["-name"]

    def get_clocks(*args):
        o, p = _options(list(args), flags=("-include_generated_clocks",))
        for name in p:
            if name not in clocks:
                errors.append(f"{xdc.name}: get_clocks {name!r}: no such clock")
                raise TclCheckError(errors[-1])
        return " ".join(p)

    def set_property(*args):
        o, p = _options(list(args), flags=("-dict",))
        if o.get("-dict"):
            pairs, objs = tcl.splitlist(p[0]), p[1:]
        else:
            pairs, objs = p[:2], p[2:]
        for obj in objs:
            for name in tcl.splitlist(obj):
                if name in used:
                    used[name].update(dict(zip(pairs[::2], pairs[1::2])))

    tcl.createcommand("get_ports", get_ports)
    tcl.createcommand("create_clock", create_clock)
    tcl.createcommand("get_clocks", get_clocks)
    tcl.createcommand("set_property", set_property)
    for name in ("current_design", "set_false_path", "set_clock_groups", "set_input_delay", "set_output_delay"):
        tcl.createcommand(name, lambda *a: "")
    try:
        tcl.eval(f"source {{{xdc}}}")
    except Exception as e:
        raise TclCheckError(errors[-1] if errors else f"{xdc.name} did not run through: {e}") from None
    return used


def check_clocks(rec: Recorder, device_cell: str, interfaces: set[str]) -> tuple[dict, list[str]]:
    """The device runs on its own clock as stated: its ``clk`` is one clocking
    wizard's output at the frequency the device's ``clk`` pin declares, and every AXI
    interface of the device reaches a SmartConnect whose one clock is the device's and
    whose other clock has a source (the crossing).  Returns ({name: MHz}, problems)."""
    problems = []
    device_net = rec.net_of(f"{device_cell}/clk")
    sources = rec.clock_sources(device_net)
    wizards = [s for s in sources if rec.cells[s.split("/")[0]].startswith("xilinx.com:ip:clk_wiz")]
    if len(sources) != 1 or not wizards:
        return {}, [f"the device clock is driven by {sources or 'nothing'}, not by one clocking wizard output"]
    wizard = wizards[0].split("/")[0]
    declared = rec.property_of(f"{device_cell}/clk", "FREQ_HZ")
    requested = rec.property_of(wizard, "CLKOUT1_REQUESTED_OUT_FREQ")
    if declared is None or requested is None or float(requested) * 1e6 != float(declared):
        problems.append(f"the device clock pin declares {declared} Hz but {wizard} makes {requested} MHz")
    if not rec.clock_sources(rec.net_of(f"{wizard}/clk_in1")):
        problems.append(f"{wizard}/clk_in1 has no clock source")
    for name in sorted(interfaces):
        far = [e for kind, ends in rec.nets if kind == "intf" and f"{device_cell}/{name}" in ends
               for e in ends if e != f"{device_cell}/{name}"]
        cells = {e.split("/")[0] for e in far}
        if len(cells) != 1 or not rec.cells[next(iter(cells))].startswith("xilinx.com:ip:smartconnect"):
            problems.append(f"device interface {name} does not meet a SmartConnect (it reaches {sorted(cells)})")
            continue
        sc = next(iter(cells))
        nets = [rec.net_of(f"{sc}/{pin}") for pin in ("aclk", "aclk1")]
        if sum(device_net == net for net in nets) != 1 or not all(rec.clock_sources(net) for net in nets):
            problems.append(f"{sc} (device interface {name}) does not cross between the device clock and a "
                            f"clock with a source")
    return {"device": float(requested or 0), "source": rec.clock_sources(rec.net_of(f"{wizard}/clk_in1"))}, problems


#: a pseudo-channel's full rate on its 256-bit AXI port (PG276: 450 MHz)
HBM_FULL_RATE_MHZ = 450


def _size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not match:
        raise TclCheckError(f"address range {text!r} is not a size")
    return int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]


def check_address_map(rec: Recorder, device_cell: str, plan: dict, memory: dict) -> tuple[dict, list[str]]:
    """Each device memory port maps to exactly its region: the segments assigned in its
    address space are the memory's segments covering the region the device gives the
    port (``plan["regions"]``: base and size from the device's parameters), each at its
    own address and size, all behind the one memory port its SmartConnect reaches; on
    HBM (``memory["kind"]``) a segment is pseudo-channel ``k``'s ``HBM_MEMkk`` at
    ``k * channel bytes``.  The host port (``s_axi``) sees all of memory.  Returns
    ({port: [pseudo-channels]}, problems)."""
    problems, found = [], {}
    assigned = {}
    for opts, pos in getattr(rec, "addresses", []):
        space = opts.get("-target_address_space", "")
        for seg in pos:
            assigned.setdefault(space, []).append((int(opts.get("-offset", "0"), 0), _size(opts.get("-range", "0")),
                                                   seg))
    total = memory["bytes"]
    card = memory.get("card_bytes", total)           # the device's card memory (its regions)
    host = assigned.get("xdma/M_AXI", [])
    if len(host) != 1 or host[0][0] != 0 or not card <= host[0][1] <= total \
            or not host[0][2].startswith(f"{device_cell}/s_axi/"):
        problems.append(f"the host port does not see all of card memory ({card:#x} bytes at 0): {host}")
    channel_bytes = total // memory.get("pseudo_channels", 1)
    for region in plan["regions"]:
        port = region["port"]
        space = f"{device_cell}/{port}"
        segments = sorted(assigned.get(space, []))
        sc = [e for kind, ends in rec.nets if kind == "intf" and space in ends for e in ends if e != space]
        far = [e for kind, ends in rec.nets if kind == "intf" and sc and f"{sc[0].split('/')[0]}/M00_AXI" in ends
               for e in ends if not e.startswith(sc[0].split("/")[0] + "/")]
        lo, hi = region["base"], region["base"] + region["size"]
        if not segments:
            problems.append(f"memory port {port} has no address segment")
            continue
        covered = sum(n for _, n, _ in segments)
        if segments[0][0] != lo or covered != region["size"] or any(
                a + n != b for (a, n, _), (b, _, _) in zip(segments, segments[1:])):
            problems.append(f"memory port {port} maps {[(hex(a), hex(n)) for a, n, _ in segments]}, not its region "
                            f"[{lo:#x}, {hi:#x})")
        channels = []
        for offset, size, seg in segments:
            if memory["kind"] == "hbm":
                match = re.fullmatch(r"hbm/(SAXI_\d\d\w*)/HBM_MEM(\d\d)", seg)
                if not match:
                    problems.append(f"memory port {port}: segment {seg} is not an HBM pseudo-channel's")
                    continue
                k = int(match.group(2))
                if (offset, size) != (k * channel_bytes, channel_bytes):
                    problems.append(f"memory port {port}: {seg} at {offset:#x}+{size:#x}, but pseudo-channel {k} "
                                    f"is at {k * channel_bytes:#x}+{channel_bytes:#x}")
                if far != [f"hbm/{match.group(1)}"]:
                    problems.append(f"memory port {port} reaches {far}, but its segment {seg} is behind "
                                    f"hbm/{match.group(1)}")
                    continue
                # the channel's AXI clock: the SmartConnect's far clock, at the channel's full rate
                entry = int(match.group(1)[5:7])
                aclk = rec.net_of(f"hbm/AXI_{entry:02d}_ACLK")
                sources = rec.clock_sources(aclk)
                mhz = rec.property_of(sources[0].split("/")[0], "CLKOUT1_REQUESTED_OUT_FREQ") if sources else None
                if f"{sc[0].split('/')[0]}/aclk1" not in aclk or mhz is None or float(mhz) < HBM_FULL_RATE_MHZ:
                    problems.append(f"hbm/AXI_{entry:02d}_ACLK is not its SmartConnect's far clock at >= "
                                    f"{HBM_FULL_RATE_MHZ} MHz (sources {sources}, {mhz} MHz)")
                if len(segments) == 1 and k != entry:
                    problems.append(f"memory port {port}: its one pseudo-channel {k} is reached through "
                                    f"SAXI_{entry:02d}, another channel's port (a lateral hop across the switch)")
                channels.append(k)
            elif not far or not seg.startswith(far[0] + "/"):
                problems.append(f"memory port {port} reaches {far}, but its segment is {seg}")
        found[port] = channels
    if memory["kind"] == "hbm" and found and all(len(c) == 1 for c in found.values()):
        # one pseudo-channel a port: the switch is not needed, and off it carries nothing across
        for stack in ("00", "01"):
            if str(rec.property_of("hbm", f"USER_SWITCH_ENABLE_{stack}")).upper() != "FALSE":
                problems.append(f"every memory port has one pseudo-channel, but the HBM switch of stack {stack} "
                                f"is not off (USER_SWITCH_ENABLE_{stack})")
    return found, problems


def check_project(folder: Path, module: str = "ndpkit_device", helpers: tuple[str, ...] = ("ndpkit_irq_sync",)) -> dict:
    """All the checks on a generated project folder; returns a summary.  ``helpers``:
    the other module references the project adds (each in ``<name>.v``)."""
    plain, interfaces = verilog_ports((folder / f"{module}.v").read_text(), module)
    modules = {module: (plain, interfaces)}
    for helper in helpers:
        modules[helper] = verilog_ports((folder / f"{helper}.v").read_text(), helper)
    rec = run_project_tcl(folder / "project.tcl", modules)
    problems = []
    address_map = None
    connected = rec.connected()
    connected_cells = {e.split("/")[0] for e in connected if "/" in e}
    for cell, kind in rec.cells.items():
        if cell not in connected_cells:
            problems.append(f"cell {cell} ({kind}) is created but never connected")
    device_cells = [c for c, k in rec.cells.items() if k == f"module:{module}"]
    if len(device_cells) != 1:
        problems.append(f"the device is instantiated {len(device_cells)} times")
    else:
        cell = device_cells[0]
        for name in sorted(interfaces):
            if f"{cell}/{name}" not in connected:
                problems.append(f"device interface {name} is not connected")
        for name in sorted(plain):
            if f"{cell}/{name}" not in connected:
                problems.append(f"device port {name} is not connected")
        clocks, clock_problems = check_clocks(rec, cell, interfaces)
        problems += clock_problems
        plan_file = folder / "plan.json"
        if plan_file.exists():
            import json
            plan = json.loads(plan_file.read_text())
            address_map, map_problems = check_address_map(rec, cell, plan, plan["memory"])
            problems += map_problems
    for port in rec.ports:
        if port not in connected:
            problems.append(f"top-level port {port} is not connected")
    if not getattr(rec, "wrapper", False):
        problems.append("no make_wrapper")
    top_ports = set()
    for name, kind in rec.ports.items():
        top_ports |= {name} if kind == "port" else {f"{name}_{s}" for s in INTF_PORT_SIGNALS[kind]}
    used = check_xdc(folder / "constraints.xdc", top_ports)
    build = run_build_tcl(folder / "build.tcl")
    for step in ("launch_runs", "write_bitstream", "write_cfgmem"):
        if step not in build:
            problems.append(f"build.tcl never calls {step}")
    if problems:
        raise TclCheckError("; ".join(problems))
    return {"part": rec.part, "cells": rec.cells, "top_ports": sorted(top_ports), "constrained_ports": used,
            "nets": len(rec.nets), "device_interfaces": sorted(interfaces), "clocks": clocks,
            "address_map": address_map}
