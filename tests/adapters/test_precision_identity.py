"""The precision the embeddings were actually computed in is part of their identity.

Autocast is applied on CUDA only (:func:`prism_plugin.embed.extract.embed_rows`): a bf16/fp16 request extracted on
the CPU computes fp32 numbers, so its cache key, ``summary.json`` and ``runs.csv`` say fp32 (and a note says what was
asked for); on CUDA the requested precision is the identity.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from prism_plugin.embed.adapter import embedding_identity, precision_identity
from prism_plugin.errors import PrismError
from prism_plugin.plugins import get_host
from prism_plugin.runner import make_adapter
from tests.conftest import prism_run

from .adapters_support import adapter_class


def kinds(tmp_path):
    """One adapter of every kind, asking for a reduced precision where the kind takes one."""
    host = get_host()
    out = {
        "demo_vit": make_adapter(host, "demo_vit", {"dtype": "bf16"}),
        "timm:": make_adapter(host, "timm:vit_tiny_patch16_224", {"pretrained": "false", "dtype": "fp16"}),
        "foundation (prism_camelyon17)": adapter_class("uni")(profile="prism_camelyon17", pretrained=False),
        "foundation (dtype=)": adapter_class("virchow2")(dtype="bf16", pretrained=False),
    }
    try:
        import transformers
    except ImportError:
        transformers = None
    if transformers is not None:
        folder = tmp_path / "hf-tiny"
        config = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                           patch_size=8, image_size=32)
        transformers.Dinov2Model(config).save_pretrained(folder)
        out["hf:"] = make_adapter(host, f"hf:{folder}", {"dtype": "bf16"})
    try:
        import open_clip  # noqa: F401
    except ImportError:
        pass
    else:
        out["open_clip:"] = make_adapter(host, "open_clip:ViT-B-32", {"dtype": "fp16"})  # random init
    return out


def test_every_adapter_kind_has_its_effective_precision(tmp_path):
    for kind, adapter in kinds(tmp_path).items():
        asked = precision_identity(adapter, "cuda")["precision_requested"]
        assert asked in ("bf16", "fp16"), kind
        assert precision_identity(adapter, "cuda")["precision"] == asked, kind
        on_cpu = precision_identity(adapter, "cpu")
        assert (on_cpu["precision"], on_cpu["precision_requested"]) == ("fp32", asked), kind
        assert "autocast is not applied" in on_cpu["note"], kind
        assert precision_identity(adapter, "mps")["precision"] == "fp32", kind
        # the key on the CPU is the key of an fp32 request: the same numbers, one cache entry
        adapter_fp32 = type(adapter).__new__(type(adapter))
        adapter_fp32.__dict__.update({k: v for k, v in adapter.__dict__.items() if not k.startswith("_precision")})
        adapter_fp32.autocast_dtype = None
        assert adapter.fingerprint(device_type="cpu") == adapter_fp32.fingerprint(device_type="cpu"), kind
        assert adapter.fingerprint(device_type="cuda") != adapter_fp32.fingerprint(device_type="cuda"), kind
    plain = make_adapter(get_host(), "demo_vit", {})
    assert precision_identity(plain) == {"precision": "fp32", "precision_requested": "fp32", "device": None,
                                         "note": ""}
    stored = make_adapter(get_host(), "precomputed", {})
    ident = embedding_identity(stored)
    assert (ident["precision"], ident["weights"], ident["weights_revision"]) == ("as stored", "as stored", None)


def test_the_bound_device_decides(tmp_path):
    from prism_plugin.embed.adapter import bind_extraction_device

    adapter = make_adapter(get_host(), "demo_vit", {"dtype": "bf16"})
    bind_extraction_device(adapter, "cpu")  # --device cpu, as the loader binds it
    assert embedding_identity(adapter)["precision"] == "fp32"
    assert embedding_identity(adapter)["notes"][0]["check"] == "precision_not_as_requested"


def test_an_extraction_in_another_precision_than_its_key_is_refused():
    """A worker on another kind of device than the one the key was made for (a GPU actor of a CPU driver) must
    not write bf16 numbers under an fp32 key."""
    from prism_plugin.embed.adapter import bind_extraction_device
    from prism_plugin.embed.extract import check_precision

    adapter = make_adapter(get_host(), "demo_vit", {"dtype": "bf16"})
    bind_extraction_device(adapter, "cpu")
    adapter.fingerprint()  # keyed as fp32
    check_precision(adapter, torch.device("cpu"), autocast=False)
    with pytest.raises(PrismError) as err:
        check_precision(adapter, torch.device("cuda"), autocast=True)
    assert "keyed as fp32" in str(err.value) and "--device" in str(err.value) and "\n" not in str(err.value)


def test_cpu_bf16_run_is_fp32_reuses_its_embeddings_and_says_so(tiny_task, tmp_path):
    env = {"PRISM_CACHE_DIR": str(tmp_path / "cache")}
    common = ("--task", str(tiny_task), "--model", "demo_vit", "--no-report", "--num-workers", "0", "--device", "cpu")
    prism_run(*common, "--quiet", "--output", str(tmp_path / "fp32"), env=env, check=True)
    proc = prism_run(*common, "--model-args", "dtype=bf16", "--output", str(tmp_path / "bf16"), env=env, check=True)
    assert "bf16 was asked for" in proc.stderr + proc.stdout  # said on the console
    fp32, bf16 = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("fp32", "bf16"))
    ident = bf16["embedding_identity"]
    assert (ident["precision"], ident["precision_requested"], ident["device"]) == ("fp32", "bf16", "cpu")
    assert set(bf16["embedding_cache"].values()) == {"hit"}  # the fp32 run's embeddings: the same numbers
    assert bf16["fingerprints"]["adapter"] == fp32["fingerprints"]["adapter"]
    assert bf16["adapter"]["dtype"] == "bf16"  # what was asked for stays in the adapter's description
    flag = next(f for f in bf16["flags"] if f["flag"] == "precision_not_as_requested")
    assert flag["level"] == "info" and flag["source"] == "embeddings"
    a, b = (pd.read_csv(tmp_path / d / "runs.csv", dtype=str, keep_default_na=False) for d in ("fp32", "bf16"))
    assert set(b["precision"]) == {"fp32"} and set(a["precision"]) == {"fp32"}
    for column in a.columns.drop("model"):
        assert b[column].equals(a[column]), column


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (autocast runs on CUDA only)")
def test_cuda_bf16_is_its_own_identity(tiles, tmp_path):
    import numpy as np

    from prism_plugin.data.base import ImageSplit
    from prism_plugin.embed.adapter import bind_extraction_device
    from prism_plugin.embed.cache import EmbeddingCache
    from prism_plugin.embed.extract import extract_split

    host = get_host()
    plain = make_adapter(host, "demo_vit", {})
    reduced = make_adapter(host, "demo_vit", {"dtype": "bf16"})
    split = ImageSplit(paths=list(tiles), labels=np.arange(len(tiles)) % 2, fingerprint="tiles-v1")
    out = []
    for adapter in (plain, reduced):
        bind_extraction_device(adapter, "cuda")
        entry = EmbeddingCache(tmp_path / "cache").entry(adapter.fingerprint(), split.fingerprint, "test")
        with entry.lock():
            extract_split(adapter, split, entry, device=torch.device("cuda"), num_workers=0, progress=False)
        out.append(np.asarray(entry.load()[0]))
    assert embedding_identity(reduced)["precision"] == "bf16" and embedding_identity(reduced)["notes"] == []
    assert reduced.fingerprint() != plain.fingerprint()
    gap = float(abs(out[0] - out[1]).max())
    assert 0 < gap < 0.05, gap  # bf16 numbers: close to fp32's, not equal
