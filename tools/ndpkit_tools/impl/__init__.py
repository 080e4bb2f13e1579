"""Implementation: the flow (``flow``: yowasp synthesis, ECP5 place and route), the few-pin
wrapper, the ECP5 board build, and the reports of the FP units and the engines."""
