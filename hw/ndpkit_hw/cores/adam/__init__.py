"""The near-storage Adam/AdamW engine (Smart-Infinity): ``updater`` is the
bit-exact update datapath (golden: ``ndpkit.golden.adam``)."""
