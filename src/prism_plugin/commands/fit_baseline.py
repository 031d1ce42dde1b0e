"""``prism-run fit-baseline``: the hematology audit's *supervised* ResNet-18 baseline, fitted here.

::

    prism-run fit-baseline --task hema_acevedo --output baseline/        # then:
    prism-run --task hema_acevedo_to_matek --model resnet18 --model-args checkpoint=baseline/pytorch_model.bin

The audit (papers/002) lists "a supervised ResNet-18 baseline" trained on its source (Acevedo, BloodMNIST at
224 px, stratified image-level 70/30 split) but publishes none of its training settings. This command fits one
reproducibly, on exactly the images a run's probe is trained on: the task's ``train`` split as the runner's data
layer gives it (a transfer task: its source task's; never a ``val``/``test`` split, never target data), at the
task's ``split.seed`` unless ``--split-seed`` picks another of its split seeds.

What it does (every default is **ours**, recorded in ``baseline.json``): timm ``resnet18`` initialised from the
ImageNet-1k weights of ``--model resnet18`` (``timm/resnet18.tv_in1k``; ``--init auto``, the default, falls back to
a seeded random initialisation with a printed note when those weights are neither cached nor downloadable;
``--init imagenet`` refuses to), a new ``K``-class linear head, every layer trained with cross-entropy by SGD
(momentum 0.9, weight decay 1e-4, learning rate 0.01 on a per-epoch cosine schedule), 10 epochs, batch 32, on
images preprocessed by the adapter's own transform for ``--profile`` (``audit``: Resize 224 + CenterCrop 224,
bilinear, ImageNet statistics) with no augmentation, shuffled by a generator seeded with ``--seed``.

It writes into ``--output`` (each file atomically; the record last): ``pytorch_model.bin``, a state dict with timm
``resnet18`` keys (``fc`` is the K-class head, which ``--model resnet18`` ignores), loadable with
``--model resnet18 --model-args checkpoint=DIR/pytorch_model.bin`` (or ``checkpoint=DIR``), and ``baseline.json``
(task, split, class names, samples, hyperparameters, initial weights, loss and accuracy per epoch, the
checkpoint's digest, versions).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import time
from pathlib import Path
from typing import Any

from prism_plugin.errors import PrismError

CHECKPOINT_NAME = "pytorch_model.bin"
RECORD_NAME = "baseline.json"
#: our defaults (papers/002 publishes none of the baseline's training settings)
DEFAULTS = {"epochs": 10, "lr": 0.01, "batch_size": 32, "seed": 0, "weight_decay": 1e-4}
MOMENTUM = 0.9
INITS = ("auto", "imagenet", "random")
#: what the audit publishes about its baseline, beside what this command chooses (recorded in baseline.json)
PUBLISHED = ("papers/002: 'a supervised ResNet-18 baseline' beside 15 frozen encoders, 224 px; source Acevedo "
             "(BloodMNIST at 224 px), stratified image-level 70/30 split. Not published: initialisation, optimiser, "
             "learning rate, schedule, epochs, batch size, augmentation, seed.")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fit-baseline",
        help="fit the audit's supervised ResNet-18 baseline on a task's source train split",
        description="Fine-tune timm resnet18 (ImageNet-1k init when available) with cross-entropy on the train "
                    "split of a task (a transfer task: its source task), with --model resnet18's preprocessing, "
                    "seeded; write DIR/pytorch_model.bin (use it with --model resnet18 --model-args "
                    "checkpoint=DIR/pytorch_model.bin) and DIR/baseline.json. Defaults are ours: the audit does "
                    "not publish its baseline's training settings.",
    )
    p.add_argument("--task", required=True, metavar="TASK",
                   help="task name or YAML file; a transfer task fits on its source task")
    p.add_argument("--output", required=True, type=Path, metavar="DIR",
                   help=f"folder to write {CHECKPOINT_NAME} and {RECORD_NAME} into")
    p.add_argument("--epochs", default=str(DEFAULTS["epochs"]), metavar="N",
                   help=f"passes over the train split (default {DEFAULTS['epochs']})")
    p.add_argument("--lr", default=str(DEFAULTS["lr"]), metavar="X",
                   help=f"initial SGD learning rate, cosine-annealed per epoch (default {DEFAULTS['lr']})")
    p.add_argument("--batch-size", default=str(DEFAULTS["batch_size"]), metavar="B",
                   help=f"training batch size (default {DEFAULTS['batch_size']})")
    p.add_argument("--weight-decay", default=str(DEFAULTS["weight_decay"]), metavar="X",
                   help=f"SGD weight decay (default {DEFAULTS['weight_decay']}; momentum {MOMENTUM})")
    p.add_argument("--seed", default=str(DEFAULTS["seed"]), metavar="S",
                   help="seed of the head's (and a random) initialisation and of the shuffling (default 0)")
    p.add_argument("--split-seed", default=None, metavar="S",
                   help="split seed of the task's split procedure (default: the task's split.seed)")
    p.add_argument("--init", default="auto", choices=INITS,
                   help="initial weights: imagenet (timm/resnet18.tv_in1k, as --model resnet18; fails when "
                        "unavailable), random (seeded), auto (default: imagenet, else random with a note)")
    p.add_argument("--init-checkpoint", default=None, type=Path, metavar="PATH",
                   help="initial weights from a local resnet18 state dict (e.g. a copy of timm/resnet18.tv_in1k); "
                        "its fc is ignored")
    p.add_argument("--profile", default=None, metavar="NAME",
                   help="preprocessing profile of --model resnet18 to train with (default audit)")
    p.add_argument("--limit", default=None, metavar="N",
                   help="take N train items, class-balanced (as a run's --limit; for quick checks)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="override a task key (as for a run)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="data cache for generated/downloaded datasets (default: $PRISM_CACHE_DIR or "
                        "~/.cache/prism-plugin)")
    p.add_argument("--device", default="auto", help="device to train on (default auto)")
    p.add_argument("--num-workers", default="0", metavar="N", help="DataLoader workers (default 0)")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    from prism_plugin.commands import add_wait

    add_wait(p)
    return p


def _number(value: Any, flag: str, kind, *, minimum, strict: bool = False):
    """``value`` of ``flag`` as ``kind`` (int or float) >= ``minimum`` (> when ``strict``), or one line."""
    what = "an integer" if kind is int else "a number"
    bound = f"> {minimum}" if strict else f">= {minimum}"
    try:
        out = kind(str(value).strip())
    except ValueError:
        raise PrismError(f"{flag} {value}: must be {what} {bound}") from None
    if (kind is float and not math.isfinite(out)) or out < minimum or (strict and out == minimum):
        raise PrismError(f"{flag} {value}: must be {what} {bound}")
    return out


def check_args(args) -> dict[str, Any]:
    """The numeric options, checked (one line each, before torch is imported)."""
    out = {
        "epochs": _number(args.epochs, "--epochs", int, minimum=1),
        "lr": _number(args.lr, "--lr", float, minimum=0.0, strict=True),
        "batch_size": _number(args.batch_size, "--batch-size", int, minimum=1),
        "weight_decay": _number(args.weight_decay, "--weight-decay", float, minimum=0.0),
        "seed": _number(args.seed, "--seed", int, minimum=0),
        "num_workers": _number(args.num_workers, "--num-workers", int, minimum=0),
        "split_seed": None if args.split_seed is None else _number(args.split_seed, "--split-seed", int, minimum=0),
        "limit": None if args.limit is None else _number(args.limit, "--limit", int, minimum=1),
    }
    if args.output.exists() and not args.output.is_dir():
        raise PrismError(f"--output {args.output}: is a file; give a folder to write {CHECKPOINT_NAME} and "
                         f"{RECORD_NAME} into")
    if args.init_checkpoint is not None:
        if args.init == "random":
            raise PrismError("--init random with --init-checkpoint: pick one (the checkpoint is the initialisation)")
        if not args.init_checkpoint.exists():
            raise PrismError(f"--init-checkpoint {args.init_checkpoint}: no such file or folder")
    return out


def source_task(task):
    """The task whose train split is fitted: a transfer task's source task, else the task itself."""
    if getattr(task, "is_transfer", False):
        src = task.source_config
        if src is None:
            raise PrismError(f"task {task.name}: a transfer task without a resolved source task")
        return src
    return task


