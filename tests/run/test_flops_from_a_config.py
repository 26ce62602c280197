"""tflops, mfu and max_memory from a config file, as a user runs it (tuitrain.core.flops; the count
itself is tested in tests/core/test_flops.py): the metrics in a run, and the config errors."""

from __future__ import annotations

import math

import pytest


def hand_count(sizes, batch):
    """Forward 2NB, backward 4NB, less the first layer's input gradient (its input needs none)."""
    weights = [a * b for a, b in zip(sizes, sizes[1:])]
    return 6 * sum(weights) * batch - 2 * weights[0] * batch


METRICS = 'train = ["loss", "accuracy", "tflops", "mfu", "max_memory", "step_time"]'


def test_run_logs_tflops_mfu_max_memory(tiny):
    text = tiny.config_text().replace('train = ["loss", "accuracy"]', METRICS, 1)
    cfg = tiny.write_config("flops.toml", text.replace('device = "cpu"', 'device = "cpu"\npeak_tflops = 0.25'))
    r = tiny.cli("run", cfg)
    assert r.returncode == 0, r.stderr
    plain = tiny.cli("run", tiny.config)
    assert plain.returncode == 0, plain.stderr
    counted, reference = tiny.run_dirs()
    events = tiny.read_events(counted)
    logged = [e for e in events if e.get("event") == "MetricsLogged" and e["split"] == "train" and e["scope"] == "step"]
    assert len(logged) == 21
    per_step = hand_count((4, 16, 3), 16)  # tinyproj's Net: 4 -> 16 -> 3, batches of 16
    for e in logged:
        m = e["metrics"]
        for key in ("tflops", "mfu", "max_memory"):
            assert math.isfinite(m[key]) and m[key] > 0, (key, m)
        assert m["mfu"] == pytest.approx(m["tflops"] / 0.25 * 100, rel=1e-12)
        assert m["tflops"] == pytest.approx(per_step / m["step_time"] / 1e12, rel=1e-9)
    # the count changes nothing: the same losses, bit for bit, as the run without these metrics
    assert tiny.step_losses(events) == tiny.step_losses(tiny.read_events(reference))


def test_mfu_on_a_cpu_without_peak_is_a_config_error(tiny):
    text = tiny.config_text().replace('train = ["loss", "accuracy"]', 'train = ["loss", "mfu"]', 1)
    r = tiny.cli("run", tiny.write_config("mfu.toml", text))
    assert r.returncode == 2
    assert "train.peak_tflops" in r.stderr and "mfu" in r.stderr
    assert tiny.run_dirs() == []


@pytest.mark.parametrize(
    "line,key",
    [
        ("peak_tflops = -1", "train.peak_tflops"),
        ('flops_per_step = "lots"', "train.flops_per_step"),
        ("flops_per_step = -5e9", "train.flops_per_step"),
    ],
)
def test_bad_amounts_are_config_errors(tiny, forget_tinyproj, line, key):
    from tuitrain.config import ConfigError, load_config
    from tuitrain.run.preflight import preflight

    path = tiny.write_config("bad.toml", tiny.config_text().replace('device = "cpu"', f'device = "cpu"\n{line}'))
    with pytest.raises(ConfigError) as info:
        preflight(load_config(path))
    assert info.value.key == key
