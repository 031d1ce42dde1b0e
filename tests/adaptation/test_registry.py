"""Adaptation methods are a registry: built-ins through ``register_adaptation``, a plugin's own the same way."""

from __future__ import annotations

import types

import numpy as np
import pytest

from prism_plugin import hookimpl
from prism_plugin.adaptation import calibration as cal
from prism_plugin.adaptation import config, tta
from prism_plugin.heads.standardised import StandardisedLogistic
from prism_plugin.errors import PrismError, UnknownNameError
from prism_plugin.plugins import PluginHost, get_host
from prism_plugin.protocol.grid import GridSpec, run_grid

from .shift_data import WBC, encoder_views

BUILTIN = ("tgtstd", "cbr", "cbr_mean", "bbse", "cbr_bbse", "shot_im", "oracle_cb",
           "calibration", "selectors", "decodability", "projection")
CALLS: list[dict] = []


def _fail(key, msg):
    return PrismError(f"{key}: {msg}")


def sharpen(X, inputs, *, base_proba, y_true, cache, meta):
    """A toy label-free method: square the probabilities and renormalise (same arg-max)."""
    CALLS.append({"n": len(X), "y_true": y_true, "cache": cache, "meta": meta})
    p = base_proba ** 2
    return tta.Adapted("sharpen", p / p.sum(axis=1, keepdims=True), None, "squared")


def flip(X, inputs, *, base_proba, y_true, cache, meta):
    """Predict the next class: changes the macro-F1, so the gain is not 0."""
    return tta.Adapted("flip", np.roll(base_proba, 1, axis=1), None)


def _plugin():
    mod = types.ModuleType("my_tta")

    @hookimpl
    def register_adaptation(register):
        register("my_method", sharpen, description="square the probabilities", aliases=("my-alias",))
        register("flip", flip, default=False)

    mod.register_adaptation = register_adaptation
    return mod


@pytest.fixture(scope="module")
def host():
    return PluginHost(extra_plugins=[_plugin()])


def test_builtins_are_registered_in_column_order():
    reg = get_host().adaptation
    assert tuple(reg.names()[:len(BUILTIN)]) == BUILTIN
    assert config.names("method") == BUILTIN[:7]
    assert {n: reg.meta(n, "role") for n in BUILTIN[7:]} == {"calibration": "analysis", "selectors": "analysis",
                                                            "decodability": "diagnostic", "projection": "diagnostic"}
    # today's transfer default: every method and analysis, not the diagnostics
    assert config.default_names() == BUILTIN[:9]
    assert reg.meta("oracle_cb", "needs_labels") is True and reg.meta("cbr", "needs_labels") is False
    assert "built in" in reg.entry("cbr").origin and reg.entry("cbr").description


def test_calibration_arms_have_one_source():
    rng = np.random.default_rng(0)
    logits, y = rng.normal(size=(80, 3)), rng.integers(0, 3, 80)
    arms, _ = cal.calibration_transfer(logits, y, source_temperature=1.3, cbr_logits=logits + 0.1, draws=2)
    assert tuple(arms) == cal.ARMS


