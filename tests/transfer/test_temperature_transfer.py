"""The temperature-transfer metric plugin on generated shifts with a known answer."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from prism_plugin.metrics.core import binary_logits, ece, softmax
from prism_plugin.metrics.temperature_transfer import (
    FEWSHOT_KS,
    TemperatureTransfer,
    fewshot_temperature,
    stratified_draw,
    stratified_quota,
)
from prism_plugin.contracts import CalibrationSet, RunContext
from prism_plugin.protocol.grid import SCALING


def _run(logits, y, cal_logits=None, cal_y=None, *, kind="transfer", seed=42, n_classes=None):
    calibration = {} if cal_logits is None else {"val": CalibrationSet(cal_logits, cal_y, "source val")}
    return RunContext(
        task="shift", adapter="a", model="M", dataset="src->tgt", fraction=1.0, seed=seed,
        n_classes=n_classes or logits.shape[1], n_train=100, forced_classes=0, y_test=y,
        proba_test=softmax(logits), logits_test=logits, calibration=calibration, meta={"kind": kind}, scaling=SCALING,
    )


def binary_shift(rng, n_src=4000, n_tgt=3000, scale=3.0):
    """Source: y ~ Bernoulli(sigmoid(d)), logits [-d, d] -> calibrated at T = 2 (identity).
    Target: the same generative model, but the probe's decision value is ``scale * d``
    (a scaled logit shift), so the oracle temperature is 2 * scale."""
    def draw(n):
        d = rng.normal(0.3, 1.5, n)
        y = (rng.random(n) < 1 / (1 + np.exp(-d))).astype(np.int64)
        return d, y

    ds, ys = draw(n_src)
    dt, yt = draw(n_tgt)
    return binary_logits(ds), ys, binary_logits(scale * dt), yt


def multiclass_shift(rng, n_src=4000, n_tgt=3000, k=4, scale=0.4):
    """y ~ Categorical(softmax(z)); the source probe outputs z (calibrated at T = 1), the
    target probe ``scale * z`` (under-confident for scale < 1): oracle T = scale."""
    def draw(n):
        z = rng.normal(0.0, 2.0, (n, k))
        p = softmax(z)
        y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        return z, y

    zs, ys = draw(n_src)
    zt, yt = draw(n_tgt)
    return zs, ys, scale * zt, yt


def torch_grid_temperature(logits, y, lo=0.1, hi=10.0, n=201, rounds=4):
    """Independent oracle: argmin of the NLL (torch log-softmax) by nested grids in log T.

    Returns (T, relative width of the last bracket)."""
    L = torch.tensor(np.array(logits), dtype=torch.float64)
    Y = torch.tensor(np.array(y), dtype=torch.long)
    a, b = float(np.log(lo)), float(np.log(hi))
    for _ in range(rounds):
        grid = torch.linspace(a, b, n, dtype=torch.float64)
        z = L[None, :, :] / torch.exp(grid)[:, None, None]
        nll = -torch.log_softmax(z, dim=2).gather(2, Y[None, :, None].expand(n, -1, 1)).mean(dim=(1, 2))
        i = int(torch.argmin(nll))
        a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, n - 1)])
    return float(np.exp((a + b) / 2)), float(np.exp(b - a))


@pytest.mark.parametrize("case", ["binary", "multiclass"])
def test_oracle_recovers_the_shift_and_source_t_does_not(case):
    rng = np.random.default_rng(7)
    if case == "binary":
        ls, ys, lt, yt = binary_shift(rng, scale=3.0)
        truth, neutral = 6.0, 2.0
    else:
        ls, ys, lt, yt = multiclass_shift(rng, scale=0.4)
        truth, neutral = 0.4, 1.0
    run = _run(lt, yt, ls, ys)
    out = TemperatureTransfer(repeats=5).run_metrics(run)
    t_src = run.temperature("val")
    # the source probe is calibrated: its T is the neutral one, far from the target's
    assert t_src == pytest.approx(neutral, rel=0.12)
    assert abs(np.log(t_src / truth)) > 0.6
    # the oracle recovers the scale of the shift ...
    assert out["temperature_oracle"] == pytest.approx(truth, rel=0.12)
    # ... and is the NLL minimiser on the target (second implementation: torch, grid search)
    t_grid, step = torch_grid_temperature(lt, yt)
    # (bounded Brent stops at xatol = 1e-5 in T)
    assert out["temperature_oracle"] == pytest.approx(t_grid, rel=2 * (step - 1) + 1e-4)
    # ECE after the oracle T is the fixed-bin ECE of softmax(L / T_oracle) ...
    assert out["ece_scaled_oracle"] == pytest.approx(ece(yt, softmax(lt / out["temperature_oracle"]), 15, "fixed"))
    # ... small, while the source T leaves the target miscalibrated
    ece_src = ece(yt, softmax(lt / t_src), 15, "fixed")
    assert out["ece_scaled_oracle"] < 0.04
    assert ece_src > out["ece_scaled_oracle"] + 0.05


def test_fewshot_temperature_approaches_the_oracle_as_k_grows():
    rng = np.random.default_rng(11)
    ls, ys, lt, yt = binary_shift(rng, scale=3.0)
    out = TemperatureTransfer(ks=(4, 16, 64, 256), repeats=60).run_metrics(_run(lt, yt, ls, ys))
    oracle_t, oracle_e = out["temperature_oracle"], out["ece_scaled_oracle"]
    t_err = {k: abs(np.log(out[f"temperature_fewshot_k{k}"] / oracle_t)) for k in (4, 16, 64, 256)}
    spread = {k: out[f"temperature_fewshot_k{k}_std"] for k in (4, 16, 64, 256)}
    e_gap = {k: out[f"ece_scaled_fewshot_k{k}"] - oracle_e for k in (4, 16, 64, 256)}
    assert spread[4] > spread[16] > spread[64] > spread[256]
    assert t_err[256] < t_err[16] and t_err[256] < 0.1
    assert e_gap[4] > e_gap[64] > e_gap[256]
    assert e_gap[256] < 0.02
    assert out["fewshot_draws"] == 60
    # a few target labels already beat the source temperature here
    ece_src = ece(yt, softmax(lt / 2.0), 15, "fixed")
    assert out["ece_scaled_fewshot_k64"] < ece_src


def test_fewshot_draws_are_stratified_seeded_and_ece_is_on_the_rest():
    rng = np.random.default_rng(3)
    _, _, lt, yt = multiclass_shift(rng, n_tgt=500)
    a = fewshot_temperature(lt, yt, 16, repeats=4, seed=42, bounds=(0.1, 10.0))
    b = fewshot_temperature(lt, yt, 16, repeats=4, seed=42, bounds=(0.1, 10.0))
    c = fewshot_temperature(lt, yt, 16, repeats=4, seed=123, bounds=(0.1, 10.0))
    np.testing.assert_array_equal(a["temperatures"], b["temperatures"])
    assert not np.array_equal(a["temperatures"], c["temperatures"])
    # replay the first draw by hand: same stream, T on the K drawn, ECE on the others
    g = np.random.default_rng([42, 16])
    idx = stratified_draw(yt, 16, g)
    counts = np.bincount(yt)
    np.testing.assert_array_equal(np.bincount(yt[idx], minlength=len(counts)), stratified_quota(counts, 16))
    from prism_plugin.protocol.temperature import fit_temperature

    t = fit_temperature(lt[idx], yt[idx])
    rest = np.setdiff1d(np.arange(len(yt)), idx)
    assert a["temperatures"][0] == t
    assert a["eces"][0] == pytest.approx(ece(yt[rest], softmax(lt[rest] / t), 15, "fixed"), abs=1e-15)


def test_stratified_quota_properties():
    assert stratified_quota([617, 360], 4).tolist() == [2, 2]
    assert stratified_quota([617, 360], 64).tolist() == [40, 24]
    assert stratified_quota([100] * 9, 4).sum() == 4  # fewer draws than classes
    assert stratified_quota([10, 1, 1, 0, 5], 4).tolist() == [1, 1, 1, 0, 1]
    rng = np.random.default_rng(0)
    for _ in range(500):
        c = rng.integers(0, 20, rng.integers(1, 8))
        if c.sum() < 2:
            continue
        k = int(rng.integers(1, c.sum()))
        q = stratified_quota(c, k)
        assert q.sum() == k and (q <= c).all() and (q >= 0).all()
        if k >= (c > 0).sum():
            assert (q[c > 0] >= 1).all()
    with pytest.raises(ValueError):
        stratified_quota([3, 2], 5)


def test_only_transfer_runs_and_default_columns():
    rng = np.random.default_rng(5)
    ls, ys, lt, yt = binary_shift(rng, n_tgt=400)
    plugin = TemperatureTransfer(repeats=2)
    assert plugin.run_metrics(_run(lt, yt, ls, ys, kind="indomain")) is None
    out = plugin.run_metrics(_run(lt, yt, ls, ys))
    expected = {"temperature_oracle", "ece_scaled_oracle", "fewshot_draws"}
    for k in FEWSHOT_KS:
        expected |= {f"temperature_fewshot_k{k}", f"temperature_fewshot_k{k}_std",
                     f"ece_scaled_fewshot_k{k}", f"ece_scaled_fewshot_k{k}_std"}
    assert set(out) == expected
    # nothing here depends on the source val: without it the oracle / few-shot values are unchanged
    assert plugin.run_metrics(_run(lt, yt)) == out


def test_k_larger_than_the_target_is_nan_with_one_warning():
    rng = np.random.default_rng(9)
    _, _, lt, yt = binary_shift(rng, n_tgt=40)
    plugin = TemperatureTransfer(ks=(4, 32, 40, 64), repeats=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = plugin.run_metrics(_run(lt, yt))
        again = plugin.run_metrics(_run(lt, yt, seed=123))  # another seed of the same task: no second warning
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1, msgs
    assert "K=40, 64" in msgs[0] and "has 40" in msgs[0]
    for k in (40, 64):
        assert np.isnan(out[f"temperature_fewshot_k{k}"]) and np.isnan(out[f"ece_scaled_fewshot_k{k}"])
        assert np.isnan(again[f"ece_scaled_fewshot_k{k}_std"])
    assert np.isfinite(out["ece_scaled_fewshot_k32"]) and np.isfinite(out["temperature_oracle"])


def test_plugin_rejects_bad_settings():
    with pytest.raises(ValueError):
        TemperatureTransfer(ks=(4, 4))
    with pytest.raises(ValueError):
        TemperatureTransfer(ks=(0,))
    with pytest.raises(ValueError):
        TemperatureTransfer(repeats=0)
