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
* :func:`resolve_revision` turns a hub id and a revision name (``main``, a branch, a tag, or a 40-hex commit) into
  the commit whose weights are loaded, before anything is extracted, so the commit is part of the embedding cache
  key: a 40-hex revision needs no call; online, one metadata call (``model_info``) names the commit; offline, the
  hub client's local cache (``refs/<revision>`` -> ``snapshots/<commit>``) does. Offline with no local snapshot
  the commit last resolved for that name (recorded under the embedding cache, ``hub_revisions/``) is used, else
  the name alone; both are said (:attr:`Revision.note`) as "upstream revision not checked".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
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



# --------------------------------------------------------------------------- the commit actually loaded
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
#: seconds the one metadata call may take before the revision counts as not checked
METADATA_TIMEOUT_S = 10.0
#: folder under the embedding cache that records the commit last resolved per hub id and revision name
RECORD_DIR = "hub_revisions"


@dataclass(frozen=True)
class Revision:
    """The commit a hub model's weights come from, and how it was found.

    ``how``: ``pinned`` (a 40-hex ``revision=`` needs no lookup), ``hub`` (asked the hub: one metadata call),
    ``local cache`` (offline: the hub client's ``refs/<revision>``), ``recorded`` (offline, no local snapshot:
    the commit last resolved for this name, from the embedding cache's record), ``unresolved`` (none of these:
    ``commit`` is ``None`` and the name alone identifies the weights). ``note`` says what was not checked
    (``""`` when nothing qualifies it); ``level`` is ``warning`` when the embeddings may belong to another
    commit than the hub's current one and no local snapshot says which (``recorded``, ``unresolved``)."""

    hub_id: str
    requested: str
    commit: str | None
    how: str
    note: str = ""

    @property
    def tag(self) -> str:
        """What the weights fingerprint names: the commit, or the revision name when none is known."""
        return self.commit or self.requested

    @property
    def level(self) -> str:
        if self.how in ("recorded", "unresolved"):
            return "warning"
        return "info" if self.note else ""

    def to_dict(self) -> dict[str, object]:
        return {"hub_id": self.hub_id, "revision_requested": self.requested, "commit": self.commit,
                "resolved_by": self.how, "note": self.note}


def is_commit(revision: object) -> bool:
    return isinstance(revision, str) and bool(COMMIT_RE.match(revision))


def local_commit(hub_id: str, revision: str, filenames: Sequence[str] = ()) -> str | None:
    """The commit the hub client's cache holds for ``hub_id`` at ``revision`` (no network): the snapshot of the
    first of ``filenames`` present, as ``huggingface_hub.try_to_load_from_cache`` finds it, else
    ``refs/<revision>`` when its snapshot folder exists."""
    cache = Path(hub_cache_dir())
    folder = cache / ("models--" + hub_id.replace("/", "--"))
    if not folder.is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with timm
        try_to_load_from_cache = None
    snapshots = folder / "snapshots"
    if try_to_load_from_cache is not None:
        for name in filenames:
            try:
                found = try_to_load_from_cache(hub_id, name, cache_dir=str(cache), revision=revision)
            except (ValueError, OSError):
                continue
            if isinstance(found, str):
                try:
                    commit = Path(found).relative_to(snapshots).parts[0]
                except ValueError:
                    continue
                if is_commit(commit):
                    return commit
    try:
        commit = (folder / "refs" / revision).read_text().strip()
    except (OSError, ValueError):
        return None
    return commit if is_commit(commit) and (snapshots / commit).is_dir() else None


def _record_path(hub_id: str, revision: str) -> Path:
    from prism_plugin.data.datacache import data_cache_root

    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    name = hashlib.sha256(f"{endpoint}|{hub_id}|{revision}".encode()).hexdigest()[:32]
    return data_cache_root() / RECORD_DIR / f"{name}.json"