def test_unknown_names_name_the_closest_and_the_available(host):
    with pytest.raises(PrismError) as exc:
        config.check_adaptation(["cbrr"], _fail)
    msg = str(exc.value)
    assert msg.startswith("adaptation: unknown entry 'cbrr'; did you mean 'cbr'")
    assert "available: " + ", ".join(BUILTIN) in msg and "my_method" not in msg
    with pytest.raises(PrismError, match="did you mean 'my_method'.*available: .*oracle_cb.*, my_method, flip"):
        config.check_adaptation(["my_methd"], _fail, host=host)
    assert config.check_adaptation(["cbr", "my-alias", "my_method", "flip"], _fail, host=host) == \
        ("cbr", "my_method", "flip")
    Xs = np.random.default_rng(0).normal(size=(40, 3))
    head = StandardisedLogistic().fit(Xs, np.arange(40) % 2)
    inputs = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=2)
    with pytest.raises(UnknownNameError, match="unknown adaptation method 'cbrr'; did you mean 'cbr'"):
        tta.adapt("cbrr", Xs, inputs)
    with pytest.raises(PrismError, match="'calibration' is an analysis, not a method"):
        tta.adapt("calibration", Xs, inputs)
    # a plugin method is dispatched like a built-in; a label-free method never sees the labels
    CALLS.clear()
    a = tta.adapt("my-alias", Xs, inputs, y_true=np.arange(40) % 2, host=host)
    assert a.method == "my_method" and a.proba.shape == (40, 2) and CALLS[-1]["y_true"] is None
    # oracle_cb (needs_labels) does
    assert tta.adapt("oracle_cb", Xs, inputs, y_true=np.arange(40) % 2).proba is not None


def test_bad_method_output_names_the_method():
    def broken(X, inputs, *, base_proba, y_true, cache, meta):
        return base_proba

    def crashes(X, inputs, *, base_proba, y_true, cache, meta):
        raise ValueError("boom")

    mod = types.ModuleType("bad_tta")

    @hookimpl
    def register_adaptation(register):
        register("broken", broken)
        register("crashes", crashes)

    mod.register_adaptation = register_adaptation
    host = PluginHost(extra_plugins=[mod])
    Xs = np.random.default_rng(1).normal(size=(30, 3))
    head = StandardisedLogistic().fit(Xs, np.arange(30) % 3)
    inputs = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=3)
    with pytest.raises(PrismError, match="'broken' \\(registered by passed in code\\) returned a ndarray"):
        tta.adapt("broken", Xs, inputs, host=host)
    with pytest.raises(PrismError, match="'crashes' .* failed: ValueError: boom"):
        tta.adapt("crashes", Xs, inputs, host=host)


def test_shot_im_reads_the_linear_trait():
    rng = np.random.default_rng(2)
    Xs, y = rng.normal(size=(60, 4)), np.arange(60) % 3
    head = StandardisedLogistic().fit(Xs, y)
    base = head.evaluate(Xs.astype(np.float32)).proba
    ok = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=3, head_kind="logistic_std",
                              head_linear=True)
    assert tta.shot_im(Xs, ok, base_proba=base).proba is not None
    no = tta.AdaptationInputs(head=head, source=tta.source_moments(Xs), n_classes=3, head_kind="mine",
                              head_linear=False)
    out = tta.shot_im(Xs, no, base_proba=base)
    assert out.proba is None and "head mine is not linear" in out.note


def _run(host, meta, n_models=1):
    s = encoder_views(n_models)["enc_a"]
    ident = {"task": "t", "adapter": "a", "model": "m", "dataset": "d", "meta": meta, "class_names": WBC}
    spec = GridSpec(fractions=(1.0,), seeds=(0,), probe={"kind": "logistic_std"})
    return next(iter(run_grid(s["train"], s["val"], s["test"], 5, spec, host, ident).values())), s


