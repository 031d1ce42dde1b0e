"""Source types come from the plugin host's registry: a plugin adds one with no core edit; unknown types
fail with the closest names; core modules leave the source modules unimported; one file hasher."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from prism_plugin.data.base import ImageSplit, Pool, Source, resolve_root
from prism_plugin.data.catalogue import accepted_options, check_source_spec, open_source, source_class
from prism_plugin.errors import PrismError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import PluginHost, get_host
from prism_plugin.tasks.index import TaskIndex


class TileListSource(Source):
    """A third-party source: ``<root>/<split>.txt`` lists ``<image> <class>`` per line."""

    type_name = "tile_list"
    OPTIONS = frozenset({"root", "listing"})
    REQUIRED = frozenset({"root"})
    LAYOUT = "<root>/<split>.txt with one '<image> <class>' per line"

    def __init__(self, task, root: str = "", listing: str = "{split}.txt", **options):
        super().__init__(task, root=root, listing=listing, **options)
        self.root = resolve_root(root, task)
        self.listing = listing

    def pool(self, name: str) -> Pool:
        path = self.root / self.listing.format(split=name)
        if not path.is_file():
            raise self.missing(f"split {name!r} listing", path)
        rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
        items = [self.root / image for image, _ in rows]
        return Pool(items, [cls for _, cls in rows], [image for image, _ in rows], where=str(path))


class TileListPlugin:
    @hookimpl
    def register_sources(self, register):
        register("tile_list", TileListSource, description="tiles listed in text files")


def _plugin_host() -> PluginHost:
    return PluginHost(extra_plugins=[TileListPlugin()], third_party=False)


def _tile_dataset(root: Path) -> None:
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("test", 4)):
        lines = []
        for k in range(n):
            name = f"{split}_{k}.png"
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / name)
            lines.append(f"{name} {'tumour' if k % 2 else 'normal'}")
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")


TASK = """\
task: tiles
dataset: Tiles
class_names: [normal, tumour]
source: {{type: {kind}, root: {root}{extra}}}
splits:
  train: train
  test: test
