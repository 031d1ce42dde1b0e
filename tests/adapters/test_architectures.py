"""The eight PRISM adapters build their real architectures (on torch's meta device: no weights allocated).

Expected values come from the model cards / hub configs and from the PRISM
paper (Table 3: sizes and dims) and PROTOCOL §1.1 (keys, display names, dims).
"""

from __future__ import annotations

import functools
import re

import pytest
import torch

from .adapters_support import EIGHT, adapter_class, needs_backend, parse_size, table_block

# width, patch, depth, register tokens, input size: from the model cards / hub configs
CARD = {
    "clip": (768, 32, 12, 0, 224),
    "plip": (768, 32, 12, 0, 224),
    "conch": (768, 16, 12, 0, 448),
    "uni": (1024, 16, 24, 0, 224),
    "virchow2": (1280, 14, 32, 4, 224),
    "gigapath": (1536, 16, 40, 0, 224),
    "h_optimus_0": (1536, 14, 40, 4, 224),
    "midnight": (1536, 14, 40, 0, 224),
}
# token sequence of the timm ViTs at 224 px: class token + registers + patches
TOKENS = {"uni": 1 + 196, "virchow2": 1 + 4 + 256, "gigapath": 1 + 196, "h_optimus_0": 1 + 4 + 256}


@functools.lru_cache(maxsize=None)
def _meta(name: str):
    adapter = adapter_class(name)(pretrained=False)
    with torch.device("meta"):
        model = adapter.create_model()
    return adapter, model


def meta_model(name: str):
    needs_backend(name)
    return _meta(name)


@pytest.mark.parametrize("name", list(EIGHT))
def test_architecture_on_meta_device(name):
    adapter, model = meta_model(name)
    params = list(model.parameters())
    assert params and all(p.is_meta for p in params), "the full-size model must not allocate weights"
    summary = adapter.arch_summary(model)
    width, patch, depth, regs, size = CARD[name]
    assert (summary["embed_dim"], summary["patch_size"], summary["depth"], summary["reg_tokens"],
            summary["img_size"]) == (width, patch, depth, regs, size)
    assert summary.items() >= dict(adapter.arch_facts).items()
    # the PRISM recipe on the full-size network gives the declared width (shapes only, on meta)
    crop = adapter.preprocessing.crop
    out = adapter.pool(model, torch.empty(2, 3, crop, crop, device="meta"))
    assert tuple(out.shape) == (2, adapter.embed_dim) == (2, adapter.paper_dim)
    if name in TOKENS:
        tokens = model.forward_features(torch.empty(1, 3, 224, 224, device="meta"))
        assert tuple(tokens.shape) == (1, TOKENS[name], width)
        assert model.num_prefix_tokens == 1 + regs


@pytest.mark.parametrize("name", list(EIGHT))
def test_every_recipe_width_on_meta(name):
    needs_backend(name)
    cls = adapter_class(name)
    for pooling, dim in cls.poolings.items():
        adapter = cls(pretrained=False, pooling=pooling)
        with torch.device("meta"):
            model = adapter.create_model(depth=1)
            crop = adapter.preprocessing.crop
            out = adapter.pool(model, torch.empty(1, 3, crop, crop))
        assert tuple(out.shape) == (1, dim) == (1, adapter.embed_dim), pooling


def test_sizes_and_dims_match_paper_table_3(paper_text):
    rows = table_block(paper_text, "Table 3:")
    header, body = rows[0], rows[1:]
    assert header[:4] == ["Model", "Type", "Size", "$d$"]
    display_to_key = {v.upper(): k for k, v in EIGHT.items()}
    checked = 0
    for row in body:
        key = display_to_key[row[0].upper()]
        adapter, model = meta_model(key)
        assert adapter.paper_dim == adapter.embed_dim == int(row[3]), row
        n_params = sum(p.numel() for p in model.parameters())
        assert abs(n_params / parse_size(row[2]) - 1) < 0.06, (row, n_params)
        checked += 1
    assert checked >= 6  # the text of Table 3 lists six of the eight models


def test_keys_names_dims_match_protocol(protocol_text):
    line = protocol_text.split("### 1.1", 1)[1].split("Display names", 1)[0]
    found = re.findall(r"([\w-]+) `(\w+)` (\d+)", line)
    assert len(found) == 8
    for display, key, dim in found:
        cls = adapter_class(key)
        assert cls.name == key and cls.display_name == display == EIGHT[key]
        assert cls.poolings[cls.default_pooling] == cls.paper_dim == int(dim)
