"""``prism-run fit-baseline``: the audit's supervised ResNet-18 baseline fitted on a task's train split, and
its checkpoint read back by ``--model resnet18 --model-args checkpoint=PATH``.

Offline (HF_HUB_OFFLINE=1, no ImageNet weights cached): ``--init auto`` trains from the seeded random
initialisation the adapter's ``pretrained=false seed=0`` builds, and says so. Tiny on purpose (5 synthetic
images, full-batch steps): the point is the wiring, the data it reads and the identity of what it writes.
"""

from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pytest

from tests.conftest import prism_run, run_main

pytest.importorskip("timm")
pytest.importorskip("torchvision")

OFFLINE = {"HF_HUB_OFFLINE": "1"}
TASK = "hema_demo_a"
LIMIT = 5
#: 4 images per class (20 in all, 14 train / 6 held out): quick to generate and to hash
SMALL = ("--set", "source.n_per_class=4")


def _task(name: str = TASK):
    from prism_plugin.plugins import get_host
    from prism_plugin.tasks.index import default_index

    host = get_host(())
    return host, default_index(host).load_task(name, [SMALL[1]])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One real subprocess fit: 2 epochs of one full batch of 5 images (one per class), on the CPU."""
    out = tmp_path_factory.mktemp("baseline")
    proc = prism_run("fit-baseline", "--task", TASK, "--output", str(out), "--epochs", "2", "--limit", str(LIMIT),
                     "--batch-size", str(LIMIT), "--seed", "0", "--device", "cpu", *SMALL, env=OFFLINE)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "baseline.json").read_text())
    return out, record, proc


def test_fit_writes_a_checkpoint_and_a_record(fitted):
    import prism_plugin
    from prism_plugin.embed.adapter import file_content_digest

    out, record, proc = fitted
    ckpt = out / "pytorch_model.bin"
    assert ckpt.is_file() and not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    _, task = _task()
    assert record["task"] == TASK and record["split"] == "train" and record["split_seed"] == 0
    assert record["class_names"] == list(task.class_names)
    assert record["n_samples"] == LIMIT and record["class_counts"] == [1] * 5
    assert (record["epochs"], record["lr"], record["batch_size"], record["seed"]) == (2, 0.01, LIMIT, 0)
    assert record["optimiser"] == {"name": "SGD", "momentum": 0.9, "weight_decay": 1e-4, "nesterov": False}
    assert record["preprocessing"]["profile"] == "audit" and record["preprocessing"]["crop"] == 224
    assert record["prism_plugin_version"] == prism_plugin.__version__
    assert record["checkpoint"]["blake2b"] == file_content_digest(ckpt)
    # offline, nothing cached: a random start, named, and said on stdout
    assert record["init"]["mode"] == "random" and record["init"]["weights"].startswith("random-init:seed=0")
    assert "note: ImageNet weights timm/resnet18.tv_in1k unavailable" in proc.stdout
    assert len(record["train_loss"]) == 2 and 0.0 <= record["final_train_accuracy"] <= 1.0


def test_training_lowers_the_loss(fitted):
    _, record, _ = fitted
    first, last = record["train_loss"]
    assert np.isfinite([first, last]).all()
    assert last < first - 1e-3, record["history"]


def test_only_the_train_split_is_read(fitted):
    """The fitted images are the runner's train split (same fingerprint); the train split is the 70 % of the
    pool, disjoint from the held-out 30 % that is the run's val and test split."""
    from prism_plugin.commands.fit_baseline import source_task, train_split
    from prism_plugin.data.catalogue import open_source

    _, record, _ = fitted
    host, task = _task()
    _, limited = train_split(task, host, None, LIMIT)
    assert record["split_fingerprint"] == limited.fingerprint
    source = open_source(task, host=host)
    full, held = source.split("train"), source.split("test")
    assert record["split_fingerprint"] != source.split("test", LIMIT).fingerprint
    assert len(full) == 14 and len(held) == 6  # 5 classes x 4, stratified 70/30
    assert {str(p) for p in full.paths}.isdisjoint({str(p) for p in held.paths})
    assert len(train_split(task, host, None, None)[1]) == len(full)
    # a transfer task fits on its source task, never its target
    from prism_plugin.tasks.index import default_index

    index = default_index(host)
    src, plain = source_task(index.load_task("hema_demo_a_to_c")), index.load_task(TASK)
    assert src.name == TASK and (src.source, src.split, src.splits) == (plain.source, plain.split, plain.splits)


