"""Hugging Face ``datasets`` as a task source (``source.type: hf``).

``path`` is either a hub id (``owner/name``, pinned with ``revision``) or a local copy: a directory (parquet /
arrow / image-folder files, or a ``save_to_disk`` directory) or a single ``.parquet`` / ``.arrow`` file.
``image_column`` and ``label_column`` name the columns; split names in the task (``splits.<s>.name``) are the
dataset's split names, and ``all`` is every split concatenated in the dataset's order (or ``splits:``' order).

``datasets`` is imported only when a task with this source runs. Network rules: with ``--offline``,
``HF_HUB_OFFLINE=1`` or ``HF_DATASETS_OFFLINE=1``, or when the hub does not answer a 2-second connection probe, the
hub is never contacted and only the local cache is read; if the dataset is not there, one message names the
dataset, where it was looked for and how to point at a copy -- at once, without the library's retries.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from prism_plugin.errors import PrismError
from prism_plugin.data.base import DATA_ROOT_ENV, NoAll, Pool, Source, keyed_error, resolve_root
from prism_plugin.data.refs import ImageRef

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SHA = re.compile(r"^[0-9a-f]{40}$")
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
LOCAL_FORMATS = {"parquet", "arrow", "imagefolder", "csv", "json"}
PROBE_TIMEOUT_S = 2.0


def _truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def offline_requested() -> bool:
    return any(_truthy(os.environ.get(v)) for v in OFFLINE_ENV)


_OFFLINE_REASON: list[str] = []


def go_offline(reason: str = "") -> None:
    """Make ``datasets`` and ``huggingface_hub`` read the local cache only (also if already imported)."""
    if reason and not offline_requested():
        _OFFLINE_REASON.append(reason)
    for var in OFFLINE_ENV:
        os.environ[var] = "1"
    import sys

    hub_constants = sys.modules.get("huggingface_hub.constants")
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = True
    ds_config = sys.modules.get("datasets.config")
    if ds_config is not None:
        for attr in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            if hasattr(ds_config, attr):
                setattr(ds_config, attr, True)


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Can a TCP connection to the hub endpoint be opened within ``timeout`` seconds (DNS included)?"""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme != "http" else 80)
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(result and result[0])


def _hf_cache_dir() -> str:
    return os.environ.get("HF_DATASETS_CACHE") or str(
        Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "datasets")


def _local_cache_dir() -> str:
    """Where ``datasets`` caches a local copy it converts: under the job's cache (``--cache-dir``)."""
    from prism_plugin.data.datacache import data_cache_root

    return str(data_cache_root() / "hf-datasets")


def _storage_fault(exc: BaseException, cache: str):
    """A full / read-only / over-quota cache while ``datasets`` writes: the folder and the fix, else None."""
    from prism_plugin.storage import as_error, is_storage_fault

    if not is_storage_fault(exc):
        return None
    return as_error(exc, path=cache, elsewhere="set source.cache_dir, HF_DATASETS_CACHE or --cache-dir to "
                                               "another folder")


def resolve_local(path: str) -> Path | None:
    """The local file or directory ``path`` names, or None if it is not on disk."""
    raw = os.path.expandvars(str(path))
    p = Path(raw).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    for cand in (resolve_root(raw), Path.cwd() / p):
        if cand.exists():
            return cand
    return None


def is_hub_id(path: str) -> bool:
    raw = str(path)
    return bool(HUB_ID.match(raw)) and not raw.startswith((".", "/", "~", "$"))


def load_hf(spec: dict[str, Any], *, task_name: str, dataset_name: str, option: str = "source.path"):
    """A ``datasets.DatasetDict`` for a source spec (hub id or local copy)."""
    path = str(spec.get("path", ""))
    local = resolve_local(path)
    if local is not None:
        return _load_local(local, spec, task_name, dataset_name)
    if not is_hub_id(path):
        raise PrismError(
            f"task {task_name}: dataset {dataset_name!r}: {option} {path!r} is neither on disk (looked at "
            f"{resolve_root(path)} and {Path.cwd() / path}) nor a hub id owner/name; place the files there, "
            f"point --set {option}=DIR at them, or set ${DATA_ROOT_ENV}"
        )
    return _load_hub(path, spec, task_name, dataset_name, option)


def _import_datasets():
    try:
        import datasets
    except ImportError:
        raise PrismError("source.type hf needs the 'datasets' package: pip install 'prism-plugin[hf]'") from None
    try:
        datasets.disable_progress_bars()
    except AttributeError:  # pragma: no cover - old versions
        pass
    return datasets


def _as_dict(obj, datasets):
    if isinstance(obj, datasets.Dataset):
        return datasets.DatasetDict({"train": obj})
    return obj


