"""The memory-side scatter-gather unit (``unit.SgUnit``) and its bench harness."""
