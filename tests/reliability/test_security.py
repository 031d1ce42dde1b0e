"""Nothing untrusted is executed; nothing secret is written.

* YAML: safe loading only; python/* and custom tags refused without running them
  (task files, includes, ``--set``, the task index that scans search paths).
* Includes resolve inside the task folders, whether written relative or absolute.
* Arrays are never unpickled: every ``np.load`` passes ``allow_pickle=False`` (checked
  in the source) and a pickled object array in the cache or a precomputed folder is
  refused without running its payload.
* A hub token in the environment never reaches summary.json, logs, cache manifests or keys.
* transformers' ``trust_remote_code`` is never switched on by an adapter without an explicit flag.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from prism_plugin import cli
from prism_plugin.embed.cache import EmbeddingCache
from prism_plugin.errors import PrismError
from prism_plugin.tasks.index import TaskIndex
from tests.reliability.conftest import N_CELLS, SECRET, SMALL_ARGS, run_env

REPO = Path(__file__).resolve().parents[2]
PAYLOADS = [
    "task: !!python/object/apply:os.system ['touch {m}']\n",
    "task: !!python/object/new:subprocess.Popen [['touch', '{m}']]\n",
    "task: !!python/name:os.system\n",
    "!!python/object/apply:os.system ['touch {m}']\n",
    "task: x\nprobe: {{kind: !!python/object/apply:os.system ['touch {m}']}}\n",
    "task: !function \"lambda: open('{m}', 'w')\"\n",
    "task: !!binary dG91Y2g=\ndataset: !<tag:yaml.org,2002:python/object/apply:os.system> ['touch {m}']\n",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_yaml_payloads_are_refused_and_never_run(tmp_path, payload):
    marker = tmp_path / "pwned"
    f = tmp_path / "evil.yaml"
    f.write_text(payload.format(m=marker))
    with pytest.raises(PrismError, match="not allowed|YAML"):
        TaskIndex([tmp_path]).load(str(f))
    # the index scans every file of a search path (for `ls tasks`): scanning must not run it either
    TaskIndex([tmp_path]).entries()
    assert not marker.exists()


def test_payload_in_an_include_and_in_set_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "_evil.yaml").write_text(PAYLOADS[0].format(m=marker).replace("task:", "probe:"))
    (tmp_path / "t.yaml").write_text("task: t\ninclude: _evil.yaml\ndataset: d\n")
    with pytest.raises(PrismError, match="not allowed"):
        TaskIndex([tmp_path]).load(str(tmp_path / "t.yaml"))
    (tmp_path / "ok.yaml").write_text("task: ok\ndataset: d\n")
    with pytest.raises(PrismError, match="--set seeds: YAML tags are not allowed"):
        TaskIndex([tmp_path]).load(str(tmp_path / "ok.yaml"), [f"seeds=!!python/object/apply:os.system ['touch {marker}']"])
    assert not marker.exists()


def test_includes_are_confined_to_task_folders(tmp_path):
    tasks, outside = tmp_path / "tasks", tmp_path / "outside"
    tasks.mkdir(), outside.mkdir()
    (outside / "_secret.yaml").write_text("seeds: [1]\n")
    base = "task: t\ndataset: d\nclass_names: [a, b]\nsource: {type: demo}\nsplits: {train: a, test: b}\n"
    for name, inc in (("rel", "../outside/_secret.yaml"), ("deep", "../../../../../../etc/hostname")):
        (tasks / f"{name}.yaml").write_text(base + f"include: {inc}\n")
        with pytest.raises(PrismError, match="outside the task folders"):
            TaskIndex([tasks]).load(str(tasks / f"{name}.yaml"))
    # a symlink inside the folder that points outside is resolved and refused too
    (tasks / "_link.yaml").symlink_to(outside / "_secret.yaml")
    (tasks / "sym.yaml").write_text(base + "include: _link.yaml\n")
    with pytest.raises(PrismError, match="outside the task folders"):
        TaskIndex([tasks]).load(str(tasks / "sym.yaml"))
    # an absolute path is confined the same way: outside refused, inside the task folder followed
    (tasks / "abs.yaml").write_text(base + f"include: {outside / '_secret.yaml'}\n")
    with pytest.raises(PrismError, match="outside the task folders"):
        TaskIndex([tasks]).load(str(tasks / "abs.yaml"))
    (tasks / "_inside.yaml").write_text("seeds: [1]\n")
    (tasks / "abs.yaml").write_text(base + f"include: {tasks / '_inside.yaml'}\n")
    assert TaskIndex([tasks]).load(str(tasks / "abs.yaml")).seeds == (1,)


def _np_load_calls(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load":
            base = node.func.value
            if isinstance(base, ast.Name) and base.id in ("np", "numpy"):
                yield node


def test_every_np_load_passes_allow_pickle_false():
    files = list((REPO / "src").rglob("*.py")) + list((REPO / "model_adapters").rglob("*.py"))
    offenders, n = [], 0
    for f in files:
        for call in _np_load_calls(f):
            n += 1
            kw = {k.arg: k.value for k in call.keywords}
            if not (isinstance(kw.get("allow_pickle"), ast.Constant) and kw["allow_pickle"].value is False):
                offenders.append(f"{f.relative_to(REPO)}:{call.lineno}")
    assert n > 0
    assert not offenders, f"np.load without allow_pickle=False: {offenders}"
    # and nothing else deserialises pickles or evaluates text
    bad = re.compile(r"\bpickle\.loads?\(|\bjoblib\.load\(|\bpd\.read_pickle\(|(?<![.\w])eval\(|(?<![.\w])exec\(|yaml\.load\((?!.*SafeLoader)"
                     r"|yaml\.unsafe_load|torch\.load\((?![^)]*weights_only=True)")
    hits = [f"{f.relative_to(REPO)}:{i}" for f in files
            for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
            if bad.search(line) and not line.lstrip().startswith("#")]
    assert not hits, hits


def test_pickled_cache_entry_is_refused_and_recomputed(tmp_path):
    """An attacker rewrites a cache entry's labels as a pickled object array *and* fixes its manifest."""
    from tests.reliability.test_concurrency import _fill

    marker = tmp_path / "pwned"
    cache = EmbeddingCache(tmp_path / "cache")
    entry = cache.entry("a", "b", "train")
    _fill(entry, np.ones((10, 3), np.float32), np.arange(10) % 2)

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    arr = np.empty(10, dtype=object)
    arr[:] = [Evil()] * 10
    np.save(entry.dir / "labels.npy", arr, allow_pickle=True)
    from prism_plugin.embed.cache import file_checksum

    m = entry.manifest()
    m["labels_checksum"] = file_checksum(entry.dir / "labels.npy")
    (entry.manifest_path).write_text(json.dumps(m))
    with pytest.warns(UserWarning, match="corrupt"):
        assert entry.load() is None
    assert not entry.exists() and not marker.exists()


