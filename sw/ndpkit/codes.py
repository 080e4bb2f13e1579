"""Status codes shared by the gateware and the host driver.

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

    @property
    def is_bus_error(self) -> bool:
        return self in (ErrorCode.SLVERR, ErrorCode.DECERR)
