"""The audit's directions on a controlled-shift generator where the mechanism is known.

Source and target share class clusters; the target differs by a first-moment offset (partly along
class-discriminative directions, so the source probe is biased on the target). Expected:

* under a skewed target prior, global re-standardisation (tgtstd) removes the offset but also the
  majority class's pull on the batch mean, so it loses macro-F1; class-balanced re-standardisation
  (cbr) removes the offset without that bias, so it gains;
* BBSE re-weights predictions for a label-prior change, which a pure feature offset is not, so it
  does not repair it;
* projecting out the between-domain direction and retraining restores the offset-free accuracy;
* with an offset, domain identity is linearly decodable (about 1); without it, at chance.
"""

from __future__ import annotations

import numpy as np
import pytest

from prism_plugin.adaptation import stats, tta
from prism_plugin.studies.hematology.generator import ShiftGenerator
from prism_plugin.heads.standardised import StandardisedLogistic
from prism_plugin.metrics.core import f1_macro

SKEWED = [0.8, 0.05, 0.05, 0.05, 0.05]
SEEDS = (0, 1, 2, 3)


def _setup(seed: int, offset: float = 4.0, align: float | None = 0.5):
    g = ShiftGenerator(n_classes=5, dim=16, class_sep=6.0, seed=seed)
    src, tgt = g.domain("source"), g.domain("target", offset, align=align)
    Xs, ys = g.sample(src, 600, seed=1)
    Xv, yv = g.sample(src, 200, seed=2)
    head = StandardisedLogistic(seed=0).fit(Xs, ys)
    inputs = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=5,
                                  val_pred=head.evaluate(Xv).proba.argmax(1), val_y=yv)
    return g, src, tgt, head, inputs, (Xs, ys), (Xv, yv)


def _gains(seed: int, prior, methods=("tgtstd", "cbr", "bbse")) -> dict[str, float]:
    g, _, tgt, head, inputs, _, _ = _setup(seed)
    X, y = g.sample(tgt, 400, prior=prior, seed=3)
    base = head.evaluate(X).proba
    f0 = f1_macro(y, base.argmax(1))
    return {m: f1_macro(y, tta.adapt(m, X, inputs, base_proba=base).pred) - f0 for m in methods}


def test_offset_hurts_the_source_probe():
    g, src, tgt, head, *_ = _setup(0)
    X0, y0 = g.sample(src, 400, seed=3)
    X1, y1 = g.sample(tgt, 400, seed=3)
    assert f1_macro(y0, head.evaluate(X0).proba.argmax(1)) - f1_macro(y1, head.evaluate(X1).proba.argmax(1)) > 0.05


def test_skewed_prior_tgtstd_loses_cbr_gains():
    gains = [_gains(s, SKEWED) for s in SEEDS]
    for g in gains:
        assert g["tgtstd"] < -0.05, gains  # hurts in every scenario
        assert g["cbr"] > 0.0, gains       # helps in every scenario
    assert np.mean([g["cbr"] for g in gains]) > 0.05


def test_balanced_prior_both_help():
    gains = [_gains(s, None) for s in SEEDS]
    assert np.mean([g["tgtstd"] for g in gains]) > 0.03
    assert np.mean([g["cbr"] for g in gains]) > 0.03


def test_bbse_does_not_repair_a_pure_feature_offset():
    gains = [_gains(s, None) for s in SEEDS]  # balanced target: only the features moved
    for g in gains:
        assert g["bbse"] <= 0.005, gains
        assert g["cbr"] - g["bbse"] > 0.03, gains


def test_removing_the_offset_direction_restores_accuracy():
    g, src, tgt, head, _, train, val = _setup(0)
    Xt, yt = g.sample(tgt, 400, seed=3)
    X0, y0 = g.sample(src, 400, seed=3)  # the same draws without the offset
    clean = f1_macro(y0, head.evaluate(X0).proba.argmax(1))
    res = stats.subspace_projection(train, {"tgt": (Xt, yt), "id": val}, lambda: StandardisedLogistic(seed=0), k=1)
    assert res["k"] == 1
    assert res["delta_tgt"] > 0.03
    assert clean - res["f1_tgt_before"] > 0.03
    assert res["f1_tgt_after"] == pytest.approx(clean, abs=0.03)
    assert abs(res["delta_id"]) < 0.03  # little in-domain cost


def test_domain_decodability_with_and_without_offset():
    g = ShiftGenerator(n_classes=5, dim=16, class_sep=6.0, seed=0)
    src = g.domain("source")
    Xs, ys = g.sample(src, 500, seed=1)
    Xt, yt = g.sample(g.domain("target", 6.0, align=0.0), 500, seed=2)
    X0, y0 = g.sample(src, 500, seed=2)  # a second sample of the source domain: no offset
    with_offset = stats.domain_decodability([(Xs, ys), (Xt, yt)], draws=2, seed=0)
    without = stats.domain_decodability([(Xs, ys), (X0, y0)], draws=2, seed=0)
    assert with_offset["domain_acc"] > 0.97
    assert with_offset["within_class_acc"] > 0.95
    assert abs(with_offset["permutation_acc"] - 0.5) < 0.1
    assert abs(without["domain_acc"] - 0.5) < 0.1
    assert with_offset["class_acc"] > 0.9
    assert with_offset["chance"] == 0.5
