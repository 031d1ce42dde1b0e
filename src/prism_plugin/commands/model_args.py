"""``--model`` and ``--model-args``: each model's adapter options, shared by every command that builds adapters.

``--model-args`` belong to the ``--model`` before them (``--model A --model-args k=v --model B
--model-args k=w``), or go in brackets (``--model 'A[k=v,k2=w]'``); with one model they may come
anywhere. Register both options with ``action=ModelOrder`` and read :func:`model_specs` of
``args.model_order``.

Every ``--model`` token and every ``--model-args`` key and value is a name the user typed that reaches the console,
``runs.csv`` and the report: one with a control or bidi character is refused here, naming the argument
(:func:`prism_plugin.errors.plain_name`).

Each model's label (its ``model`` value in ``runs.csv``, the console and the report, and its results folder) follows
one rule, :func:`model_label`, whether it runs alone or beside other option sets: its display name plus every option
given to it, unless the user gave ``name=`` (see :data:`UNLABELLED_ARGS` for the options that never label).
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping, Sequence

from prism_plugin.errors import PrismError, plain_name


def parse_model_args(items: Sequence[str] | None, what: str = "--model-args") -> dict[str, str]:
    """``["pooling=cls,normalize=false"]`` -> ``{"pooling": "cls", "normalize": "false"}`` (later wins)."""
    out: dict[str, str] = {}
    for item in items or ():
        for part in item.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise PrismError(f"{what} {part!r}: expected key=value (e.g. pretrained=false,pooling=cls)")
            key, value = part.split("=", 1)
            if not key.strip():
                raise PrismError(f"{what} {part!r}: the key before '=' is empty (e.g. pooling=cls)")
            key = plain_name(key.strip(), what)
            out[key] = plain_name(value.strip(), f"{what} {key}")
    return out


class ModelOrder(argparse.Action):
    """``--model`` / ``--model-args``: append like ``action="append"`` and record the command-line order
    in ``namespace.model_order`` as ``(dest, value)`` pairs, so each --model-args binds to its model."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or [])
        items.append(values)
        setattr(namespace, self.dest, items)
        order = list(getattr(namespace, "model_order", None) or [])
        order.append((self.dest, values))
        namespace.model_order = order


def split_model(token: str) -> tuple[str, dict[str, str]]:
    """``"A[k=v,k2=w]"`` -> ``("A", {"k": "v", "k2": "w"})``; a plain name has no options."""
    token = token.strip()
    if "[" not in token and "]" not in token:
        return plain_name(token, "--model"), {}
    name, bracket, inner = token.partition("[")
    if not bracket or not inner.endswith("]") or "[" in inner[:-1] or "]" in inner[:-1] or not name.strip():
        raise PrismError(f"--model {plain_name(token, '--model')!r}: write NAME[key=value,key2=value2], "
                         "e.g. --model 'demo_vit[pooling=mean]'")
    name = plain_name(name.strip(), "--model")
    return name, parse_model_args([inner[:-1]], f"--model {name}[...]")


AMBIGUOUS = ("--model-args {value} comes before any --model, but {n} models are given: put each model's options "
             "right after it (--model A --model-args k=v --model B --model-args k=w) or in brackets "
             "(--model 'A[k=v]')")


def model_specs(order: Sequence[tuple[str, str]]) -> list[tuple[str, dict[str, str]]]:
    """``(adapter name, model_args)`` per ``--model``, from the recorded ``--model``/``--model-args`` order."""
    n_models = sum(1 for dest, _ in order if dest == "model")
    specs: list[tuple[str, dict[str, str]]] = []
    before: dict[str, str] = {}  # --model-args before the only --model (the original one-model form)
    for dest, value in order:
        if dest == "model":
            name, opts = split_model(value)
            specs.append((name, {**before, **opts}))
        elif specs:
            specs[-1][1].update(parse_model_args([value]))
        elif n_models == 1:
            before.update(parse_model_args([value]))
        else:
            raise PrismError(AMBIGUOUS.format(value=value, n=n_models))
    return specs


#: options that never enter a model's label: ``name`` (the label itself), those that do not change the numbers
#: (``batch_size``, ``device``, ``num_workers``, ``pretraining_data``) and those that say where the weights or arrays
#: are read from (``checkpoint``, ``root``, ``path``: the adapter's fingerprint covers their content, and
#: ``precomputed`` takes its display name from the folder). They label a model only to tell apart two models of one
#: command that would otherwise share a label.
UNLABELLED_ARGS = frozenset({"name", "batch_size", "device", "num_workers", "pretraining_data",
                             "checkpoint", "root", "path"})


def model_label(display_name: str, model_args: Mapping[str, Any], *, every: bool = False) -> str:
    """The label of one model: ``DemoViT-Tiny`` + ``[pooling=mean]`` -> ``DemoViT-Tiny-pooling-mean``.

    The display name, then ``-key-value`` for every option given (sorted by key) but :data:`UNLABELLED_ARGS` (with
    ``every``: all of them but ``name``); with ``name=`` the display name alone (the adapter took the name as its
    display name). The same whether the model runs alone or beside other option sets; a model given no options keeps
    its display name. A display name from the adapter (a folder's name, a third party's) is escaped, never carrying a
    control character (:func:`prism_plugin.errors.plain_name`).
    """
    shown = plain_name(display_name)
    if model_args.get("name"):
        return shown
    skip = {"name"} if every else UNLABELLED_ARGS
    parts = [f"{k}-{v}" for k, v in sorted(model_args.items()) if k not in skip]
    return plain_name("-".join([shown, *parts]))


def model_labels(display_names: Sequence[str], specs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The label of each model of one command (:func:`model_label`). Models that would share one label but differ in
    an :data:`UNLABELLED_ARGS` option are told apart by it too; the same model given twice with the same options, or
    two models given the same ``name=``, is refused."""
    first = [model_label(d, args) for d, (_, args) in zip(display_names, specs)]
    labels = [model_label(d, args, every=True) if first.count(label) > 1 and not args.get("name") else label
              for d, (_, args), label in zip(display_names, specs, first)]
    seen: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for label, (name, model_args) in zip(labels, specs):
        if label in seen:
            other, other_args = seen[label]
            if other == name and dict(other_args) == dict(model_args):
                raise PrismError(f"--model {name} is given twice with the same --model-args "
                                 f"({', '.join(f'{k}={v}' for k, v in sorted(model_args.items())) or 'none'}); "
                                 "give each model once")
            raise PrismError(f"--model {other} and --model {name} would both be labelled {label!r} in runs.csv and "
                             "the report; give one of them another name (--model-args name=... where the adapter "
                             "takes one) or run them in separate commands")
        seen[label] = (name, model_args)
    return labels


def add_model_options(p: argparse.ArgumentParser, model_help: str, args_help: str = "") -> None:
    """``--model`` (repeatable, required) and ``--model-args`` bound to the model before them."""
    p.add_argument("--model", action=ModelOrder, required=True, metavar="ADAPTER", help=model_help)
    p.add_argument("--model-args", action=ModelOrder, metavar="K=V[,K=V]", help=args_help or (
        "options of the --model before it (or of the only model), e.g. pretrained=false,pooling=cls; "
        "also --model 'NAME[k=v,...]'"))


__all__ = ["AMBIGUOUS", "UNLABELLED_ARGS", "ModelOrder", "add_model_options", "model_label", "model_labels",
           "model_specs", "parse_model_args", "split_model"]