def train_split(task, host, split_seed: int | None, limit: int | None):
    """``(task at the split seed, its train ImageSplit)`` through the data layer a run uses."""
    from prism_plugin.data.catalogue import open_source
    from prism_plugin.data.splits import with_split_seed

    if "train" not in task.splits:
        raise PrismError(f"task {task.name}: has no train split (splits: {', '.join(task.splits)}); fit-baseline "
                         "fits on a task's train split")
    if split_seed is not None and not task.split:
        raise PrismError(f"--split-seed {split_seed}: task {task.name} has no split procedure (split:) to seed")
    task = with_split_seed(task, split_seed)
    source = open_source(task, host=host)
    if getattr(source, "input_kind", "images") != "images":
        raise PrismError(f"task {task.name}: source type {task.source.get('type')} yields embedding vectors, not "
                         "images; fit-baseline trains on images")
    return task, source.split("train", limit)


def initial_model(args, host, seed: int, profile: str | None):
    """``(timm resnet18 without head, the ResNet18 adapter, init record)``: the weights ``--model resnet18``
    would load (ImageNet, or ``--init-checkpoint``), or a random initialisation seeded as the adapter's
    ``pretrained=false seed=S`` is."""
    from prism_plugin.embed.hub import HubWeightsError
    from prism_plugin.runner import make_adapter

    margs: dict[str, Any] = {"seed": seed}
    if profile:
        profiles = host.adapter_factory("resnet18").factory.profiles
        if profile not in profiles:
            raise PrismError(f"--profile {profile}: --model resnet18 has profiles {', '.join(profiles)}")
        margs["profile"] = profile
    note = None
    mode = args.init
    if args.init_checkpoint is not None:
        adapter, mode = make_adapter(host, "resnet18", {**margs, "checkpoint": str(args.init_checkpoint)}), "checkpoint"
    elif mode == "random":
        adapter = make_adapter(host, "resnet18", {**margs, "pretrained": "false"})
    else:
        adapter = make_adapter(host, "resnet18", margs)
    path = None
    if mode in ("auto", "imagenet", "checkpoint"):
        try:
            path = adapter.weights_path()
            weights = adapter.weights_identity()
            mode = "checkpoint" if mode == "checkpoint" else "imagenet"
        except HubWeightsError as exc:
            if mode != "auto":
                raise PrismError(str(exc).replace("--model-args checkpoint=PATH", "--init-checkpoint PATH")) from None
            note = (f"ImageNet weights {adapter.hub_id} unavailable ({str(exc).split(';')[0]}); training from a "
                    f"random initialisation (seed {seed}) instead: pass --init imagenet to refuse, or "
                    "--init-checkpoint PATH with a local copy")
            adapter = make_adapter(host, "resnet18", {**margs, "pretrained": "false"})
            mode = "random"
    import torch  # after the weights are found: an unavailable download fails at once

    from prism_plugin.model_adapters.foundation import read_state_dict

    if mode == "random":
        weights = adapter.weights_identity()
        torch.manual_seed(seed)  # as the adapter builds pretrained=false seed=S
        model = adapter.create_model()
    else:
        state = adapter.adapt_state_dict(read_state_dict(path))
        state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
        model = adapter.create_model()
        adapter.load_weights(model, state, path)
    init = {"mode": mode, "hub_id": adapter.hub_id if mode == "imagenet" else None,
            "weights": weights.get("weights"), "weights_revision": weights.get("weights_revision"),
            "file": str(path) if mode == "checkpoint" else None, "note": note}
    return model, adapter, init


