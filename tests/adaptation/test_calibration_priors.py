"""Calibration transfer, prior resampling and the task keys ``adaptation`` / ``priors``."""

from __future__ import annotations

import numpy as np
import pytest

from prism_plugin.adaptation import calibration as cal
from prism_plugin.adaptation import priors as pri
from prism_plugin.adaptation.config import check_adaptation, check_priors
from prism_plugin.errors import PrismError
from prism_plugin.metrics.core import ece, softmax
from prism_plugin.metrics.temperature_transfer import fewshot_temperature

from .shift_data import WBC


def _fail(key, msg):
    return PrismError(f"{key}: {msg}")


def _scaled_problem(scale=3.0, n=2000, k=4, seed=0):
    """Calibrated logits L (labels drawn from softmax(L)); the probe reports L * scale."""
    rng = np.random.default_rng(seed)
    L = rng.normal(scale=1.5, size=(n, k))
    p = softmax(L)
    y = (rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1)  # one categorical draw per row
    return L * scale, y


def test_top_label_ece_equals_prism_ece_for_multiclass_and_differs_for_binary():
    logits, y = _scaled_problem()
    p = softmax(logits)
    for scheme in ("fixed", "adaptive"):
        assert cal.top_label_ece(y, p, 15, scheme) == pytest.approx(ece(y, p, 15, scheme), abs=1e-12)
    pb = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]])
    yb = np.array([0, 0, 1])
    # top-label: confidences .9 .8 .6 (bins 13, 12, 9), correct 1 0 1 -> (.1 + .8 + .4) / 3
    assert cal.top_label_ece(yb, pb, 15) == pytest.approx((0.1 + 0.8 + 0.4) / 3)
    # a confidence of exactly 1.0 falls in no fixed bin (PRISM convention) but counts in N
    assert cal.top_label_ece(np.array([0, 1]), np.array([[0.0, 1.0], [0.9, 0.1]]), 15) == pytest.approx(0.9 / 2)


def test_oracle_temperature_recovers_the_scale_and_source_t_does_not():
    logits, y = _scaled_problem(scale=3.0)
    arms, temps = cal.calibration_transfer(logits, y, source_temperature=1.0, ks=(16,), draws=5, seed=0)
    assert temps["oracle"] == pytest.approx(3.0, rel=0.1)
    assert arms["oracle"]["ece_top"] < 0.03 < arms["src"]["ece_top"]
    assert arms["oracle"]["nll"] <= arms["raw"]["nll"]
    assert arms["src"] == arms["raw"]  # T = 1 is the identity
    assert arms["k16"]["ece_top"] < arms["raw"]["ece_top"]
    assert set(arms) == {"raw", "src", "oracle", "k16"}
    flat = cal.flatten(arms, temps)
    assert flat["calx_oracle_brier"] == arms["oracle"]["brier"] and "calx_T_oracle" in flat


def test_few_shot_draws_are_those_of_the_temperature_transfer_plugin():
    logits, y = _scaled_problem(n=300)
    for k in (4, 16):
        t, _ = cal.few_shot_temperature(logits, y, k, draws=7, seed=42)
        theirs = fewshot_temperature(logits, y, k, repeats=7, seed=42, bounds=(0.1, 10.0))
        assert t == pytest.approx(float(np.mean(theirs["temperatures"])), abs=1e-12)
    t, row = cal.few_shot_temperature(logits[:10], y[:10], 16)
    assert np.isnan(t) and np.isnan(row["ece_top"])


def test_counts_and_resampling():
    assert pri.counts_for_batch(np.array([0.6, 0.3, 0.06, 0.03, 0.01]), 32).tolist() == [19, 10, 2, 1, 0]
    assert pri.counts_for_batch(np.full(5, 0.2), 8).tolist() == [2, 2, 2, 1, 1]
    y = np.repeat(np.arange(5), [300, 100, 50, 5, 40])
    vec = pri.prior_vector("clinical", 5, WBC)
    idx, note = pri.resample(y, vec, 400, pri.draw_seed(0, "clinical", 400, 0))
    assert np.bincount(y[idx], minlength=5).tolist() == [240, 120, 24, 12, 4]
    assert note == ""  # eosinophils: 12 wanted, 5 present -> drawn with replacement
    again, _ = pri.resample(y, vec, 400, pri.draw_seed(0, "clinical", 400, 0))
    np.testing.assert_array_equal(idx, again)
    y_missing = y[y != 4]
    idx2, note2 = pri.resample(y_missing, vec, 100, np.random.default_rng(0))
    assert "absent" in note2 and 4 not in y_missing[idx2] and len(idx2) == 100
    batches = list(pri.batches(y, {"balanced": np.full(5, 0.2)}, [8, 16], draws=3))
    assert [(b.k, b.draw) for b in batches] == [(8, 0), (8, 1), (8, 2), (16, 0), (16, 1), (16, 2)]


