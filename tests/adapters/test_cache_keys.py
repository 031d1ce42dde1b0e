"""The adapter fingerprint (part of every cache key) changes with profile, pooling, weights and dtype."""

from __future__ import annotations

import pytest
import torch

from prism_plugin.embed.cache import EmbeddingCache

from .adapters_support import EIGHT, adapter_class


def key(adapter, tmp_path, on: str | None = None) -> str:
    """The cache key of ``adapter``'s train split; ``on``: as extracted on that device type (the precision
    in the key is the effective one: autocast applies on CUDA only)."""
    return EmbeddingCache(tmp_path).entry(adapter.fingerprint(device_type=on), "dataset-fp", "train").key


@pytest.mark.parametrize("name", list(EIGHT))
def test_profile_pooling_dtype_and_revision_change_the_key(name, tmp_path):
    cls = adapter_class(name)
    base = key(cls(), tmp_path)
    assert key(cls(), tmp_path) == base  # deterministic
    assert key(cls(batch_size=7, device="cpu"), tmp_path) == base  # how, not what
    assert key(cls(profile="model_card"), tmp_path) != base
    for pooling in cls.poolings:
        if pooling != cls.default_pooling:
            assert key(cls(pooling=pooling), tmp_path) != base
    other = "bf16" if cls().config()["dtype"] == "fp32" else "fp32"  # prism_main's default is fp32 (PRISM's)
    assert key(cls(dtype=other), tmp_path, on="cuda") != key(cls(), tmp_path, on="cuda")
    # off CUDA no autocast runs: a reduced precision computes (and is keyed as) fp32
    assert key(cls(dtype="bf16"), tmp_path, on="cpu") == key(cls(dtype="fp32"), tmp_path, on="cpu")
    assert key(cls(profile="prism_camelyon17"), tmp_path, on="cuda") != key(cls(), tmp_path, on="cuda")
    assert key(cls(revision="0123abc"), tmp_path) != base
    assert key(cls(normalize=False), tmp_path) != base
    assert key(cls(pretrained=False), tmp_path) != base
    assert key(cls(pretrained=False, seed=1), tmp_path) != key(cls(pretrained=False), tmp_path)


def test_checkpoint_contents_change_the_key(tmp_path):
    cls = adapter_class("uni")
    first, second, copy = tmp_path / "a.pth", tmp_path / "b.pth", tmp_path / "copy.pth"
    torch.save({"w": torch.zeros(3)}, first)
    torch.save({"w": torch.ones(3)}, second)
    copy.write_bytes(first.read_bytes())
    hub_key = key(cls(), tmp_path)
    a, b, c = (key(cls(checkpoint=str(p)), tmp_path) for p in (first, second, copy))
    assert len({hub_key, a, b}) == 3
    assert a == c  # content-addressed: the same bytes under another name reuse the cache


def test_checkpoint_folder_uses_its_weight_file(tmp_path):
    cls = adapter_class("uni")
    folder = tmp_path / "snapshot"
    folder.mkdir()
    torch.save({"w": torch.zeros(3)}, folder / "pytorch_model.bin")
    single = tmp_path / "pytorch_model.bin"
    single.write_bytes((folder / "pytorch_model.bin").read_bytes())
    assert key(cls(checkpoint=str(folder)), tmp_path) == key(cls(checkpoint=str(single)), tmp_path)


def test_bad_model_args_are_one_line_errors(tmp_path):
    from prism_plugin.errors import PrismError

    cls = adapter_class("virchow2")
    for kwargs, words in [({"profile": "paper"}, "prism_main, model_card"), ({"pooling": "avg"}, "cls+mean"),
                          ({"dtype": "int8"}, "fp32, bf16, fp16"), ({"checkpoint": str(tmp_path / "none.pt")}, "no such"),
                          ({"colour": "1"}, "does not accept")]:
        with pytest.raises(PrismError) as err:
            cls(**kwargs)
        assert words in str(err.value) and "\n" not in str(err.value)
