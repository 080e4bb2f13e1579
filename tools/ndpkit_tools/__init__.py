"""ndpkit's tooling in one room: the simulation runner and device server (``sim``), lint, formal
proofs, FuseSoC, implementation reports (``impl``), board builds (``boards``), the benchmark
report (``bench``) and the register document (``regs_doc``).  It imports the gateware
(``ndpkit_hw``) and the driver (``ndpkit``); neither imports it."""
