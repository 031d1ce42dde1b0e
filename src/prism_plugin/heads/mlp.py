"""The MLP probe head (kind ``mlp``): one hidden layer, trained with Adam, seeded and deterministic.

Selected from a task YAML with ``probe: {kind: mlp}`` (any setting below may be
given, e.g. ``probe: {kind: mlp, hidden: 512, weight_decay: 1e-3}``) or from
Python with ``prism_plugin.evaluate(..., probe={"kind": "mlp"})``.

Architecture and training (the defaults, every one a setting):

* ``Linear(d, hidden) -> activation -> Linear(hidden, out)`` with ``hidden`` =
  256 and ``activation`` = ``relu`` (or ``gelu``, ``tanh``); ``out`` = 1 for
  binary problems (one logit ``d``, trained with binary cross-entropy) and K
  otherwise (K logits, softmax cross-entropy). PyTorch's default layer
  initialisation, drawn under ``torch.manual_seed(seed)``.
* ``torch.optim.Adam`` with ``lr`` = 1e-3 and L2 ``weight_decay`` = 1e-4
  (Adam's coupled L2 penalty, not AdamW), mini-batches of ``batch_size`` = 256
  (the whole subset when smaller), reshuffled every epoch by a generator seeded
  with ``seed``; inputs are the raw embeddings (no standardisation unless
  ``standardize: true``, which z-scores with the training subset's mean / std).
* ``epochs`` = 200 is the cap. With ``early_stopping`` (default true) a
  class-stratified ``val_fraction`` = 10 % of the training subset is held out
  (drawn with ``numpy.random.default_rng(seed)``; at least one sample of every
  class on each side); training stops once its mean loss has not improved by
  more than ``min_delta`` = 0 for ``patience`` = 10 epochs, and the weights of
  the best epoch are restored. When that split would hold fewer than
  ``min_val_samples`` = 20 samples (small label fractions) or some class has
  fewer than 2 samples, the head trains for exactly ``epochs`` epochs on the
  whole subset instead (``mode == "fixed_epochs"``). The held-out split is
  taken from the training subset only, never from the task's validation or
  test split (the temperature is still fitted on the validation split).
* ``converged``: True when early stopping triggered before the cap, False
  when the cap was reached first, None in fixed-epoch mode.

Decision values are the network's logits in the binary logit convention of the
runner: binary problems return a 1-D ``d`` with probabilities
``[1 - sigmoid(d), sigmoid(d)]`` (exactly as the logistic probe), so the
``[-d, d]`` symmetric logits and the neutral temperature T = 2 apply
unchanged; K > 2 returns the ``(N, K)`` logits with ``softmax`` probabilities.

Determinism: everything runs on the CPU in float32 (``device: cpu``, the
default) on ``threads`` = 1 intra-op thread, with
``torch.use_deterministic_algorithms(True)`` switched on for the fit; the
thread count, that switch and the global torch RNG state are restored
afterwards. Two fits with the same seed and data give identical outputs, on any
machine with the same torch build. One thread is also the fastest choice for
probe-sized problems (thousands of rows); for very large training splits set
``threads: 0`` (torch's default pool) or more, at the price of results that may
then depend on the thread count. ``device: cuda`` is offered for large splits;
it requests deterministic algorithms in warn-only mode (and sets
``CUBLAS_WORKSPACE_CONFIG`` if unset), so bit-identical repeats are promised on
the CPU only.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from scipy.special import expit

from prism_plugin.errors import PrismError
from prism_plugin.metrics.core import softmax
from prism_plugin.protocol.probe import ProbeOutput

ACTIVATIONS = ("relu", "gelu", "tanh")
PREDICT_CHUNK = 20_000

#: The documented defaults (also what ``settings()`` reports for an unconfigured head).
DEFAULTS: dict[str, Any] = {
    "hidden": 256,
    "activation": "relu",
    "lr": 1e-3,
    "weight_decay": 1e-4,
    "batch_size": 256,
    "epochs": 200,
    "early_stopping": True,
    "val_fraction": 0.1,
    "patience": 10,
    "min_delta": 0.0,
    "min_val_samples": 20,
    "standardize": False,
    "device": "cpu",
    "threads": 1,
}


def _fail(key: str, message: str) -> PrismError:
    return PrismError(f"probe.{key}: {message} (MLP probe head, kind: mlp)")


def _int(value: Any, key: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        else:
            raise _fail(key, f"must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise _fail(key, f"must be between {lo} and {hi}, got {value}")
    return int(value)


def _float(value: Any, key: str, lo: float, hi: float, lo_open: bool = False) -> float:
    if isinstance(value, bool):
        raise _fail(key, f"must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise _fail(key, f"must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        raise _fail(key, f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value}")
    return v


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise _fail(key, f"must be true or false, got {value!r}")


def _writable(a) -> np.ndarray:
    """A C-contiguous, writable array for ``torch.from_numpy`` (a read-only memory map is copied:
    torch warns on, and could write through, a non-writable buffer)."""
    a = np.ascontiguousarray(a)
    return a if a.flags.writeable else a.copy()


class MLPProbe:
    """One-hidden-layer MLP probe; see the module docstring for every default."""

    kind = "mlp"

    def __init__(self, seed: int = 0, hidden: int = 256, activation: str = "relu", lr: float = 1e-3,
                 weight_decay: float = 1e-4, batch_size: int = 256, epochs: int = 200,
                 early_stopping: bool = True, val_fraction: float = 0.1, patience: int = 10,
                 min_delta: float = 0.0, min_val_samples: int = 20, standardize: bool = False,
                 device: str = "cpu", threads: int = 1):
        self.seed = _int(seed, "seed", 0, 2**32 - 1)
        self.hidden = _int(hidden, "hidden", 1, 1_000_000)
        if activation not in ACTIVATIONS:
            raise _fail("activation", f"must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.lr = _float(lr, "lr", 0.0, 10.0, lo_open=True)
        self.weight_decay = _float(weight_decay, "weight_decay", 0.0, 1e6)
        self.batch_size = _int(batch_size, "batch_size", 1, 10**9)
        self.epochs = _int(epochs, "epochs", 1, 1_000_000)
        self.early_stopping = _bool(early_stopping, "early_stopping")
        self.val_fraction = _float(val_fraction, "val_fraction", 0.0, 0.5, lo_open=True)
        self.patience = _int(patience, "patience", 1, 1_000_000)
        self.min_delta = _float(min_delta, "min_delta", 0.0, 1e6)
        self.min_val_samples = _int(min_val_samples, "min_val_samples", 1, 10**9)
        self.standardize = _bool(standardize, "standardize")
        if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda")):
            raise _fail("device", f"must be 'cpu' (default, deterministic) or 'cuda[:N]', got {device!r}")
        self.device = device
        self.threads = _int(threads, "threads", 0, 4096)
        self.classes_: np.ndarray | None = None
        self.converged: bool | None = None
        self.mode: str = ""
        self.epochs_run: int = 0
        self.best_epoch: int = 0
        self._net = None
        self._mean: np.ndarray | None = None
        self._scale: np.ndarray | None = None

    def settings(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: getattr(self, k) for k in DEFAULTS}}

    # ------------------------------------------------------------------ fitting
    def _internal_split(self, y_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Class-stratified (train, held-out) positions, or None when too small to split."""
        if not self.early_stopping:
            return None
        rng = np.random.default_rng(self.seed)
        train, held = [], []
        for c in np.unique(y_idx):
            pos = np.flatnonzero(y_idx == c)
            if len(pos) < 2:
                return None
            n_val = min(max(1, int(round(len(pos) * self.val_fraction))), len(pos) - 1)
            perm = rng.permutation(pos)
            held.append(perm[:n_val])
            train.append(perm[n_val:])
        held_all = np.sort(np.concatenate(held))
        if len(held_all) < self.min_val_samples:
            return None
        return np.sort(np.concatenate(train)), held_all

    def fit(self, X: np.ndarray, y: np.ndarray) -> "MLPProbe":
        import torch

        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y)
        if X.ndim != 2 or len(X) != len(y) or len(y) == 0:
            raise PrismError(f"MLP probe: fit needs an (N, d) matrix and N labels, got {X.shape} and {y.shape}")
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise PrismError("MLP probe: the training subset holds a single class; a probe needs at least 2")
        y_idx = np.searchsorted(self.classes_, y).astype(np.int64)
        binary = len(self.classes_) == 2
        if self.standardize:
            self._mean = X.mean(axis=0)
            sd = X.std(axis=0)
            self._scale = np.where(sd > 0, sd, 1.0).astype(np.float32)
            X = (X - self._mean) / self._scale
        split = self._internal_split(y_idx)
        self.mode = "early_stopping" if split is not None else "fixed_epochs"

        device = torch.device(self.device)
        was_deterministic = torch.are_deterministic_algorithms_enabled()
        was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        was_threads = torch.get_num_threads()
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise PrismError(f"probe.device: {self.device!r} requested but CUDA is not available; use cpu")
            # cuBLAS is only deterministic with a fixed workspace; without it, warn instead of failing
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        else:
            torch.use_deterministic_algorithms(True)
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                act = {"relu": torch.nn.ReLU, "gelu": torch.nn.GELU, "tanh": torch.nn.Tanh}[self.activation]
                net = torch.nn.Sequential(
                    torch.nn.Linear(X.shape[1], self.hidden), act(),
                    torch.nn.Linear(self.hidden, 1 if binary else len(self.classes_)),
                ).to(device)
            gen = torch.Generator().manual_seed(self.seed)
            Xt = torch.from_numpy(_writable(X)).to(device)
            yt = torch.from_numpy(_writable(y_idx)).to(device)
            if split is not None:
                tr, va = (torch.from_numpy(_writable(s)).to(device) for s in split)
                X_tr, y_tr, X_va, y_va = Xt[tr], yt[tr], Xt[va], yt[va]
            else:
                X_tr, y_tr, X_va, y_va = Xt, yt, None, None

            def loss_of(logits, target):
                if binary:
                    return torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0], target.float())
                return torch.nn.functional.cross_entropy(logits, target)

            opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
            n = X_tr.shape[0]
            bs = min(self.batch_size, n)
            best_loss, best_state, wait = math.inf, None, 0
            self.converged = None if split is None else False
            self.epochs_run = 0
            for epoch in range(1, self.epochs + 1):
                net.train()
                order = torch.randperm(n, generator=gen).to(device)
                for start in range(0, n, bs):
                    idx = order[start:start + bs]
                    opt.zero_grad(set_to_none=True)
                    loss_of(net(X_tr[idx]), y_tr[idx]).backward()
                    opt.step()
                self.epochs_run = epoch
                if X_va is None:
                    continue
                net.eval()
                with torch.no_grad():
                    val_loss = float(loss_of(net(X_va), y_va))
                if val_loss < best_loss - self.min_delta:
                    best_loss, wait, self.best_epoch = val_loss, 0, epoch
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                else:
                    wait += 1
                    if wait >= self.patience:
                        self.converged = True
                        break
            if best_state is not None:
                net.load_state_dict(best_state)
            elif X_va is None:
                self.best_epoch = self.epochs_run
            net.eval()
        finally:
            torch.use_deterministic_algorithms(was_deterministic, warn_only=was_warn_only)
            if torch.get_num_threads() != was_threads:
                torch.set_num_threads(was_threads)
        self._net = net
        return self

    # ------------------------------------------------------------------ outputs
    def decision_values(self, X: np.ndarray) -> np.ndarray:
        """Logits: ``(N,)`` for binary problems (the class-1 logit ``d``), ``(N, K)`` otherwise."""
        import torch

        if self._net is None or self.classes_ is None:
            raise PrismError("MLP probe: call fit() before evaluating")
        device = next(self._net.parameters()).device
        parts = []
        was_threads = torch.get_num_threads()
        if self.threads and self.threads != was_threads:
            torch.set_num_threads(self.threads)
        try:
            parts = self._forward(X, device, torch)
        finally:
            if torch.get_num_threads() != was_threads:
                torch.set_num_threads(was_threads)
        k_out = 1 if len(self.classes_) == 2 else len(self.classes_)
        logits = np.concatenate(parts) if parts else np.zeros((0, k_out))
        return logits[:, 0] if len(self.classes_) == 2 else logits

    def _forward(self, X, device, torch) -> list[np.ndarray]:
        parts = []
        with torch.no_grad():
            for start in range(0, X.shape[0], PREDICT_CHUNK):
                chunk = np.asarray(X[start:start + PREDICT_CHUNK], dtype=np.float32)
                if self.standardize:
                    chunk = (chunk - self._mean) / self._scale
                out = self._net(torch.from_numpy(_writable(chunk)).to(device))
                parts.append(out.cpu().numpy().astype(np.float64))
        return parts

    def evaluate(self, X: np.ndarray) -> ProbeOutput:
        decision = self.decision_values(X)
        if decision.ndim == 1:
            p1 = expit(decision)
            proba = np.stack([1 - p1, p1], axis=1)
        else:
            proba = softmax(decision)
        return ProbeOutput(decision=decision, proba=proba)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.evaluate(X).proba


__all__ = ["MLPProbe", "DEFAULTS", "ACTIVATIONS"]
