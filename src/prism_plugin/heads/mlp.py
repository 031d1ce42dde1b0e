"""The MLP probe head (kind ``mlp``): one hidden layer, trained with Adam, seeded and deterministic.

Architecture and training (the defaults, every one a setting):

* ``Linear(d, hidden) -> activation -> Linear(hidden, out)`` with ``hidden`` = 256 and ``activation`` = ``relu``
  (or ``gelu``, ``tanh``); ``out`` = 1 for binary problems (one logit ``d``, trained with binary cross-entropy) and
  K otherwise (K logits, softmax cross-entropy). PyTorch's default layer initialisation, drawn under
  ``torch.manual_seed(seed)``.
* ``torch.optim.Adam`` with ``lr`` = 1e-3 and L2 ``weight_decay`` = 1e-4 (Adam's coupled L2 penalty, not AdamW),
  mini-batches of ``batch_size`` = 256 (the whole subset when smaller), reshuffled every epoch by a generator
  seeded with ``seed``; inputs are the raw embeddings (no standardisation unless ``standardize: true``, which
  z-scores with the training subset's mean / std).
* ``epochs`` = 200 is the cap. With ``early_stopping`` (default true) a class-stratified ``val_fraction`` = 10 % of
  the training subset is held out (drawn with ``numpy.random.default_rng(seed)``; at least one sample of every
  class on each side); training stops once its mean loss has not improved by more than ``min_delta`` = 0 for
  ``patience`` = 10 epochs, and the weights of the best epoch are restored. When that split would hold fewer than
  ``min_val_samples`` = 20 samples (small label fractions) or some class has fewer than 2 samples, the head trains
  for exactly ``epochs`` epochs on the whole subset instead (``mode == "fixed_epochs"``). The held-out split is
  taken from the training subset only, never from the task's validation or test split (the temperature is still
  fitted on the validation split).
* ``converged``: True when early stopping triggered before the cap, False when the cap was reached first, None in
  fixed-epoch mode.

Decision values are the network's logits in the binary logit convention of the runner: binary problems return a 1-D
``d`` with probabilities ``[1 - sigmoid(d), sigmoid(d)]`` (exactly as the logistic probe), so the ``[-d, d]``
symmetric logits and the neutral temperature T = 2 apply unchanged; K > 2 returns the ``(N, K)`` logits with
``softmax`` probabilities.

Determinism: everything runs on the CPU in float32 (``device: cpu``, the default) on ``threads`` = 1 intra-op
thread, with ``torch.use_deterministic_algorithms(True)`` switched on for the fit; the thread count, that switch
and the global torch RNG state are restored afterwards. Two fits with the same seed and data give identical
outputs, on any machine with the same torch build. One thread is also the fastest choice for probe-sized problems
(thousands of rows); for very large training splits set ``threads: 0`` (torch's default pool) or more, at the price
of results that may then depend on the thread count. ``device: cuda`` is offered for large splits; it requests
deterministic algorithms in warn-only mode (and sets ``CUBLAS_WORKSPACE_CONFIG`` if unset), so bit-identical
repeats are promised on the CPU only.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from prism_plugin.errors import PrismError, suggest
from prism_plugin.heads.base import ProbeOutput, Setting
from prism_plugin.metrics.core import softmax

ACTIVATIONS = ("relu", "gelu", "tanh")
PREDICT_CHUNK = 20_000


def _device(value: str) -> str | None:
    if value == "cpu" or value.startswith("cuda"):
        return None
    return f"must be 'cpu' (default, deterministic) or 'cuda[:N]', got {value!r}"


#: the settings of kind ``mlp`` with their documented defaults (see the module docstring)
SETTINGS: dict[str, Setting] = {
    "hidden": Setting(int, 256, lo=1, hi=1_000_000),
    "activation": Setting(str, "relu", choices=ACTIVATIONS),
    "lr": Setting(float, 1e-3, lo=0.0, hi=10.0, lo_open=True),
    "weight_decay": Setting(float, 1e-4, lo=0.0, hi=1e6),
    "batch_size": Setting(int, 256, lo=1, hi=10**9),
    "epochs": Setting(int, 200, lo=1, hi=1_000_000),
    "early_stopping": Setting(bool, True),
    "val_fraction": Setting(float, 0.1, lo=0.0, hi=0.5, lo_open=True),
    "patience": Setting(int, 10, lo=1, hi=1_000_000),
    "min_delta": Setting(float, 0.0, lo=0.0, hi=1e6),
    "min_val_samples": Setting(int, 20, lo=1, hi=10**9),
    "standardize": Setting(bool, False),
    "device": Setting(str, "cpu", check=_device),
    "threads": Setting(int, 1, lo=0, hi=4096),
}
DEFAULTS: dict[str, Any] = {k: spec.default for k, spec in SETTINGS.items()}


def _writable(a) -> np.ndarray:
    """A C-contiguous, writable array for ``torch.from_numpy`` (a read-only memory map is copied:
    torch warns on, and could write through, a non-writable buffer)."""
    a = np.ascontiguousarray(a)
    return a if a.flags.writeable else a.copy()


class MLPProbe:
    """One-hidden-layer MLP probe; see the module docstring for every default."""

    kind = "mlp"

    def __init__(self, seed: int = 0, **settings):
        seed_spec = Setting(int, 0, lo=0, hi=2**32 - 1)
        for key, value in {"seed": seed, **settings}.items():
            spec = seed_spec if key == "seed" else SETTINGS.get(key)
            if spec is None:
                raise PrismError(f"probe.{key}: unknown key 'probe.{key}' for probe head 'mlp'{suggest(key, SETTINGS)} "
                                 f"(settings of mlp: {', '.join(SETTINGS)})")
            try:
                setattr(self, key, spec.validate(value))
            except ValueError as exc:
                raise PrismError(f"probe.{key}: {exc} (probe head mlp)") from None
        for key, value in DEFAULTS.items():
            self.__dict__.setdefault(key, value)
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
        from scipy.special import expit
        decision = self.decision_values(X)
        if decision.ndim == 1:
            p1 = expit(decision)
            proba = np.stack([1 - p1, p1], axis=1)
        else:
            proba = softmax(decision)
        return ProbeOutput(decision=decision, proba=proba)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.evaluate(X).proba


__all__ = ["MLPProbe", "DEFAULTS", "ACTIVATIONS", "SETTINGS"]