def _load_local(local: Path, spec: dict, task_name: str, dataset_name: str):
    fmt = spec.get("format")
    datasets = _import_datasets()
    cache = spec.get("cache_dir") or _local_cache_dir()
    try:
        if local.is_dir() and ((local / "dataset_dict.json").exists() or (local / "state.json").exists()):
            return _as_dict(datasets.load_from_disk(str(local)), datasets)
        if local.is_file():
            builder = fmt or {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json",
                              ".jsonl": "json"}.get(local.suffix.lower())
            if builder is None:
                raise PrismError(f"task {task_name}: {local}: set source.format (one of {', '.join(sorted(LOCAL_FORMATS))})")
            return _as_dict(datasets.load_dataset(builder, data_files=str(local), cache_dir=cache), datasets)
        kwargs: dict[str, Any] = {"cache_dir": cache}
        if spec.get("data_files"):
            kwargs["data_files"] = spec["data_files"]
        if spec.get("data_dir"):
            kwargs["data_dir"] = spec["data_dir"]
        if fmt:
            return _as_dict(datasets.load_dataset(fmt, data_dir=str(local), **{k: v for k, v in kwargs.items()
                                                                             if k != "data_dir"}), datasets)
        return _as_dict(datasets.load_dataset(str(local), **kwargs), datasets)
    except PrismError:
        raise
    except Exception as exc:  # datasets raises many types for unreadable local data
        fault = _storage_fault(exc, cache)
        if fault is not None:
            raise fault from None
        raise PrismError(f"task {task_name}: dataset {dataset_name!r}: {local} cannot be read with datasets "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                         "check source.format / data_files") from None


def _load_hub(hub_id: str, spec: dict, task_name: str, dataset_name: str, option: str = "source.path"):
    revision = spec.get("revision")
    offline = offline_requested()
    why = (_OFFLINE_REASON[0] if _OFFLINE_REASON else "offline mode (--offline / HF_HUB_OFFLINE)") if offline else ""
    if not offline and not hub_reachable():
        offline, why = True, f"the hub ({os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}) is unreachable"
    if offline:
        go_offline(why)
    datasets = _import_datasets()
    kwargs: dict[str, Any] = {}
    for key in ("data_files", "data_dir"):
        if spec.get(key):
            kwargs[key] = spec[key]
    if spec.get("cache_dir"):
        kwargs["cache_dir"] = spec["cache_dir"]
    try:
        return _as_dict(datasets.load_dataset(hub_id, spec.get("name"), revision=revision, **kwargs), datasets)
    except Exception as exc:  # network, auth, missing cache entry: one message either way
        where = spec.get("cache_dir") or _hf_cache_dir()
        fault = _storage_fault(exc, where)
        if fault is not None:
            raise fault from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if offline:
            raise PrismError(
                f"task {task_name}: dataset {dataset_name!r} (hub {hub_id}@{revision or 'latest'}) is not in the local "
                f"cache {where} and {why}; download it once with network access, or put a local copy on disk and "
                f"point --set {option}=DIR at it (or set HF_DATASETS_CACHE to the cache that holds it)"
            ) from None
        raise PrismError(
            f"task {task_name}: dataset {dataset_name!r} could not be loaded from the hub {hub_id}@{revision or 'latest'} "
            f"({type(exc).__name__}: {first}); for gated datasets log in with `huggingface-cli login`, or use a "
            f"local copy with --set {option}=DIR"
        ) from None


class HFImageRef(ImageRef):
    """One row's image of a ``datasets`` split (encoded bytes, or a path stored in the row)."""

    def __init__(self, dataset, row: int, column: str, key: str, base: Path | None = None):
        self.dataset, self.row, self.column, self.key, self.base = dataset, int(row), column, key, base

    def load_bytes(self) -> bytes:
        value = self.dataset[self.row][self.column]
        if isinstance(value, dict):
            if value.get("bytes"):
                return value["bytes"]
            value = value.get("path")
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str) and value:
            p = Path(value)
            if not p.is_absolute() and self.base is not None:
                p = self.base / p
            try:
                return p.read_bytes()
            except OSError as exc:
                raise PrismError(f"{self.key}: image file {p} cannot be read ({exc})") from None
        raise PrismError(f"{self.key}: column {self.column!r} holds no image bytes or path")


