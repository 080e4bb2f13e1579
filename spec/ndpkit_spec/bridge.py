"""The UART-AXI bridge's protocol (:mod:`ndpkit_hw.shell.uart_bridge` answers it,
:mod:`ndpkit.transport.uart` speaks it).

Little-endian:

==========  ==========================  ==============================================
opcode      then                        reply
==========  ==========================  ==============================================
REG_WRITE   offset u32, value u32       0x81, resp u8
REG_READ    offset u32                  0x82, resp u8, value u32
MEM_WRITE   address u32, words u16,     0x83, resp u8 (after the last word's response)
            words x u32
MEM_READ    address u32, words u16      0x84, words x u32, resp u8
(other)                                 BAD_OPCODE
==========  ==========================  ==============================================

``resp`` is the AXI response (0 OKAY, 2 SLVERR, 3 DECERR) of the request, the first
error when it has several words.  A register offset is 32 bits, as a memory address is:
BAR0 outgrew 16 bits with one register slot per engine instance.
"""
__all__ = ["REG_WRITE", "REG_READ", "MEM_WRITE", "MEM_READ", "BAD_OPCODE", "MAX_WORDS"]

REG_WRITE, REG_READ, MEM_WRITE, MEM_READ = 0x01, 0x02, 0x03, 0x04
BAD_OPCODE = 0xEE
#: 32-bit words one memory request moves at most
MAX_WORDS = 1024
