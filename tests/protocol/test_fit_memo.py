"""Probe fits shared between grids that fit on the same data (prism_plugin.protocol.fit_memo)."""

from __future__ import annotations

import numpy as np
import pytest

from prism_plugin.plugins import get_host
from prism_plugin.protocol.fit_memo import FitMemo
from prism_plugin.protocol.grid import GridSpec, run_grid
from prism_plugin.protocol.inputs import SplitArrays

IDENT = {"task": "t", "adapter": "a", "model": "m", "dataset": "d"}
SPEC = GridSpec(fractions=(0.1, 0.5, 1.0), seeds=(42, 123))
N_FITS = 2 + 2 + 1  # fraction 1.0: both seeds select the whole set (one lbfgs fit)


def _split(rng, n, k=3, shift=0.0):
    y = np.arange(n) % k
    X = (rng.normal(size=(n, 10)) + 1.5 * np.eye(10)[y] + shift).astype(np.float32)
    return SplitArrays(X, y)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    return _split(rng, 300), _split(rng, 90), _split(rng, 120), _split(rng, 150, shift=0.4)


def _grid(data, test, spec=SPEC, scope=None, train=None):
    tr, va, _, _ = data
    return run_grid(train or tr, va, test, 3, spec, get_host(()), IDENT, fits=scope)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].keys() == b[key].keys()
        for col, value in a[key].items():
            other = b[key][col]
            assert value == other or (value != value and other != other), (key, col, value, other)


def test_the_second_grid_on_the_same_data_refits_nothing_and_gets_the_same_numbers(data):
    _, _, test, target = data
    memo = FitMemo.plan([("m", "src")] * 3)
    first = memo.scope(("m", "src"), "data-1")
    own = _grid(data, test, scope=first)
    assert first.hits == 0 and first.stored == N_FITS == len(memo)
    memo.done(("m", "src"))
    second = memo.scope(("m", "src"), "data-1")
    shared = _grid(data, target, scope=second)  # another test split (a transfer's target)
    assert second.hits == N_FITS
    _same(shared, _grid(data, target))  # == a grid that fits its own probes
    _same(own, _grid(data, test))
    memo.done(("m", "src"))
    assert len(memo) == N_FITS  # one use left
    memo.done(("m", "src"))
    assert len(memo) == 0  # dropped after the last use


def test_nothing_is_shared_across_other_data_labels_settings_or_grid_state(data):
    tr, _, test, _ = data
    memo = FitMemo.plan([("m", "src")] * 9)

    def hits(key="data-1", **kw) -> int:
        scope = memo.scope(("m", "src"), key)
        _grid(data, test, scope=scope, **kw)
        return scope.hits

    assert hits() == 0
    assert hits() == N_FITS
    assert hits(key="data-2") == 0  # other features (the runner's content fingerprints)
    flipped = SplitArrays(tr.X, (tr.y + 1) % 3)
    assert hits(train=flipped) == 0  # other labels
    assert hits(spec=GridSpec(fractions=SPEC.fractions, seeds=SPEC.seeds,
                              probe={"kind": "logistic", "C": 0.1, "max_iter": 1000})) == 0
    fast = GridSpec(fractions=SPEC.fractions, seeds=SPEC.seeds,
                    probe={"kind": "logistic", "C": 1.0, "max_iter": 1000, "backend": "fast"})
    assert hits(spec=fast) == 0 and hits(spec=fast) == 0  # warm starts: a fit depends on its grid


def test_a_pair_used_once_is_never_stored(data):
    _, _, test, _ = data
    memo = FitMemo.plan([("m", "a"), ("m", "b"), ("m", "b")])
    scope = memo.scope(("m", "a"), "data-1")
    _grid(data, test, scope=scope)
    assert scope.stored == 0 and len(memo) == 0
    memo.done(("m", "a"))
    assert memo.scope(("m", "b"), "data-1").store and not memo.scope(("m", "a"), "data-1").store
