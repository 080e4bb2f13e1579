"""Status codes shared by the gateware, the golden models and the host driver.

Values 1..3 mirror the AXI response codes so that a bus error is reported with
the code the bus gave; command-validation errors start at 4.
"""
import enum

__all__ = ["AxiResp", "ErrorCode"]


class AxiResp(enum.IntEnum):
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class ErrorCode(enum.IntEnum):
    OK = 0
    SLVERR = 2          # a slave answered SLVERR on some beat or response
    DECERR = 3          # no slave decoded the address
    ZERO_LENGTH = 4     # a transfer of length 0
    UNALIGNED = 5       # address or length not a multiple of the bus word
    OUT_OF_WINDOW = 6   # the transfer does not lie inside the allowed window
    BAD_OPCODE = 7      # the command's operation field names no operation of the engine
    OVERLAP = 8         # source and destination ranges overlap (dma_copy copies forward only)
    QUEUE_FULL = 9      # a doorbell arrived with the command queue full: the command was dropped
    BAD_FIELD = 10      # another command field is out of its documented range
    BAD_INDEX = 11      # an index read from memory (a vertex id, an element offset) is out of range
    BAD_GRAPH = 12      # a graph's row pointers are not monotone or do not match its edge array

    @property
    def is_bus_error(self) -> bool:
        return self in (ErrorCode.SLVERR, ErrorCode.DECERR)
