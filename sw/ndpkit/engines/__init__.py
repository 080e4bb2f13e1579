"""One folder per engine: ``ndpkit.engines.<name>`` holds the engine's golden model
(``golden``: ``check`` and ``execute``, the bit-exact specification of its gateware),
its driver client (``client``) and its integrations (PyTorch, scipy/networkx, the KV
cache, the near-storage optimizer).  Which engines exist, and which class serves each,
is :data:`ndpkit_spec.registry.REGISTRY`."""