def _write_record(rev: Revision) -> None:
    """Remember the commit resolved for this name (best effort: a read-only shared cache is left alone)."""
    from prism_plugin.storage import atomic_write_text

    path = _record_path(rev.hub_id, rev.requested)
    try:
        old = json.loads(path.read_text()) if path.is_file() else {}
        if old.get("commit") == rev.commit:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"hub_id": rev.hub_id, "revision": rev.requested, "commit": rev.commit,
                                            "resolved_by": rev.how,
                                            "resolved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                           indent=2))
    except (OSError, ValueError, PrismError):
        pass


def _read_record(hub_id: str, revision: str) -> dict[str, str] | None:
    try:
        data = json.loads(_record_path(hub_id, revision).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("hub_id") == hub_id and is_commit(data.get("commit")):
        return data
    return None


def _hub_commit(hub_id: str, revision: str) -> str:
    """The commit the hub names for ``revision`` (one metadata call, bounded by :data:`METADATA_TIMEOUT_S`)."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(hub_id, revision=revision, timeout=METADATA_TIMEOUT_S, expand=["sha"])
    commit = str(getattr(info, "sha", "") or "")
    if not is_commit(commit):
        raise ValueError(f"the hub gave no commit for {hub_id}@{revision}")
    return commit


def resolve_revision(hub_id: str, revision: str | None = None, *, model: str = "", gated: bool = False,
                     filenames: Sequence[str] = ()) -> Revision:
    """The commit ``hub_id`` at ``revision`` (default ``main``) loads: see :class:`Revision`.

    Memoised per process (hub endpoint, hub cache, hub id, revision name, offline or not), so every fingerprint
    of a job names the same commit. A revision the hub says does not exist is one :class:`HubWeightsError`; any
    other failure of the metadata call (refused, no connection) falls back to the offline answers, with a note.
    """
    requested = str(revision) if revision not in (None, "") else "main"
    if is_commit(requested):
        return Revision(hub_id, requested, requested, "pinned")
    offline = prepare_hub()
    key = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT, hub_cache_dir(), hub_id, requested, offline)
    memo = _state.setdefault("revisions", {})
    if key in memo:
        return memo[key]
    why = f"offline ({offline_reason()})" if offline else ""
    if not offline:
        try:
            rev = Revision(hub_id, requested, _hub_commit(hub_id, requested), "hub")
        except Exception as exc:  # noqa: BLE001 - classified: a missing revision is the user's; the rest offline
            kind = classify(exc)
            if "RevisionNotFoundError" in {c.__name__ for c in type(exc).__mro__}:  # the repo has no such name
                raise weights_error(model or hub_id, hub_id, f"at revision {requested!r} "
                                    f"{describe_failure(kind, exc)}", gated=gated) from None
            why = f"the hub did not answer the revision check ({describe_failure(kind, exc)})"
        else:
            _write_record(rev)
            memo[key] = rev
            return rev
    commit = local_commit(hub_id, requested, filenames)
    if commit is not None:
        rev = Revision(hub_id, requested, commit, "local cache",
                       f"{why}: used the local snapshot of {hub_id}@{requested} (commit {commit[:12]}); whether the "
                       "hub has a newer commit was not checked")
        _write_record(rev)
    else:
        record = _read_record(hub_id, requested)
        if record is not None:
            rev = Revision(hub_id, requested, record["commit"], "recorded",
                           f"{why}, no local snapshot: upstream revision not checked; used commit "
                           f"{record['commit'][:12]}, the one resolved for {hub_id}@{requested} on "
                           f"{record.get('resolved', '?')}")
        else:
            rev = Revision(hub_id, requested, None, "unresolved",
                           f"{why}, no local snapshot and no recorded commit: upstream revision not checked; "
                           f"embeddings cached under the name {hub_id}@{requested} (whichever commit computed "
                           "them) are reused, and new ones cannot be extracted without the weights")
    memo[key] = rev
    return rev
