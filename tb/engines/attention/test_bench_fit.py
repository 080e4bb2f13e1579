"""The attention bench's decode-model inputs: the fixed cost is the intercept of a line
through every context and the steady state its slope, so neither loss counts twice."""
import pytest

from tb.engines.attention.attention_bench import fit_contexts


def test_fit_recovers_fixed_cost_and_steady_state():
    port, steady, fixed = 64, 0.9, 9000
    rows = [{"context": n, "kv_bytes": 1024 * n, "cycles": fixed + 1024 * n / (port * steady)}
            for n in (128, 512, 2048, 8192)]
    fit = fit_contexts(rows, port)
    assert fit["fixed_cycles_per_command"] == pytest.approx(fixed)
    assert fit["steady_state_efficiency"] == pytest.approx(steady)
    # the old estimate (total minus bytes at the peak) grows with the context: not a constant
    old = [r["cycles"] - r["kv_bytes"] / port for r in rows]
    assert old[-1] > 2 * old[0]
