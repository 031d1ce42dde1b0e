"""Bad input: one clear line naming the file, field or argument; no traceback; nothing lost."""

from __future__ import annotations

import numpy as np
import pytest

from prism_plugin import evaluate
from prism_plugin.errors import PrismError
from tests.conftest import prism_run, run_main


def ok_arrays(n=60, k=2, seed=0):
    rng = np.random.default_rng(seed)
    def split(m):
        y = np.arange(m) % k
        return rng.normal(size=(m, 8)).astype(np.float32) + y[:, None], y
    return split(n), split(n // 2), split(n // 2)


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip().splitlines()
    errors = [line for line in err if line.startswith("prism-run: error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def test_unknown_task_suggests_closest():
    proc = prism_run("--task", "prism_dem", "--model", "demo_vit")
    assert_one_line_error(proc, "unknown task 'prism_dem'", "prism_demo")


def test_unknown_adapter_suggests_closest():
    proc = run_main("--task", "prism_demo", "--model", "demo_vitt")
    assert_one_line_error(proc, "unknown adapter 'demo_vitt'", "'demo_vit'")


def test_unknown_plugin_to_disable():
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--disable", "calibrtion")
    assert_one_line_error(proc, "unknown plugin 'calibrtion'", "'calibration'")


def test_unknown_model_arg_names_accepted_ones():
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--model-args", "pooling=cls,colour=red")
    assert_one_line_error(proc, "colour", "accepts")


@pytest.mark.parametrize("value,needle", [("[0.0,0.5]", "label_fractions"), ("[1.5]", "(0, 1]"),
                                          ("[abc]", "label_fractions")])
def test_fraction_outside_unit_interval(value, needle):
    proc = run_main("--task", "prism_demo", "--model", "demo_vit", "--set", f"label_fractions={value}")
    assert_one_line_error(proc, needle)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "broken.yaml").write_text("task: broken\ndataset: X\nsplits: {train: [unclosed\n")
    proc = run_main("--task", str(tmp_path / "broken.yaml"), "--model", "demo_vit")
    line = assert_one_line_error(proc, "broken.yaml:", "YAML syntax error")
    assert ":3" in line or ":4" in line


def test_schema_error_names_file_line_and_key(tmp_path):
    (tmp_path / "typo.yaml").write_text(
        "task: typo\ndataset: X\nclass_names: [a, b]\nsource: {type: demo}\n"
        "splits: {train: train, test: test}\nlabel_fraction: [0.1]\n")
    proc = run_main("validate", str(tmp_path / "typo.yaml"))
    assert proc.returncode == 2
    assert "typo.yaml:6" in proc.stderr and "'label_fraction'" in proc.stderr and "label_fractions" in proc.stderr


def test_yaml_python_tags_never_execute(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(
        f"task: evil\ndataset: !!python/object/apply:os.system ['touch {marker}']\n")
    proc = run_main("validate", str(tmp_path / "evil.yaml"))
    assert proc.returncode == 2 and "not allowed" in proc.stderr
    assert not marker.exists()


# ---- the Python API gives the same validation as the CLI ----
def test_labels_must_be_integers():
    (Xtr, ytr), va, te = ok_arrays()
    with pytest.raises(PrismError, match="train labels: labels must be integers"):
        evaluate((Xtr, ytr + 0.5), va, te)
    with pytest.raises(PrismError, match="train labels.*dtype"):
        evaluate((Xtr, ytr.astype(str)), va, te)


def test_length_mismatch():
    (Xtr, ytr), va, te = ok_arrays()
    with pytest.raises(PrismError, match="train: 60 feature rows but 59 labels"):
        evaluate((Xtr, ytr[:-1]), va, te)


def test_nan_in_embeddings():
    tr, va, (Xte, yte) = ok_arrays()
    Xte = Xte.copy()
    Xte[3, 2] = np.nan
    with pytest.raises(PrismError, match="test features: features contain NaN or inf"):
        evaluate(tr, va, (Xte, yte))


def test_class_absent_from_training():
    (Xtr, ytr), va, te = ok_arrays(k=3)
    keep = ytr != 2
    with pytest.raises(PrismError, match=r"class\(es\) \[2\] absent from the training split"):
        evaluate((Xtr[keep], ytr[keep]), va, te)


def test_empty_split_and_bad_fraction():
    tr, va, (Xte, yte) = ok_arrays()
    with pytest.raises(PrismError, match="test: the split is empty"):
        evaluate(tr, va, (Xte[:0], yte[:0]))
    with pytest.raises(PrismError, match=r"outside \(0, 1\]"):
        evaluate(tr, va, (Xte, yte), fractions=(0.0,))


def test_labels_out_of_range_for_task_classes():
    tr, va, te = ok_arrays(k=3)
    with pytest.raises(PrismError, match="out of range for n_classes = 2"):
        evaluate(tr, va, te, n_classes=2)


def test_corrupt_cache_entry_is_detected_and_recomputed(tmp_path):
    # a private cache: the entry corrupted is this run's own (in-process runs); the demo source with 4 to 6
    # tiles a class per split keeps both the tile generation and the extraction short
    cache = tmp_path / "cache"
    (tmp_path / "tiny_demo.yaml").write_text(
        "task: tiny_demo\ndataset: Demo-Binary\nclass_names: [normal, tumour]\n"
        "source: {type: demo, variant: binary, per_class: {train: 6, val: 4, test: 4}}\n"
        "splits: {train: train, val: val, test: test}\nlabel_fractions: [1.0]\nseeds: [42]\n")
    small = ["--task", str(tmp_path / "tiny_demo.yaml"), "--model", "demo_vit", "--quiet", "--no-report",
             "--cache-dir", str(cache)]
    out = tmp_path / "r1"
    run_main(*small, "--output", str(out), check=True)
    from prism_plugin.embed.cache import EmbeddingCache

    entries = EmbeddingCache(cache).entries()
    assert len(entries) == 3  # train, val, test
    victim = entries[0].dir / "features.npy"
    data = bytearray(victim.read_bytes())
    data[-7] ^= 0xFF  # flip one byte of the last embedding
    victim.write_bytes(bytes(data))
    out2 = tmp_path / "r2"
    proc = run_main(*small, "--output", str(out2), check=True)
    assert "corrupt" in proc.stderr and "recomputing" in proc.stderr
    assert (out2 / "runs.csv").read_bytes() == (out / "runs.csv").read_bytes()
