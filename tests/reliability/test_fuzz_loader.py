"""Fuzz the task loader: every input gives a TaskConfig or a one-line PrismError, fast, with nothing run.

Three generators (hypothesis): raw YAML-ish text; a valid task with random
mutations (key typos, wrong types, huge/negative numbers, unicode and
path-like names, deleted and unknown keys); random ``--set`` overrides. Plus a
table of hand-written cases with the message each must give.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism_plugin.errors import PrismError
from prism_plugin.runner import default_output, fingerprint_parts
from prism_plugin.tasks.index import TaskIndex
from prism_plugin.tasks.schema import TaskConfig

COUNTS = {"text": 0, "mutated": 0, "overrides": 0}
FUZZ = settings(max_examples=int(__import__("os").environ.get("PRISM_FUZZ_EXAMPLES", "200")), deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def _library_versions_read_once():
    """check_task fingerprints every task that loads; the installed library versions in that fingerprint are
    read once for the module (importlib.metadata costs more than loading the task itself)."""
    from prism_plugin import runner

    versions = runner.library_versions()
    mp = pytest.MonkeyPatch()
    mp.setattr(runner, "library_versions", lambda: dict(versions))
    yield
    mp.undo()

BASE = {
    "task": "fuzz_task",
    "description": "fuzzed",
    "dataset": "Fuzz-Data",
    "class_names": ["a", "b"],
    "source": {"type": "imagefolder", "root": "data/fuzz"},
    "splits": {"train": {"name": "train", "size": 10, "class_counts": [5, 5]}, "val": "val", "test": {"name": "test"}},
    "label_fractions": [0.1, 1.0],
    "seeds": [42, 123],
    "probe": {"kind": "logistic", "C": 1.0, "max_iter": 100},
    "ece_bins": 15,
    "binary_logits": "symmetric",
    "temperature_bounds": [0.1, 10.0],
    "proportional_val": False,
    "columns": {"hospital": 0},
}


def load(folder: Path, text: str, overrides=()) -> TaskConfig | PrismError:
    f = folder / "fuzz.yaml"
    f.write_text(text, encoding="utf-8")
    try:
        return TaskIndex([folder]).load(str(f), overrides)
    except PrismError as exc:
        # one line per problem: the index reports every independent problem of a file at once
        lines = str(exc).split("\n")
        assert all(line.strip() and len(line) < 600 for line in lines), repr(str(exc))
        assert len(lines) == 1 or all("fuzz.yaml" in line or "--set" in line for line in lines), repr(str(exc))
        assert "Traceback" not in str(exc)
        return exc


def check_task(task: TaskConfig, base: Path) -> None:
    """A task that loads must be usable downstream: serialisable, fingerprintable, path-safe."""
    json.dumps(task.resolved(), default=str)
    fingerprint_parts(task, _StubAdapter(), {"fingerprints": {"train": "x"}})
    out = default_output(base, task.name, "adapter").resolve()
    assert base.resolve() in out.parents, (task.name, out)
    assert all(0 < f <= 1 for f in task.label_fractions)
    assert all(isinstance(s, int) and s >= 0 for s in task.seeds)
    assert task.n_classes >= 2
    for key in ("C", "tol") if task.probe.get("kind") == "logistic" else ():  # other heads check their own
        if key in task.probe:
            assert math.isfinite(float(task.probe[key])) and float(task.probe[key]) > 0


class _StubAdapter:
    def fingerprint(self) -> str:
        return "stub"


# -- strategies ---------------------------------------------------------------------------------------
YAML_CHARS = st.sampled_from(list(":-[]{}&*!|>'\"#%@`,? \n\t.~=/\\") + ["\n  ", "task", "dataset", "splits",
                                                                             "!!python/object/apply:os.system",
                                                                             "&a", "*a", "<<", "é", "中", "\u202e",
                                                                             "\x00", "1e9", "-1", "null"])
JUNK = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-10**30, max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2, 10**9, 2**63, -2**63, 1e308, -0.0, 1e-320]),
    st.text(max_size=12),
    st.sampled_from(["../../../etc/passwd", "/etc/passwd", "~root", "C:\\Windows", "a/b/../../..", "..",
                     ".", "tâche-ünïcode-中文", "\u202eevil", "con", "nul", "x" * 300, "", " ", "$HOME/x"]),
    st.lists(st.one_of(st.integers(-5, 5), st.floats(-2, 2), st.text(max_size=3)), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(-3, 3), max_size=3),
)


def typo(key: str, draw) -> str:
    kind = draw(st.sampled_from(["drop", "swap", "add", "case"]))
    i = draw(st.integers(0, max(0, len(key) - 1)))
    if kind == "drop" and len(key) > 1:
        return key[:i] + key[i + 1:]
    if kind == "swap" and len(key) > 2 and i < len(key) - 1:
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    if kind == "case":
        return key.upper()
    return key[:i] + draw(st.sampled_from("aeiouxs_")) + key[i:]


@st.composite
def mutated_task(draw):
    doc = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        paths = [(k,) for k in doc] + [(k, s) for k, v in doc.items() if isinstance(v, dict) for s in v]
        path = draw(st.sampled_from(paths))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        op = draw(st.sampled_from(["junk", "junk", "typo", "delete", "unknown"]))
        if op == "junk":
            parent[path[-1]] = draw(JUNK)
        elif op == "typo":
            parent[typo(path[-1], draw)] = parent.pop(path[-1])
        elif op == "delete":
            del parent[path[-1]]
        else:
            parent[draw(st.text(min_size=1, max_size=8))] = draw(JUNK)
    return doc


OVERRIDE_KEYS = st.sampled_from(["label_fractions", "seeds", "probe.C", "probe.max_iter", "probe.kind", "ece_bins",
                                 "n_classes", "task", "splits.train", "splits.train.size", "source.type",
                                 "temperature_bounds", "proportional_val", "columns.hospital", "include", "probe",
                                 "lable_fractions", "prob.C", "", ".", "a..b", "splits.holdout"])
OVERRIDE_VALUES = st.one_of(
    st.sampled_from(["[0.1,1.0]", "[0.0]", "[2]", "[]", "[-1]", "[1e400]", "abc", "[a, b]", "{x: 1}", "nan", ".inf",
                     "-.inf", "1e309", "99999999999999999999", "-3", "!!python/object/apply:os.system ['true']",
                     "!custom 1", "[[[[[]]]]]", "&a [*a]", "../../x.yaml", "/etc/passwd", "null", "~", "''",
                     "true", "[0.5, 0.50000001]", "[42, 42]", "[1,"]),
    st.text(max_size=10),
)


# -- properties -----------------------------------------------------------------------------------------
@FUZZ
@given(text=st.lists(YAML_CHARS, max_size=40).map("".join))
def test_random_yaml_text(tmp_path, text):
    COUNTS["text"] += 1
    out = load(tmp_path, text)
    if isinstance(out, TaskConfig):
        check_task(out, tmp_path)


@FUZZ
@given(doc=mutated_task())
def test_mutated_task_documents(tmp_path, doc):
    COUNTS["mutated"] += 1
    out = load(tmp_path, yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))
    if isinstance(out, TaskConfig):
        check_task(out, tmp_path)


@FUZZ
@given(sets=st.lists(st.tuples(OVERRIDE_KEYS, OVERRIDE_VALUES), min_size=1, max_size=3))
def test_random_overrides(tmp_path, sets):
    COUNTS["overrides"] += 1
    out = load(tmp_path, yaml.safe_dump(BASE, sort_keys=False), [f"{k}={v}" for k, v in sets])
    if isinstance(out, TaskConfig):
        check_task(out, tmp_path)


def test_fuzz_counts_report(capsys):
    """Runs last in this module: prints how many inputs the three generators tried."""
    with capsys.disabled():
        print(f"\n[fuzz] task loader: {sum(COUNTS.values())} inputs ({COUNTS}); every one gave a TaskConfig or a "
              "one-line PrismError")


# -- the corpus: hand-written cases and the message each must give ------------------------------------
def _doc(**changes) -> str:
    d = json.loads(json.dumps(BASE))
    for k, v in changes.items():
        if v is ...:
            d.pop(k, None)
        else:
            d[k] = v
    return yaml.safe_dump(d, allow_unicode=True, sort_keys=False)


LOADER_CASES = [
    ("empty file", "", "is empty"),
    ("a list, not a mapping", "- a\n- b\n", "must be a mapping"),
    ("syntax error", "task: [unclosed\n", "YAML syntax error"),
    ("duplicate key", "task: a\ntask: b\n", "appears twice"),
    ("python tag", "task: !!python/object/apply:os.system ['touch /tmp/prism-pwned']\n", "not allowed"),
    ("custom tag", "task: !function 'lambda: 1'\n", "not allowed"),
    ("verbatim python tag", "task: !<tag:yaml.org,2002:python/name:os.system> x\n", "not allowed"),
    ("tag directive", "%TAG !p! tag:yaml.org,2002:python/\n---\ntask: !p!object/apply:os.system ['true']\n",
     "not allowed"),
    ("recursive alias", "task: &a [*a]\n", "refers to its own anchor"),
    ("alias bomb", "a0: &a0 [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)), "expands to more than"),
    ("deep nesting", "task: " + "[" * 3000 + "]" * 3000 + "\n", "nest 3001 deep"),
    ("deep mapping nesting", "task: " + "{a: " * 500 + "1" + "}" * 500 + "\n", "cannot be parsed"),
    ("deep block nesting", "".join(" " * i + f"k{i}:\n" for i in range(300)) + " " * 300 + "x: 1\n", "at most 64"),
    ("key typo", _doc(lable_fractions=[0.1], label_fractions=...), "did you mean 'label_fractions'"),
    ("unknown probe key", _doc(probe={"kind": "logistic", "CC": 1}), "unknown key 'probe.CC'"),
    ("negative seed", _doc(seeds=[-1]), "seeds"),
    ("huge seed", _doc(seeds=[2**40]), "seeds"),
    ("seed as string", _doc(seeds=["42"]), "seeds"),
    ("fraction zero", _doc(label_fractions=[0.0]), "label_fractions"),
    ("fraction above one", _doc(label_fractions=[1.5]), "label_fractions"),
    ("fraction NaN", "task: t\ndataset: d\nclass_names: [a, b]\nsource: {type: demo}\nsplits: {train: a, test: b}\n"
                     "label_fractions: [.nan]\n", "finite number"),
    ("fraction duplicates", _doc(label_fractions=[0.5, 0.5]), "duplicates"),
    ("C negative", _doc(probe={"kind": "logistic", "C": -1}), "probe.C"),
    ("C infinite", _doc(probe={"kind": "logistic", "C": float("inf")}), "probe.C"),
    ("max_iter huge", _doc(probe={"kind": "logistic", "max_iter": 10**12}), "probe.max_iter"),
    ("ece_bins zero", _doc(ece_bins=0), "ece_bins"),
    ("n_classes huge", _doc(n_classes=10**20, class_names=...), "n_classes"),
    ("one class", _doc(class_names=["only"]), "at least 2 classes"),
    ("class_counts wrong length", _doc(splits={"train": {"name": "t", "class_counts": [1, 2, 3]}, "test": "x"}),
     "class_counts"),
    ("bool as integer", _doc(ece_bins=True), "ece_bins"),
    ("missing train split", _doc(splits={"test": "x"}), "train"),
    ("unknown split", _doc(splits={"train": "a", "test": "b", "holdout": "c"}), "splits.holdout"),
    ("include outside", _doc(include="../../../../etc/hosts"), "outside the task folders"),
    ("include missing", _doc(include="nope.yaml"), "not found"),
    ("include not a string", _doc(include=[1, 2]), "include must be"),
    ("temperature bounds reversed", _doc(temperature_bounds=[5.0, 1.0]), "temperature_bounds"),
    ("bad binary_logits", _doc(binary_logits="sym"), "binary_logits"),
    ("columns nested", _doc(columns={"a": [1]}), "columns"),
    ("unicode task name ok", _doc(task="tâche-ünïcode-中文"), None),
    ("path-like task name refused", _doc(task="../../escape"), "path separator"),
    ("spaced task name ok", _doc(task="a b@c=1"), None),
]


@pytest.mark.parametrize("name,text,needle", LOADER_CASES, ids=[c[0] for c in LOADER_CASES])
def test_loader_corpus(tmp_path, name, text, needle):
    out = load(tmp_path, text)
    if needle is None:
        assert isinstance(out, TaskConfig), out
        check_task(out, tmp_path)
    else:
        assert isinstance(out, PrismError), f"{name}: loaded {out}"
        assert needle in str(out), str(out)
        assert str(tmp_path / "fuzz.yaml") in str(out) or "fuzz.yaml" in str(out)


OVERRIDE_CASES = [
    ("no equals sign", "label_fractions", "expected KEY=VALUE"),
    ("empty key", "=1", "the key is empty"),
    ("bad yaml value", "seeds=[1,", "not valid YAML"),
    ("python tag value", "seeds=!!python/object/apply:os.system ['touch /tmp/prism-pwned']", "tags are not allowed"),
    ("typo key", "prob.C=0.5", "unknown key 'prob'"),
    ("wrong type", "seeds=abc", "seeds"),
    ("near-duplicate fractions", "label_fractions=[0.5,0.5]", "duplicates"),
    ("deeply nested value", "seeds=" + "[" * 2000 + "]" * 2000, "nests deeper than 64"),
]


@pytest.mark.parametrize("name,override,needle", OVERRIDE_CASES, ids=[c[0] for c in OVERRIDE_CASES])
def test_override_corpus(tmp_path, name, override, needle):
    out = load(tmp_path, yaml.safe_dump(BASE), [override])
    assert isinstance(out, PrismError), f"{name}: loaded"
    assert needle in str(out), str(out)