def test_a_plugin_method_gets_the_columns_of_a_builtin(host):
    chosen = config.check_adaptation(["tgtstd", "my_method", "flip"], _fail, host=host)
    priors = config.check_priors({"names": ["neutrophil_heavy"], "batch_sizes": [64], "draws": 2}, _fail)
    CALLS.clear()
    row, _ = _run(host, {"kind": "transfer", "adaptation": chosen, "priors": priors})
    for m in ("tgtstd", "my_method", "flip"):
        for col in (f"f1_macro_{m}", f"gain_{m}", f"ece_{m}", f"nll_{m}", f"prior__neutrophil_heavy__k64__f1_{m}"):
            assert col in row, col
        assert row[f"gain_{m}"] == pytest.approx(row[f"f1_macro_{m}"] - row["f1_macro"])
    cols = list(row)
    # registry order: built-ins first, then the plugin's methods in its registration order
    assert cols.index("gain_tgtstd") < cols.index("gain_my_method") < cols.index("gain_flip")
    assert "gain_cbr" not in row and "calx_raw_nll" not in row
    assert row["gain_my_method"] == pytest.approx(0.0)  # same arg-max
    assert row["gain_flip"] < 0
    assert all(c["y_true"] is None for c in CALLS) and {c["n"] for c in CALLS} == {300, 64}
    # every call reads the run's task keys, read-only
    assert all(c["meta"]["adaptation"] == chosen and c["meta"]["priors"] == priors for c in CALLS)
    with pytest.raises(TypeError):
        CALLS[0]["meta"]["kind"] = "indomain"
    # without an `adaptation:` key a transfer run computes the default entries: my_method yes, flip no
    row, _ = _run(host, {"kind": "transfer"})
    assert "gain_my_method" in row and "gain_flip" not in row and "gain_oracle_cb" in row
    assert "dom_decode_acc" not in row
    # the shared host (no plugin) knows nothing of it
    row, _ = _run(get_host(), {"kind": "transfer"})
    assert "gain_my_method" not in row and "gain_cbr" in row



def _labelled_plugin():
    mod = types.ModuleType("my_labelled_tta")

    @hookimpl
    def register_adaptation(register):
        register("peek", sharpen, default=False, needs_labels=True, description="uses the target labels")

    mod.register_adaptation = register_adaptation
    return mod


def test_a_labelled_plugin_method_is_an_upper_bound_in_the_audit_tables():
    """The audit reads the method order and the needs_labels trait from the host's registry."""
    import pandas as pd

    from prism_plugin.adaptation import priors as pri
    from prism_plugin.studies.hematology import inputs, tables

    host = PluginHost(extra_plugins=[_labelled_plugin()])
    rows = []
    for i, (model, seed) in enumerate([("enc_a", 0), ("enc_a", 1), ("enc_b", 0), ("enc_b", 1)]):
        row = {"model": model, "task": "t", "probe": "logistic_std", "fraction": 1.0, "seed": seed,
               "f1_macro": 0.6 + 0.01 * i, "id_f1_macro": 0.8, pri.column("balanced", 32, "f1_none"): 0.5}
        for j, m in enumerate(("peek", "cbr", "tgtstd")):  # columns out of registry order
            row[f"f1_macro_{m}"] = row["f1_macro"] + 0.01 * (j - 1)
            row[f"gain_{m}"] = 0.01 * (j - 1)
            row[pri.column("balanced", 32, f"f1_{m}")] = 0.5 + 0.02 * (j - 1)
        rows.append(row)
    runs = pd.DataFrame(rows)
    inp = inputs.prepare(runs, host=host)
    assert inp.upper_bounds["peek"] is True and inp.upper_bounds["oracle_cb"] is True
    assert inp.method_order[-1] == "peek" and inp.method_order[:7] == BUILTIN[:7]
    full, _scen, methods = tables.adaptation_tables(inp, B=100, seed=0)
    assert list(dict.fromkeys(full["method"])) == ["tgtstd", "cbr", "peek"]  # registry order
    bound = methods.set_index("method")["upper_bound"]
    assert bound.to_dict() == {"cbr": False, "peek": True, "tgtstd": False}
    # a host that does not register it knows nothing of its trait: an ordinary method, after the built-ins
    inp = inputs.prepare(runs, host=get_host())
    full, _scen, methods = tables.adaptation_tables(inp, B=100, seed=0)
    assert list(dict.fromkeys(full["method"])) == ["tgtstd", "cbr", "peek"]
    assert not methods.set_index("method").loc["peek", "upper_bound"]
    # without results directories the per-example tables' note is given by the caller, not twice
    _tables, headline = tables.build(inp, B=100)
    assert not any("per-example predictions" in n for n in headline["notes"])