"""


def _write_task(tmp_path: Path, kind: str = "tile_list", extra: str = "") -> Path:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    _tile_dataset(data)
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "tiles.yaml").write_text(TASK.format(kind=kind, root=data, extra=extra))
    return tasks


def test_a_plugin_source_type_validates_and_yields_image_splits(tmp_path):
    tasks = _write_task(tmp_path)
    host = _plugin_host()
    assert host.sources.entry("tile_list").origin == "passed in code"
    task = TaskIndex([tasks], host).load_task("tiles")
    split = open_source(task, host=host).split("train")
    assert isinstance(split, ImageSplit)
    assert split.labels.tolist() == [0, 1, 0, 1, 0, 1]
    assert [p.name for p in split.paths] == [f"train_{k}.png" for k in range(6)]
    assert np.asarray(Image.open(split.paths[0])).shape == (8, 8, 3)
    # the shared machinery works for it: --limit keeps both classes, the fingerprint follows the content
    limited = open_source(task, host=host).split("train", limit=2)
    assert sorted(limited.labels.tolist()) == [0, 1] and limited.fingerprint != split.fingerprint
    again = open_source(task, host=host).split("train")
    assert again.fingerprint == split.fingerprint
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(split.paths[3])
    assert open_source(task, host=host).split("train").fingerprint != split.fingerprint
    assert accepted_options("tile_list", host) == {"root", "listing", "class_map", "drop_unmapped", "drop_classes"}


def test_a_plugin_source_type_is_unknown_without_its_plugin(tmp_path):
    tasks = _write_task(tmp_path)
    with pytest.raises(PrismError) as err:
        TaskIndex([tasks], PluginHost(third_party=False)).load_task("tiles")
    msg = str(err.value)
    assert "tiles.yaml:4" in msg and "source.type: 'tile_list' is not known" in msg
    assert accepted_options("tile_list", get_host()) is None


def test_a_plugin_source_option_typo_names_the_line_and_the_closest_option(tmp_path):
    tasks = _write_task(tmp_path, extra=", listng: '{split}.txt'")
    with pytest.raises(PrismError, match=r"tiles\.yaml:4: source\.listng: not a tile_list option; "
                                         r"did you mean 'listing'\?"):
        TaskIndex([tasks], _plugin_host()).load_task("tiles")


def test_unknown_source_type_lists_the_closest_and_the_available_types(tmp_path):
    tasks = _write_task(tmp_path, kind="imagefoldr")
    with pytest.raises(PrismError) as err:
        TaskIndex([tasks], _plugin_host()).load_task("tiles")
    msg = str(err.value)
    assert "tiles.yaml:4: source.type: 'imagefoldr' is not known; did you mean 'imagefolder'?" in msg
    known = msg.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert known == sorted(known)
    assert set(known) == {"imagefolder", "demo", "records", "h5", "npz", "hf", "camelyon17", "hema_demo", "tile_list",
                          "precomputed", "eva"}
    with pytest.raises(PrismError, match=r"source\.type 'nope' is not known .*known: .*tile_list"):
        source_class("nope", _plugin_host())


def test_check_source_spec_takes_the_host():
    from prism_plugin.tasks.loader import Located

    located = Located({"source": {"type": "tile_list", "root": "x"}}, Path("t.yaml"), {"source.type": 3})
    check_source_spec({"type": "tile_list", "root": "x"}, ("a", "b"), located, host=_plugin_host())
    with pytest.raises(PrismError, match=r"t\.yaml:3: source\.type: 'tile_list' is not known"):
        check_source_spec({"type": "tile_list", "root": "x"}, ("a", "b"), located, host=get_host())


def test_builtin_types_are_registered_lazily_at_their_modules():
    from prism_plugin.data.builtin import BUILTIN_SOURCES

    reg = PluginHost(third_party=False).sources
    # data.builtin's types, then the one the built-in plugin ``eva`` registers through the same hook
    assert reg.names() == [*BUILTIN_SOURCES, "eva"]
    refs = {name: ref for name, (ref, _description, _kind) in BUILTIN_SOURCES.items()}
    refs["eva"] = "prism_plugin.data.eva:EvaEmbeddingsSource"
    for name, ref in refs.items():
        entry = reg.entry(name)
        assert entry.lazy and entry.ref == ref, name  # nothing imported before first use
    where = {name: reg.get(name).__module__ for name in reg.names()}
    assert where == {"imagefolder": "prism_plugin.data.folder", "demo": "prism_plugin.data.folder",
                     "records": "prism_plugin.data.records", "h5": "prism_plugin.data.arrays",
                     "npz": "prism_plugin.data.arrays", "hf": "prism_plugin.data.hf",
                     "camelyon17": "prism_plugin.data.camelyon17", "hema_demo": "prism_plugin.data.hema_demo",
                     "precomputed": "prism_plugin.data.precomputed", "eva": "prism_plugin.data.eva"}
    assert all(issubclass(reg.get(name), Source) and not reg.entry(name).lazy for name in reg.names())


def test_core_modules_do_not_import_the_builtin_source_modules():
    """``embed.load`` (and the schema it imports) use the catalogue: the source modules load on first use."""
    code = ("import sys, prism_plugin.embed.load, prism_plugin.tasks.schema, prism_plugin.embed.extract\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('prism_plugin.data.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "prism_plugin.data.catalogue" in out
    heavy = {"prism_plugin.data.folder", "prism_plugin.data.records",
             "prism_plugin.data.arrays", "prism_plugin.data.hf", "prism_plugin.data.camelyon17", "prism_plugin.data.eva"}
    assert heavy.isdisjoint(out), sorted(heavy & set(out))


def test_option_checks_name_the_type_once(tmp_path):
    from prism_plugin.data.base import allowed_options, check_options
    from prism_plugin.tasks.loader import Located

    class Unnamed(Source):
        OPTIONS = frozenset({"root"})

    assert allowed_options(TileListSource) == {"root", "listing", "class_map", "drop_unmapped", "drop_classes"}
    assert allowed_options(TileListSource) == accepted_options("tile_list", _plugin_host())
    located = Located({}, Path("t.yaml"), {})
    # type_name first, then the task's source.type, then the class name
    with pytest.raises(PrismError, match="not a tile_list option"):
        check_options(TileListSource, {"bad": 1}, "t.yaml", located, kind="alias")
    with pytest.raises(PrismError, match="not a alias option"):
        check_options(Unnamed, {"bad": 1}, "t.yaml", located, kind="alias")
    with pytest.raises(PrismError, match="not a Unnamed option"):
        check_options(Unnamed, {"bad": 1}, "t.yaml")


# ---------------------------------------------------------------- the one file hasher

def test_every_file_digest_is_the_blake2b_it_always_was(tmp_path):
    from prism_plugin.data.precomputed import read_embedding_split
    from prism_plugin.embed.adapter import file_content_digest
    from prism_plugin.embed.cache import file_checksum
    from prism_plugin.storage import file_digest

    blob = tmp_path / "weights.bin"
    payload = np.random.default_rng(1).bytes(3 * (1 << 20) + 17)  # several chunks of any size
    blob.write_bytes(payload)
    assert file_checksum(blob) == hashlib.blake2b(payload, digest_size=20).hexdigest()
    assert file_content_digest(blob) == hashlib.blake2b(payload, digest_size=20).hexdigest()
    assert file_digest(blob) == hashlib.blake2b(payload, digest_size=16).hexdigest()
    assert file_digest(blob, chunk=1000) == file_digest(blob)
    # memoised per (path, size, mtime): a rewritten file is hashed again
    blob.write_bytes(payload[:-1])
    assert file_content_digest(blob) == hashlib.blake2b(payload[:-1], digest_size=20).hexdigest()

    X, y = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([0, 1, 0, 1])
    np.save(tmp_path / "test_features.npy", X)
    np.save(tmp_path / "test_labels.npy", y)
    _, _, fp = read_embedding_split(tmp_path, "test")
    digest16 = lambda p: hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()  # noqa: E731
    assert fp == digest16(tmp_path / "test_features.npy") + digest16(tmp_path / "test_labels.npy")[:16]


def test_the_weight_digest_is_memoised_per_path_size_and_mtime(tmp_path, monkeypatch):
    from prism_plugin import storage
    from prism_plugin.embed.adapter import file_content_digest

    calls = []
    real = storage.file_digest

    def counting(path, *args, **kwargs):
        calls.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(storage, "file_digest", counting)
    blob = tmp_path / "model.safetensors"
    blob.write_bytes(b"a" * 4096)
    first = file_content_digest(blob)
    assert first == hashlib.blake2b(b"a" * 4096, digest_size=20).hexdigest()
    assert file_content_digest(blob) == first and file_content_digest(str(blob)) == first
    assert calls == ["model.safetensors"]  # unchanged: hashed once
    st = blob.stat()
    blob.write_bytes(b"b" * 4096)  # same size, new content and modification time
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert file_content_digest(blob) == hashlib.blake2b(b"b" * 4096, digest_size=20).hexdigest()
    assert calls == ["model.safetensors"] * 2


def test_split_fingerprints_and_reference_checks_read_through_the_one_hasher(tmp_path, monkeypatch):
    from prism_plugin import storage
    from prism_plugin.commands.reference import verify_files
    from prism_plugin.data import fingerprints
    from prism_plugin.data.fingerprints import split_fingerprint
    from prism_plugin.reference_data import PUBLISHED_FILES

    reads = []
    real = storage.update_from_file

    def counting(h, path, *args, **kwargs):
        reads.append(Path(path).name)
        return real(h, path, *args, **kwargs)

    monkeypatch.setattr(storage, "update_from_file", counting)
    monkeypatch.setattr(fingerprints, "update_from_file", counting)
    payload = np.random.default_rng(2).bytes((1 << 20) + 5)  # more than one chunk
    (tmp_path / "a.png").write_bytes(payload)
    expected = hashlib.blake2b(digest_size=20)
    expected.update(b"a.png|1|" + payload)
    assert split_fingerprint(["a.png"], np.array([1]), [tmp_path / "a.png"]) == expected.hexdigest()
    assert reads == ["a.png"]

    name, (size, sha) = next(iter(PUBLISHED_FILES.items()))
    wrong = b"x" * size
    (tmp_path / name).write_bytes(wrong)
    reads.clear()
    problems = verify_files(tmp_path, [name])
    assert problems == [f"{name} has SHA-256 {hashlib.sha256(wrong).hexdigest()[:12]}..., expected {sha[:12]}..."]
    assert reads == [name]  # a mismatching file is hashed once