def test_the_checkpoint_loads_into_resnet18_and_embeds_differently(fitted, tmp_path):
    import torch

    from prism_plugin.embed.extract import ImageFiles
    from prism_plugin.model_adapters.imagenet import ResNet18

    out, record, _ = fitted
    ckpt = out / "pytorch_model.bin"
    res = run_main("--task", TASK, "--model", "resnet18", "--model-args", f"checkpoint={ckpt}", "--limit", "5",
                   "--set", "split_seeds=[0]", *SMALL, "--probe", "logistic_std", "--output", str(tmp_path / "run"),
                   "--no-report", "--quiet", "--device", "cpu", env=OFFLINE)
    assert res.returncode == 0, res.stderr
    tuned, start = ResNet18(checkpoint=str(ckpt)), ResNet18(pretrained=False, seed=0)
    assert start.weights_identity()["weights"] == record["init"]["weights"]  # the fit started here
    _, task = _task()
    from prism_plugin.data.catalogue import open_source

    images = open_source(task).split("test", 2)
    batch = torch.stack([ImageFiles(images.paths, tuned.preprocessing.transform())[i] for i in range(2)])
    embs = []
    for adapter in (tuned, start):
        adapter.build(torch.device("cpu"))
        with torch.inference_mode():
            embs.append(adapter.forward(batch).numpy())
    assert embs[0].shape == embs[1].shape == (2, 512)
    assert not np.allclose(embs[0], embs[1], atol=1e-4)


def test_the_checkpoint_digest_is_the_cache_key(fitted, tmp_path):
    """``checkpoint=`` keys by file content (storage's memoised digest): not the default's key, the same key for a
    copy elsewhere, a new one when the file changes."""
    import torch

    from prism_plugin.model_adapters.imagenet import ResNet18

    out, _, _ = fitted
    ckpt = out / "pytorch_model.bin"
    key = ResNet18(checkpoint=str(ckpt)).fingerprint()
    assert key != ResNet18(pretrained=False, seed=0).fingerprint()
    assert ResNet18(checkpoint=str(ckpt)).weights_identity()["weights"].startswith("file:")
    copy = tmp_path / "copy" / "pytorch_model.bin"
    copy.parent.mkdir()
    shutil.copy(ckpt, copy)
    assert ResNet18(checkpoint=str(copy)).fingerprint() == key
    assert ResNet18(checkpoint=str(copy.parent)).fingerprint() == key  # the folder form finds the same file
    state = torch.load(copy, map_location="cpu", weights_only=True)
    state["fc.bias"] = state["fc.bias"] + 1.0  # same architecture, other bytes
    torch.save(state, copy)
    assert ResNet18(checkpoint=str(copy)).fingerprint() != key


def test_init_checkpoint_starts_from_that_file(fitted):
    """``--init-checkpoint`` (e.g. a local copy of the ImageNet weights): the backbone starts as the file has it
    (its fc ignored), named by the file's digest."""
    import torch

    from prism_plugin.commands.fit_baseline import initial_model
    from prism_plugin.embed.adapter import file_content_digest

    out, _, _ = fitted
    ckpt = out / "pytorch_model.bin"
    host, _ = _task()
    args = argparse.Namespace(init="auto", init_checkpoint=ckpt)
    model, _, init = initial_model(args, host, 0, None)
    assert init["mode"] == "checkpoint" and init["weights"] == "file:" + file_content_digest(ckpt)
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert torch.equal(model.state_dict()["conv1.weight"], saved["conv1.weight"])
    assert "fc.weight" not in model.state_dict()  # the head is new: fit() adds one per task


def test_bad_arguments_are_one_line(tmp_path):
    proc = prism_run("fit-baseline", "--task", TASK, "--output", str(tmp_path / "x"), "--epochs", "0", env=OFFLINE)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "--epochs 0: must be an integer >= 1" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()
    cases = {("--lr", "abc"): "--lr abc: must be a number > 0",
             ("--batch-size", "0"): "--batch-size 0",
             ("--task", "hema_demo_matrix"): "a group of tasks",
             ("--init", "random", "--init-checkpoint", str(tmp_path)): "pick one",
             ("--profile", "nope"): "--profile nope: --model resnet18 has profiles audit, model_card",
             ("--init", "imagenet"): "--init-checkpoint PATH"}
    for extra, expected in cases.items():
        argv = ["fit-baseline", "--task", TASK, "--output", str(tmp_path / "y"), "--limit", "5", *SMALL, *extra]
        if extra[0] == "--task":
            argv = ["fit-baseline", *extra, "--output", str(tmp_path / "y")]
        res = run_main(*argv, env=OFFLINE)
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.returncode == 2 and len(lines) == 1 and expected in lines[0], (extra, res.stderr)
        assert "Traceback" not in res.stderr and not (tmp_path / "y").exists()
