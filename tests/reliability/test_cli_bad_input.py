"""prism-run on a sample of bad inputs: exit 2, one stderr line, no traceback, no output left.

A few cases run as real subprocesses (the console script's exit status and stderr); the rest run
``prism_plugin.cli.main`` in this process, which takes the same path without importing torch again.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tests.conftest import prism_run, run_main
from tests.reliability.conftest import SECRET

EVIL = "task: !!python/object/apply:os.system ['touch {marker}']\ndataset: x\n"


def _precomputed(folder: Path, *, nan=False, short=False, pickled=None) -> Path:
    root = folder / "emb" / "Demo-Binary"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("val", 10), ("test", 10)):
        X = rng.normal(size=(n, 4)).astype(np.float32)
        y = np.arange(n) % 2
        if nan and split == "val":
            X[3, 1] = np.nan
        if short and split == "test":
            y = y[:-2]
        np.save(root / f"{split}_features.npy", X)
        np.save(root / f"{split}_labels.npy", y)
    if pickled is not None:
        class Evil:
            def __reduce__(self):
                import os
                return (os.system, (f"touch {pickled}",))
        arr = np.empty(3, dtype=object)
        arr[:] = [Evil()] * 3
        np.save(root / "train_labels.npy", arr, allow_pickle=True)
    return root.parent


def cases(tmp: Path) -> list[tuple[str, list[str], dict, str]]:
    """(name, argv, extra env, needle in the error line); every case runs with --output tmp/<name>."""
    marker = tmp / "pwned"
    (tmp / "evil.yaml").write_text(EVIL.format(marker=marker))
    (tmp / "cyclic.yaml").write_text("task: &a [*a]\n")
    (tmp / "afile").write_text("not a folder\n")
    demo = ["--task", "prism_demo", "--model", "demo_vit"]
    pre = ["--task", "prism_demo", "--model", "precomputed"]
    return [
        ("python tag task file", ["--task", str(tmp / "evil.yaml"), "--model", "demo_vit"], {}, "not allowed"),
        ("recursive alias task file", ["--task", str(tmp / "cyclic.yaml"), "--model", "demo_vit"], {}, "own anchor"),
        ("python tag in --set", demo + ["--set", f"seeds=!!python/object/apply:os.system ['touch {marker}']"], {},
         "--set seeds: YAML tags are not allowed"),
        ("near-duplicate fractions", demo + ["--set", "label_fractions=[0.5,0.5000001]"], {}, "duplicates"),
        ("model-args without =", demo + ["--model-args", "pooling"], {}, "key=value"),
        ("negative --num-workers", demo + ["--num-workers", "-1"], {}, "--num-workers -1: must be >= 0"),
        ("geometry negative --num-workers", ["geometry", *demo, "--model", "demo_vit", "--num-workers", "-1"], {},
         "--num-workers -1: must be >= 0"),
        ("output is a file", demo + ["--set", "seeds=[42]", "--output", str(tmp / "afile")], {}, "not a folder"),
        ("cache dir is a file", demo + ["--limit", "8", "--cache-dir", str(tmp / "afile")], {}, "is a file, not a folder"),
        ("bad PRISM_SHARD_SIZE", demo + ["--limit", "8", "--cache-dir", str(tmp / "fresh-cache")],
         {"PRISM_SHARD_SIZE": "lots"}, "PRISM_SHARD_SIZE"),
        ("NaN in precomputed embeddings", pre + ["--model-args", f"root={_precomputed(tmp / 'nan', nan=True)}"], {},
         "NaN or inf"),
        ("length mismatch in precomputed", pre + ["--model-args", f"root={_precomputed(tmp / 'short', short=True)}"],
         {}, "equal length"),
        ("pickled object labels", pre + ["--model-args", f"root={_precomputed(tmp / 'pkl', pickled=marker)}"], {},
         "without pickle"),
        ("cache rm without a selection", ["cache", "rm", "--cache-dir", str(tmp)], {}, "say what to remove"),
        ("cache rm with a bad key", ["cache", "rm", "zz", "--cache-dir", str(tmp)], {}, "at least 4 hex"),
    ]


#: cases run as real subprocesses (the rest in this process)
SUBPROCESS_CASES = ("python tag task file", "NaN in precomputed embeddings")


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    table = cases(tmp_path)

    def one(case, runner):
        name, argv, env, needle = case
        out = tmp_path / "out" / name.replace(" ", "_")
        args = argv if argv[0] == "cache" or "--output" in argv else argv + ["--output", str(out)]
        proc = runner(*args, env={"HF_TOKEN": SECRET, **env})
        return name, out, needle, proc

    in_process = [case for case in table if case[0] not in SUBPROCESS_CASES]
    with ThreadPoolExecutor(max_workers=2) as pool:
        spawned = pool.map(lambda case: one(case, prism_run), [c for c in table if c[0] in SUBPROCESS_CASES])
        results = [one(case, run_main) for case in in_process] + list(spawned)
    problems = []
    for name, out, needle, proc in results:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        ok = (proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("prism-run: error: ")
              and needle in lines[0] and "Traceback" not in proc.stderr and not out.exists())
        if not ok:
            problems.append(f"{name}: rc={proc.returncode} exists={out.exists()} stderr={proc.stderr!r}")
    assert not problems, "\n".join(problems)
    assert not (tmp_path / "pwned").exists(), "a YAML or pickle payload was executed"
    assert len(results) == len(table) >= 13