class HFSource(Source):
    """A Hugging Face dataset (hub id with a pinned revision, or a local parquet / arrow / image-folder copy)."""

    type_name = "hf"
    OPTIONS = frozenset({"path", "revision", "name", "data_files", "data_dir", "format", "image_column",
                         "label_column", "splits", "cache_dir"})
    REQUIRED = frozenset({"path"})
    LAYOUT = "a hub id (owner/name) or a local directory of parquet / arrow / image files"

    def __init__(self, task, path: str = "", revision: str | None = None, name: str | None = None,
                 data_files: Any = None, data_dir: str | None = None, format: str | None = None,
                 image_column: str = "image", label_column: str = "label", splits: list | None = None,
                 cache_dir: str | None = None, **options: Any):
        super().__init__(task, path=path, revision=revision, name=name, data_files=data_files, data_dir=data_dir,
                         format=format, image_column=image_column, label_column=label_column, splits=splits,
                         cache_dir=cache_dir, **options)
        self.spec = {"path": path, "revision": revision, "name": name, "data_files": data_files,
                     "data_dir": data_dir, "format": format, "cache_dir": cache_dir}
        self.image_column, self.label_column = image_column, label_column
        self.split_order = list(splits) if splits else None
        self._dd = None

    @staticmethod
    def check_spec(options: dict, located) -> None:
        path = str(options.get("path", ""))
        fmt = options.get("format")
        if fmt is not None and fmt not in LOCAL_FORMATS:
            raise keyed_error(PrismError(f"{located.where('source.format')}: source.format: must be one of "
                                         f"{', '.join(sorted(LOCAL_FORMATS))}, got {fmt!r}"), "source.format")
        if is_hub_id(path) and resolve_local(path) is None and not options.get("revision"):
            raise keyed_error(PrismError(f"{located.where('source.path')}: source.revision: a hub dataset needs a pinned "
                                         f"revision (a commit sha) so runs are reproducible; add revision: <sha> for {path}"),
                              "source.revision")

    def describe(self) -> str:
        rev = f"@{self.spec['revision']}" if self.spec.get("revision") else ""
        return f"Hugging Face dataset {self.spec['path']}{rev}"

    def dataset_dict(self):
        if self._dd is None:
            self._dd = load_hf(self.spec, task_name=self.task.name, dataset_name=self.task.dataset)
            rev = str(self.spec.get("revision") or "")
            if is_hub_id(str(self.spec["path"])) and resolve_local(str(self.spec["path"])) is None and not SHA.match(rev):
                import warnings

                warnings.warn(f"task {self.task.name}: revision {rev!r} of {self.spec['path']} is not a commit sha; "
                              "results may change when the dataset is updated", stacklevel=2)
        return self._dd

    def all_pool_names(self) -> list[str]:
        return self.split_order or list(self.dataset_dict().keys())

    def pool(self, name: str) -> Pool:
        if name == "all":
            raise NoAll
        dd = self.dataset_dict()
        if name not in dd:
            raise PrismError(f"task {self.task.name}: {self.describe()} has no split {name!r} "
                             f"(splits: {', '.join(dd.keys())}); set splits.<s>.name to one of them")
        return hf_pool(dd[name], self.image_column, self.label_column, key_prefix=name,
                       where=f"{self.describe()} [{name}]", base=resolve_local(str(self.spec["path"])))


def hf_pool(ds, image_column: str, label_column: str, *, key_prefix: str, where: str,
            base: Path | None = None) -> Pool:
    """Items (lazy image refs) and raw labels of one ``datasets.Dataset``."""
    import datasets

    cols = ds.column_names
    for col in (image_column, label_column):
        if col not in cols:
            raise PrismError(f"{where}: no column {col!r} (columns: {', '.join(cols)}); "
                             "set source.image_column / source.label_column")
    feature = ds.features[label_column]
    names = list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
    if getattr(ds, "_indices", None) is None:
        values = ds.data.column(label_column).to_pylist()
    else:  # a selected / filtered view: go through the indices mapping
        values = list(ds.select_columns([label_column])[label_column])
    raw = [int(v) if isinstance(v, (bool, int, np.integer)) else str(v) for v in values]  # bools -> 0/1
    img = ds.select_columns([image_column])
    if isinstance(img.features[image_column], datasets.Image):
        img = img.cast_column(image_column, datasets.Image(decode=False))
    items = [HFImageRef(img, i, image_column, f"{key_prefix}/{i}", base) for i in range(len(ds))]
    return Pool(items, raw, [r.key for r in items], where=where, label_names=names)


def open_concat(spec: dict[str, Any], order: list[str] | None, *, task_name: str, dataset_name: str,
                option: str = "source.path"):
    """(list of (split name, Dataset), total rows): the dataset's splits concatenated in ``order``."""
    dd = load_hf(spec, task_name=task_name, dataset_name=dataset_name, option=option)
    names = order or list(dd.keys())
    missing = [n for n in names if n not in dd]
    if missing:
        raise PrismError(f"task {task_name}: dataset {spec.get('path')} has no split(s) {missing} "
                         f"(splits: {', '.join(dd.keys())})")
    parts = [(n, dd[n]) for n in names]
    return parts, sum(len(d) for _, d in parts)
