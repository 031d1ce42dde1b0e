"""Model hub access: offline detection, weight downloads and one clear error.

Foundation-model weights live on the Hugging Face hub (several are gated: the user must accept the model's terms
there and log in). Two things make a naive ``from_pretrained`` miserable on a machine without network: the hub
client retries a failed request five times with back-off (about 25 s), and the resulting error does not say what to
do. This module avoids both:

* :func:`prepare_hub` decides once per process whether the hub may be used. ``--offline`` (``HF_HUB_OFFLINE=1``),
  ``TRANSFORMERS_OFFLINE=1`` or a failed 2-second TCP probe of the hub endpoint put the hub client in offline mode:
  the environment variable is set for libraries not imported yet, and the already imported ``huggingface_hub`` is
  switched over too (it reads the variable only at import time). In offline mode the client answers from its local
  cache at once and never retries.
* :func:`download_weights` fetches (or finds in the cache) a model's weight file and turns every failure into
  :func:`weights_error`: one line naming the model, the hub id and both remedies (log in / accept the terms, or
  pass a local ``--model-args checkpoint=PATH``).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Iterable, Sequence
from urllib.parse import urlparse

from prism_plugin.errors import PrismError

OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 2.0

_state: dict[str, object] = {}


class HubWeightsError(PrismError):
    """Pretrained weights could not be obtained (offline, unauthorised, missing)."""


def _truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def offline_requested() -> bool:
    """True when the user (or an earlier :func:`prepare_hub`) asked for offline mode."""
    if any(_truthy(os.environ.get(k)) for k in OFFLINE_ENV):
        return True
    hub = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(hub, "HF_HUB_OFFLINE", False))


def set_offline(reason: str = "") -> None:
    """Put the hub client in offline mode, whether or not it is imported already."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True
    _state["offline_reason"] = reason or _state.get("offline_reason") or "HF_HUB_OFFLINE=1"


def _endpoint() -> tuple[str, int]:
    """(host, port) to probe: the HTTPS proxy when one is configured, else the hub endpoint."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlparse(proxy or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    default_port = 443 if url.scheme in ("https", "") else 80
    return url.hostname or "huggingface.co", url.port or default_port


def network_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One TCP connect to the hub endpoint, bounded by ``timeout`` (DNS included); cached."""
    if "reachable" in _state:
        return bool(_state["reachable"])
    host, port = _endpoint()
    result = {"ok": False}

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result["ok"] = True
        except OSError:
            result["ok"] = False

    worker = threading.Thread(target=probe, name="prism-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout + 0.5)  # a hung resolver does not hold us longer than this
    _state["reachable"] = bool(result["ok"])
    return bool(result["ok"])


def prepare_hub(offline: bool | None = None) -> bool:
    """Decide whether the hub may be contacted; return True when working offline.

    Call it before any hub download. ``offline=True`` forces offline mode; by default the environment decides, then
    a short network probe.
    """
    if offline or offline_requested():
        set_offline("" if "offline_reason" in _state else "--offline / HF_HUB_OFFLINE=1")
        return True
    if not network_reachable():
        host, port = _endpoint()
        set_offline(f"no network: {host}:{port} unreachable")
        return True
    return False


def offline_reason() -> str:
    return str(_state.get("offline_reason") or "HF_HUB_OFFLINE=1")


def reset_state() -> None:
    """Forget the cached probe result (tests)."""
    _state.clear()


def hub_url(hub_id: str) -> str:
    base = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    return f"{base.rstrip('/')}/{hub_id}"


def weights_error(model: str, hub_id: str, problem: str, *, gated: bool) -> HubWeightsError:
    """The one error for unavailable weights: what happened, the hub id, both remedies."""
    login = (f"accept the model's terms at {hub_url(hub_id)} and log in (`hf auth login` or HF_TOKEN)"
             if gated else "connect to the hub (log in with `hf auth login` or HF_TOKEN if it asks)")
    return HubWeightsError(
        f"{model}: pretrained weights for {hub_id} {problem}; either (1) {login} and run online "
        f"(without --offline / HF_HUB_OFFLINE), or (2) pass a local copy with --model-args checkpoint=PATH "
        f"(a .safetensors/.bin/.pth state dict or a downloaded snapshot folder)"
    )


def _status_code(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return int(code) if isinstance(code, int) else None


def classify(exc: BaseException) -> str:
    """``offline`` | ``unauthorised`` | ``missing`` | ``other`` for a hub client exception."""
    name = type(exc).__name__
    names = {c.__name__ for c in type(exc).__mro__}
    code = _status_code(exc)
    if "GatedRepoError" in names or code in (401, 403):
        return "unauthorised"
    if "RepositoryNotFoundError" in names:
        # the hub answers 401 for private or gated repositories to anonymous users too
        return "unauthorised" if code == 401 else "missing"
    if "LocalEntryNotFoundError" in names or "OfflineModeIsEnabled" in names or name == "OfflineModeIsEnabled":
        return "offline"
    if "EntryNotFoundError" in names or "RevisionNotFoundError" in names or code == 404:
        return "missing"
    if isinstance(exc, (ConnectionError, TimeoutError, socket.error)):
        return "offline"
    return "other"


def describe_failure(kind: str, exc: BaseException | None = None) -> str:
    if kind == "offline":
        return (f"are not in the local hub cache and the hub cannot be reached ({offline_reason()})"
                if offline_requested() else "could not be downloaded (no connection to the hub)")
    if kind == "unauthorised":
        return "were refused by the hub (gated or private: not logged in, or the terms not accepted)"
    if kind == "missing":
        return "were not found on the hub (check the hub id / revision)"
    detail = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if exc is not None else "unknown error"
    return f"could not be fetched ({detail})"


def download_weights(hub_id: str, filenames: Sequence[str], *, model: str, gated: bool,
                     revision: str | None = None) -> Path:
    """Local path of the first of ``filenames`` that the hub (or its cache) has.

    Raises :class:`HubWeightsError` at once when offline and not cached, or when the hub refuses access.
    """
    prepare_hub()
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:  # pragma: no cover - huggingface_hub ships with timm
        raise PrismError(f"{model}: downloading {hub_id} needs huggingface_hub (pip install huggingface_hub)") from None
    last: tuple[str, BaseException | None] = ("missing", None)
    for filename in filenames:
        try:
            return Path(hf_hub_download(hub_id, filename, revision=revision))
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as one clear error
            from prism_plugin.storage import as_error, is_storage_fault

            if is_storage_fault(exc):  # the hub cache is full / read-only: name it, not the model
                raise as_error(exc, path=hub_cache_dir(), elsewhere="set HF_HUB_CACHE (or HF_HOME) to a writable "
                               "folder on another disk, or pass --model-args checkpoint=PATH") from None
            kind = classify(exc)
            if kind == "unauthorised":
                raise weights_error(model, hub_id, describe_failure(kind, exc), gated=gated) from None
            if kind == "other":
                raise weights_error(model, hub_id, describe_failure(kind, exc), gated=gated) from None
            if kind == "offline" or last[0] != "offline":
                last = (kind, exc)
    raise weights_error(model, hub_id, describe_failure(last[0], last[1]), gated=gated)


def hub_cache_dir() -> str:
    """The hub client's download cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return os.path.join(home, "hub")


def hub_files_in(folder: Path, names: Iterable[str]) -> Path | None:
    """The first of ``names`` present in ``folder`` (a local snapshot directory)."""
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None