def test_hub_token_is_never_written(tmp_path, ref, copy_cache, capsys, monkeypatch):
    """HF_TOKEN set: not in summary.json, runs.csv, cells, report, cache manifests/keys or the console."""
    for k, v in run_env().items():
        monkeypatch.setenv(k, v)
    assert os.environ["HF_TOKEN"] == SECRET
    cache, out = copy_cache(), tmp_path / "out"
    for entry in EmbeddingCache(cache).entries()[:1]:
        entry.remove()  # one split re-extracted with the token set: its manifest is written now
    assert cli.main(SMALL_ARGS + ["--cache-dir", str(cache), "--output", str(out)]) == 0
    assert cli.main(["cache", "ls", "--json", "--cache-dir", str(cache)]) == 0
    assert cli.main(["cache", "verify", "--cache-dir", str(cache)]) == 0
    console = capsys.readouterr()
    assert len(json.loads((out / "summary.json").read_text())["reused_cells"]) in (0, N_CELLS)
    assert (out / "report.html").is_file()  # the report is among the files searched
    written = [p for root in (out, cache, ref["out"], ref["cache"]) for p in root.rglob("*") if p.is_file()]
    assert len(written) > 10
    leaks = [str(p) for p in written if SECRET.encode() in p.read_bytes() or SECRET in p.name]
    assert not leaks, leaks
    assert SECRET not in console.out + console.err + ref["stdout"] + ref["stderr"]


def _trust_remote_code_uses(path: Path):
    """(line, how) for every trust_remote_code=... keyword passed in an adapter module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "trust_remote_code":
                    yield node.lineno, ast.unparse(kw.value)
                if kw.arg is None and isinstance(kw.value, ast.Dict):  # **{"trust_remote_code": True}
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "trust_remote_code":
                            yield node.lineno, ast.unparse(v)


def test_trust_remote_code_is_never_hardwired_on():
    """No adapter passes trust_remote_code=True; any non-constant value must come from an explicit option."""
    found = []
    for f in sorted((REPO / "model_adapters").glob("*.py")):
        for line, how in _trust_remote_code_uses(f):
            found.append((f.name, line, how))
    hard_on = [x for x in found if x[2] == "True"]
    assert not hard_on, f"trust_remote_code switched on unconditionally: {hard_on}"
    for name, line, how in found:
        if how not in ("False", "None"):
            src = (REPO / "model_adapters" / name).read_text()
            assert "trust_remote_code" in src.split("def __init__", 1)[-1], \
                f"{name}:{line}: trust_remote_code={how} must come from an explicit --model-args flag"
