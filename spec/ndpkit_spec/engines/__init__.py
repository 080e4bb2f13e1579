"""Each engine's specification: ``ndpkit_spec.engines.<name>`` holds its register block
(``BLOCK``), its descriptor layouts and constants, and its registry entry (``ENGINE``).
The registry (:mod:`ndpkit_spec.registry`) lists the entries."""
