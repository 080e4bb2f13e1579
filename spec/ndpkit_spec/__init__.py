"""ndpkit's specification: what the gateware, the golden models and the driver agree on.

A leaf package: it imports nothing of ndpkit_hw or ndpkit and no NumPy, so every side
can import it.  ``codes`` (status codes), ``regs`` (how a register block is declared),
``shell`` (the shell's block and the shared command protocol), ``bridge`` (the UART
bridge's opcodes), ``exp`` (the exp unit's constants), ``engines.<name>`` (each
engine's register block, descriptor layouts and constants, and its registry entry)
and ``registry`` (every engine, one entry each).
"""