def fit(model, images, transform, n_classes: int, params: dict[str, Any], device, progress: bool):
    """Train ``model`` (with a new ``n_classes`` head) on ``images``; the per-epoch history and final accuracy."""
    import torch
    from torch.utils.data import DataLoader

    from prism_plugin.embed.extract import ImageFiles

    seed = params["seed"]
    torch.manual_seed(seed)
    model.reset_classifier(n_classes)
    model = model.to(device).train().requires_grad_(True)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    dataset = ImageFiles(images.paths, transform)
    labels = torch.as_tensor(images.labels, dtype=torch.long)
    indexed = _Indexed(dataset)
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(indexed, batch_size=params["batch_size"], shuffle=True, generator=generator,
                        num_workers=params["num_workers"], drop_last=False)
    opt = torch.optim.SGD(model.parameters(), lr=params["lr"], momentum=MOMENTUM,
                          weight_decay=params["weight_decay"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=params["epochs"])
    history = []
    for epoch in range(params["epochs"]):
        total, correct, n = 0.0, 0, 0
        lr = opt.param_groups[0]["lr"]
        for x, idx in loader:
            x, y = x.to(device), labels[idx].to(device)
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(y)
            correct += int((logits.detach().argmax(1) == y).sum())
            n += len(y)
        sched.step()
        row = {"epoch": epoch + 1, "lr": lr, "train_loss": total / n, "train_accuracy_running": correct / n}
        history.append(row)
        if progress:
            print(f"epoch {row['epoch']}/{params['epochs']}: loss {row['train_loss']:.4f}, running accuracy "
                  f"{row['train_accuracy_running']:.3f} (lr {lr:.3g})", flush=True)
    model.eval()
    correct = 0
    with torch.inference_mode():
        for x, idx in DataLoader(indexed, batch_size=params["batch_size"], shuffle=False,
                                 num_workers=params["num_workers"]):
            correct += int((model(x.to(device)).argmax(1).cpu() == labels[idx]).sum())
    return model, history, correct / len(labels)


class _Indexed:
    """``(image tensor, position)`` of a map-style dataset (labels are looked up by position)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i], i


def run(args) -> int:
    params = check_args(args)
    from prism_plugin.commands import check_cache_dir, host_of, writes_into
    from prism_plugin.embed.device import check_device

    args.device = check_device(args.device)
    check_cache_dir(args.cache_dir)
    host = host_of(args)
    from prism_plugin.data.datacache import using_cache_dir
    from prism_plugin.tasks.index import default_index

    index = default_index(host, args.include_path)
    if index.kind_of(args.task) == "group":
        raise PrismError(f"--task {args.task}: a group of tasks; fit-baseline fits one task's train split (give "
                         "one task, e.g. the source task of the group's transfer tasks)")
    requested = index.load_task(args.task, args.overrides)
    with using_cache_dir(args.cache_dir):
        task, images = train_split(source_task(requested), host, params["split_seed"], params["limit"])
    if len(task.class_names) != task.n_classes:
        raise PrismError(f"task {task.name}: fit-baseline needs class_names (one per class) to name the head")

    import numpy as np
    import torch

    import prism_plugin
    from prism_plugin.embed.adapter import file_content_digest
    from prism_plugin.embed.device import pick_device
    from prism_plugin.storage import atomic_write_bytes, atomic_write_text
    from prism_plugin.versions import library_versions

    t0 = time.perf_counter()
    model, adapter, init = initial_model(args, host, params["seed"], args.profile)
    writes_into(args, args.output)  # one writer per folder, taken once the inputs are known to be good
    if init["note"]:
        print(f"note: {init['note']}", flush=True)
    device = pick_device(args.device)
    counts = np.bincount(images.labels, minlength=task.n_classes).tolist()
    print(f"fit-baseline: resnet18 ({init['mode']} init) on {task.name} train ({len(images)} images, classes "
          f"{dict(zip(task.class_names, counts))}), {params['epochs']} epochs on {device}", flush=True)
    model, history, final_acc = fit(model, images, adapter.preprocessing.transform(), task.n_classes, params,
                                    device, progress=not args.quiet)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    buf = io.BytesIO()
    torch.save(state, buf)
    ckpt = args.output / CHECKPOINT_NAME
    atomic_write_bytes(ckpt, buf.getvalue())
    split_cfg = task.splits["train"]
    record = {
        "kind": "supervised resnet18 baseline (prism-run fit-baseline)",
        "task": task.name, "requested_task": requested.name, "dataset": task.dataset,
        "split": "train", "split_name": split_cfg.name,
        "split_seed": (task.split or {}).get("seed"), "split_procedure": (task.split or {}).get("procedure"),
        "split_fingerprint": images.fingerprint, "limit": params["limit"],
        "class_names": list(task.class_names), "class_counts": counts, "n_samples": len(images),
        "architecture": "timm resnet18", "head": f"linear {model.num_features} -> {task.n_classes} (fc)",
        "epochs": params["epochs"], "lr": params["lr"], "lr_schedule": "cosine annealing per epoch (T_max = epochs)",
        "batch_size": params["batch_size"], "seed": params["seed"],
        "optimiser": {"name": "SGD", "momentum": MOMENTUM, "weight_decay": params["weight_decay"],
                      "nesterov": False},
        "loss": "cross-entropy", "trained_layers": "all",
        "preprocessing": {"profile": adapter.profile, **adapter.preprocessing.describe()}, "augmentation": None,
        "init": init, "device": str(device),
        "history": history, "train_loss": [row["train_loss"] for row in history],
        "final_train_accuracy": final_acc, "final_train_accuracy_mode": "eval (after training, whole train split)",
        "checkpoint": {"file": CHECKPOINT_NAME, "blake2b": file_content_digest(ckpt), "keys": "timm resnet18",
                       "fc": "the task head; --model resnet18 ignores it"},
        "use": f"--model resnet18 --model-args checkpoint={ckpt}",
        "defaults": "ours (papers/002 publishes none)", "published": PUBLISHED,
        "prism_plugin_version": prism_plugin.__version__, "versions": library_versions(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    atomic_write_text(args.output / RECORD_NAME, json.dumps(record, indent=2, default=str) + "\n")
    print(f"final train accuracy {final_acc:.3f}; wrote {ckpt} and {args.output / RECORD_NAME}")
    print(f"use it: prism-run --task TASK --model resnet18 --model-args checkpoint={ckpt}")
    return 0


__all__ = ["add_parser", "run", "check_args", "source_task", "train_split", "CHECKPOINT_NAME", "RECORD_NAME"]