def test_named_priors_and_their_errors():
    assert pri.prior_vector("neutrophil_heavy", 5, ("Basophils", "Eosinophils", "Lymphocytes", "Monocytes",
                                                   "Neutrophils"))[4] == pytest.approx(0.80)
    mild = pri.prior_vector("mild", 5, WBC)
    assert mild.sum() == pytest.approx(1.0) and mild[0] == pytest.approx(0.4)
    assert pri.prior_vector("dominant:tumour:0.7", 3, ("normal", "stroma", "tumour")).tolist() == \
        pytest.approx([0.15, 0.15, 0.7])
    assert pri.prior_vector("natural", 3, (), target_labels=np.array([0, 0, 1, 2])).tolist() == [0.5, 0.25, 0.25]
    assert pri.prior_vector("mine", 2, ("a", "b"), custom={"mine": [1, 3]}).tolist() == [0.25, 0.75]
    with pytest.raises(PrismError, match="WBC prior"):
        pri.prior_vector("clinical", 2, ("negative", "positive"))
    with pytest.raises(PrismError, match="not one of the task's classes"):
        pri.prior_vector("dominant:x:0.5", 2, ("a", "b"))
    assert pri.parse_column(pri.column("neutrophil_heavy", 32, "f1_cbr_mean")) == ("neutrophil_heavy", 32, "f1_cbr_mean")
    assert pri.parse_column("gain_cbr") is None


def test_config_validation_messages():
    assert check_adaptation(["cbr", "cbr-mean", "cbr"], _fail) == ("cbr", "cbr_mean")
    with pytest.raises(PrismError, match="did you mean 'cbr'"):
        check_adaptation(["cbrr"], _fail)
    cfg = check_priors({"custom": {"lymph": {"lymphocyte": 3, "neutrophil": 1}}, "batch_sizes": [400, 32]}, _fail)
    assert cfg["names"] == ["lymph"] and cfg["batch_sizes"] == [32, 400] and cfg["draws"] == 10
    assert check_priors({}, _fail)["names"] == ["balanced", "mild", "clinical", "neutrophil_heavy"]
    for bad, key in [({"names": ["clinicl"]}, "priors.names"), ({"batch_sizes": [1]}, "priors.batch_sizes"),
                     ({"draws": 0}, "priors.draws"), ({"custom": {"balanced": [1, 1]}}, "priors.custom.balanced"),
                     ({"custom": {"x": {"a": -1}}}, "priors.custom.x"), ({"size": 3}, "priors.size"),
                     ({"names": ["dominant:a"]}, "priors.names")]:
        with pytest.raises(PrismError, match=key.replace(".", r"\.")):
            check_priors(bad, _fail)


def test_task_yaml_keys_are_validated_with_file_and_key(tmp_path):
    from prism_plugin.tasks.index import TaskIndex

    body = ("task: t\ndataset: D\nclass_names: [a, b]\nsource: {type: precomputed}\n"
            "splits: {train: train, test: test}\n")
    (tmp_path / "ok.yaml").write_text(body + "adaptation: [cbr, selectors]\npriors: {names: [balanced], draws: 2}\n")
    (tmp_path / "bad.yaml").write_text(body.replace("task: t", "task: u") + "adaptation: [cbr, sotu]\n")
    index = TaskIndex([tmp_path])
    task = index.load("t")
    assert task.adaptation == ("cbr", "selectors") and task.priors["draws"] == 2
    assert task.resolved()["priors"]["names"] == ["balanced"]
    with pytest.raises(PrismError, match=r"bad\.yaml:6: adaptation: unknown entry 'sotu'"):
        index.load("u")
    off = index.load("t", ["adaptation=[]"])
    assert off.adaptation == ()
    # priors are resolved against the task's classes at validation time
    with pytest.raises(PrismError, match="priors.names: prior 'clinical'.*WBC prior"):
        index.load("t", ["priors={names: [clinical]}"])
    with pytest.raises(PrismError, match="priors.custom.x: lists 3 weights for a task with 2 classes"):
        index.load("t", ["priors={custom: {x: [1, 2, 3]}}"])
    assert index.load("t", ["priors={names: [dominant:b:0.9]}"]).priors["names"] == ["dominant:b:0.9"]
