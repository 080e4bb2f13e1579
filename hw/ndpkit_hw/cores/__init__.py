"""The engines that sit behind the shell: one module (or package) per engine.

``ENGINES`` maps an engine name to (EngineKind, register block, constructor); the
device top level builds the engines a configuration asks for from it.
"""
