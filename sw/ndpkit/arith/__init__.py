"""Golden models: the bit-exact specification of what the gateware computes."""
