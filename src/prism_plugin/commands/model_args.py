"""``--model`` and ``--model-args``: each model's adapter options, shared by every command that builds adapters.

``--model-args`` belong to the ``--model`` before them (``--model A --model-args k=v --model B
--model-args k=w``), or go in brackets (``--model 'A[k=v,k2=w]'``); with one model they may come
anywhere. Register both options with ``action=ModelOrder`` and read :func:`model_specs` of
``args.model_order``.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from prism_plugin.errors import PrismError


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
            out[key.strip()] = value.strip()
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
        return token, {}
    name, bracket, inner = token.partition("[")
    if not bracket or not inner.endswith("]") or "[" in inner[:-1] or "]" in inner[:-1] or not name.strip():
        raise PrismError(f"--model {token!r}: write NAME[key=value,key2=value2], e.g. --model 'demo_vit[pooling=mean]'")
    return name.strip(), parse_model_args([inner[:-1]], f"--model {name.strip()}[...]")


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


def add_model_options(p: argparse.ArgumentParser, model_help: str, args_help: str = "") -> None:
    """``--model`` (repeatable, required) and ``--model-args`` bound to the model before them."""
    p.add_argument("--model", action=ModelOrder, required=True, metavar="ADAPTER", help=model_help)
    p.add_argument("--model-args", action=ModelOrder, metavar="K=V[,K=V]", help=args_help or (
        "options of the --model before it (or of the only model), e.g. pretrained=false,pooling=cls; "
        "also --model 'NAME[k=v,...]'"))


__all__ = ["AMBIGUOUS", "ModelOrder", "add_model_options", "model_specs", "parse_model_args", "split_model"]
