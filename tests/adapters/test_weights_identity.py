"""The weights' identity: the hub commit loaded is part of the cache key, summary.json and runs.csv.

Every test builds a real Hugging Face hub cache (``models--org--name/{blobs,refs,snapshots}``, snapshot files
linked to their blobs as the hub client writes them) holding small random weights of reduced architectures, and
lets huggingface_hub resolve it offline (``HF_HUB_OFFLINE=1``). Moving ``refs/main`` to a second snapshot stands
for an upstream checkpoint update.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from prism_plugin.embed import hub
from prism_plugin.errors import PrismError
from tests.conftest import needs, prism_run

from .adapters_support import adapter_class

SHA_A = "a" * 8 + hashlib.sha1(b"first").hexdigest()[8:]
SHA_B = "b" * 8 + hashlib.sha1(b"second").hexdigest()[8:]


def add_snapshot(cache: Path, repo: str, commit: str, files: dict[str, Path], ref: str | None = "main") -> Path:
    """Put ``files`` (name -> a file to copy) in ``cache`` as the hub client stores a download of ``repo`` at
    ``commit``: content-addressed blobs, snapshot entries linking to them, ``refs/<ref>`` naming the commit."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        data = Path(source).read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    if ref is not None:
        set_ref(cache, repo, commit, ref)
    return snap


def set_ref(cache: Path, repo: str, commit: str, ref: str = "main") -> None:
    path = cache / ("models--" + repo.replace("/", "--")) / "refs" / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(commit)


@pytest.fixture
def hub_cache(monkeypatch, tmp_path):
    """An empty hub cache the in-process hub client uses, offline, and an embedding cache of this test's own;
    the process's hub state restored after."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf-hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path / "prism-cache"))  # commits recorded per test
    hub.reset_state()
    yield cache
    hub.reset_state()


# -- the resolution itself ------------------------------------------------------------------------------------
def test_offline_revision_comes_from_the_local_snapshot(hub_cache, tmp_path, network_attempts):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"weights")
    add_snapshot(hub_cache, "org/model", SHA_A, {"pytorch_model.bin": weights})
    add_snapshot(hub_cache, "org/model", SHA_B, {"pytorch_model.bin": weights}, ref="v2")
    rev = hub.resolve_revision("org/model", None, filenames=("model.safetensors", "pytorch_model.bin"))
    assert (rev.commit, rev.how, rev.requested, rev.level) == (SHA_A, "local cache", "main", "info")
    assert "was not checked" in rev.note
    assert hub.resolve_revision("org/model", "v2").commit == SHA_B  # a tag or branch: its own ref
    pinned = hub.resolve_revision("org/model", SHA_B)
    assert (pinned.commit, pinned.how, pinned.note) == (SHA_B, "pinned", "")
    assert network_attempts == []


def test_offline_without_a_snapshot_uses_the_recorded_commit_else_the_name(hub_cache, tmp_path):
    from prism_plugin.data.datacache import using_cache_dir

    weights = tmp_path / "w.bin"
    weights.write_bytes(b"weights")
    add_snapshot(hub_cache, "org/model", SHA_A, {"pytorch_model.bin": weights})
    with using_cache_dir(tmp_path / "prism-cache"):
        assert hub.resolve_revision("org/model").how == "local cache"  # records SHA_A under the embedding cache
        records = list((tmp_path / "prism-cache" / hub.RECORD_DIR).glob("*.json"))
        assert len(records) == 1 and json.loads(records[0].read_text())["commit"] == SHA_A
        import shutil

        shutil.rmtree(hub_cache / "models--org--model")  # the hub cache was cleaned; the embeddings were not
        hub.reset_state()
        rev = hub.resolve_revision("org/model")
        assert (rev.commit, rev.how, rev.level) == (SHA_A, "recorded", "warning")
        assert "upstream revision not checked" in rev.note
    hub.reset_state()
    with using_cache_dir(tmp_path / "other-cache"):  # nothing recorded there: the revision name alone
        rev = hub.resolve_revision("org/model")
        assert (rev.commit, rev.how, rev.tag, rev.level) == (None, "unresolved", "main", "warning")
        assert "upstream revision not checked" in rev.note


def test_online_resolution_is_one_metadata_call_and_a_missing_revision_one_line(monkeypatch, hub_cache):
    import huggingface_hub
    from huggingface_hub.errors import RevisionNotFoundError

    calls = []

    def model_info(self, repo_id, *, revision=None, **kwargs):
        calls.append((repo_id, revision))
        if revision == "nope":
            raise RevisionNotFoundError("Invalid rev id: nope",
                                        response=SimpleNamespace(status_code=404, headers={}, request=None))
        return huggingface_hub.hf_api.ModelInfo(id=repo_id, sha=SHA_B)

    monkeypatch.setattr(hub, "prepare_hub", lambda offline=None: False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    rev = hub.resolve_revision("org/model")
    assert (rev.commit, rev.how, rev.note) == (SHA_B, "hub", "")
    assert hub.resolve_revision("org/model").commit == SHA_B and calls == [("org/model", "main")]  # memoised
    with pytest.raises(hub.HubWeightsError) as err:
        hub.resolve_revision("org/model", "nope", model="UNI")
    assert "revision 'nope'" in str(err.value) and "\n" not in str(err.value)


# -- a foundation adapter: the fingerprint names the commit, the build loads that commit -------------------------
def _reduced_uni(**kwargs):
    adapter = adapter_class("uni")(**kwargs)
    adapter.arch_overrides = {"depth": 1}
    return adapter


def _uni_weights(path: Path, seed: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import save_file

    source = _reduced_uni(pretrained=False, seed=seed)
    source.build(torch.device("cpu"))
    state = {k: v.contiguous() for k, v in source._model.state_dict().items()}
    save_file(state, str(path))
    return state


def test_foundation_adapter_keys_and_loads_the_commit(hub_cache, tmp_path):
    from prism_plugin.embed.adapter import weights_revision

    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    state_a, state_b = _uni_weights(first, 1), _uni_weights(second, 2)
    add_snapshot(hub_cache, "MahmoodLab/UNI", SHA_A, {"model.safetensors": first})
    old = _reduced_uni()
    assert old.weights_fingerprint() == f"hub:MahmoodLab/UNI@{SHA_A}"
    assert old.weights_path() == hub_cache / "models--MahmoodLab--UNI" / "snapshots" / SHA_A / "model.safetensors"
    ident = old.weights_identity()
    assert (ident["weights"], ident["weights_revision"]) == ("hub:MahmoodLab/UNI", SHA_A)
    assert ident["revision"]["resolved_by"] == "local cache"

    add_snapshot(hub_cache, "MahmoodLab/UNI", SHA_B, {"model.safetensors": second})  # upstream moved main
    hub.reset_state()
    new = _reduced_uni()
    assert new.weights_fingerprint() == f"hub:MahmoodLab/UNI@{SHA_B}"
    assert new.fingerprint() != old.fingerprint()  # a new commit never reuses the old one's embeddings
    new.build(torch.device("cpu"))
    torch.testing.assert_close(new._model.state_dict()["blocks.0.attn.qkv.weight"],
                               state_b["blocks.0.attn.qkv.weight"])
    pinned = _reduced_uni(revision=SHA_A)  # revision=<commit> pins the old weights, with no lookup at all
    assert pinned.fingerprint() == old.fingerprint() and weights_revision(pinned).how == "pinned"
    pinned.build(torch.device("cpu"))
    torch.testing.assert_close(pinned._model.state_dict()["blocks.0.attn.qkv.weight"],
                               state_a["blocks.0.attn.qkv.weight"])


def test_unresolved_offline_keeps_the_revision_name_key(hub_cache):
    """No snapshot and no record: the fingerprint is the one written before commits were recorded (hub id @ name),
    so those embeddings stay usable offline, said as not checked; the build fails with the one weights error."""
    adapter = adapter_class("uni")()
    assert adapter.weights_fingerprint() == "hub:MahmoodLab/UNI@main"
    with pytest.raises(PrismError) as err:
        adapter.build(torch.device("cpu"))
    assert "MahmoodLab/UNI" in str(err.value) and "checkpoint=PATH" in str(err.value)


# -- end to end: prism-run with an hf: model from the hub cache ------------------------------------------------
def _tiny_dinov2(folder: Path, seed: int) -> dict[str, Path]:
    transformers = needs("transformers")
    config = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, patch_size=8,
                                       image_size=32, mlp_ratio=2)
    torch.manual_seed(seed)
    transformers.Dinov2Model(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "do_center_crop": True, "crop_size": {"height": 32, "width": 32}, "size": {"shortest_edge": 32},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.25, 0.25, 0.25], "resample": 2}))
    return {p.name: p for p in folder.iterdir() if p.is_file()}


def test_prism_run_records_the_commit_and_never_mixes_revisions(tiny_task, tmp_path):
    needs("transformers")
    cache, embeddings = tmp_path / "hf-hub", tmp_path / "prism-cache"
    repo = "testorg/tiny-dinov2"
    add_snapshot(cache, repo, SHA_A, _tiny_dinov2(tmp_path / "a", seed=0))
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PRISM_CACHE_DIR": str(embeddings)}

    def run(out: str, *extra: str):
        proc = prism_run("--task", str(tiny_task), "--model", f"hf:{repo}", "--no-report", "--quiet",
                         "--num-workers", "0", "--output", str(tmp_path / out), *extra, env=env, check=True)
        summary = json.loads((tmp_path / out / "summary.json").read_text())
        runs = pd.read_csv(tmp_path / out / "runs.csv", dtype=str, keep_default_na=False)
        return proc, summary, runs

    _, first, runs_a = run("a")
    ident = first["embedding_identity"]
    assert (ident["weights"], ident["weights_revision"], ident["precision"]) == (f"hub:{repo}", SHA_A, "fp32")
    assert ident["revision"]["resolved_by"] == "local cache"
    assert set(runs_a["weights_revision"]) == {SHA_A} and set(runs_a["weights"]) == {f"hub:{repo}"}
    assert set(runs_a["precision"]) == {"fp32"}
    assert set(first["embedding_cache"].values()) == {"extracted"}
    # offline on a local snapshot: said (info), not a qualification of the numbers
    notes = [f for f in first["flags"] if f["flag"] == "weights_revision_not_checked"]
    assert notes and notes[0]["level"] == "info" and notes[0]["source"] == "embeddings"

    add_snapshot(cache, repo, SHA_B, _tiny_dinov2(tmp_path / "b", seed=1))  # upstream update: main -> SHA_B
    _, second, runs_b = run("b")
    assert second["embedding_identity"]["weights_revision"] == SHA_B
    assert set(runs_b["weights_revision"]) == {SHA_B}
    assert set(second["embedding_cache"].values()) == {"extracted"}  # re-extracted, not reused
    assert second["fingerprints"]["adapter"] != first["fingerprints"]["adapter"]
    assert not runs_b["nll"].equals(runs_a["nll"])  # other weights, other numbers

    _, pinned, runs_p = run("pinned", "--model-args", f"revision={SHA_A}")
    assert pinned["embedding_identity"]["weights_revision"] == SHA_A
    assert pinned["embedding_identity"]["revision"]["resolved_by"] == "pinned"
    assert set(pinned["embedding_cache"].values()) == {"hit"}  # the old commit's embeddings, from the cache
    assert pinned["fingerprints"]["adapter"] == first["fingerprints"]["adapter"]
    assert runs_p["model"].str.contains("revision").all()  # the label says which model-args it ran with
    for column in runs_a.columns.drop("model"):  # the same numbers as the first run, to the byte
        assert runs_p[column].equals(runs_a[column]), column
    manifests = [json.loads(p.read_text()) for p in embeddings.glob("embeddings/*/*/manifest.json")]
    assert {m["provenance"]["identity"]["weights_revision"] for m in manifests} == {SHA_A, SHA_B}


# -- the generic families: timm and open_clip download the commit the identity records -------------------------
TIMM_TAG, TIMM_REPO = "test_vit.r160_in1k", "timm/test_vit.r160_in1k"  # timm's own 0.3 M-parameter test ViT
QKV = "blocks.0.attn.qkv.weight"


def _timm_weights(path: Path, seed: int) -> dict[str, torch.Tensor]:
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    state = {k: v.contiguous() for k, v in timm.create_model(TIMM_TAG, pretrained=False).state_dict().items()}
    save_file(state, str(path))
    return state


def _embed(adapter, seed: int = 0) -> torch.Tensor:
    size = adapter.preprocessing.crop
    batch = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return adapter.forward(batch)


def test_timm_tag_loads_the_commit_it_records_not_the_hubs_main(hub_cache, tmp_path):
    from prism_plugin.model_adapters.timm_generic import TimmAdapter

    state_a, state_b = _timm_weights(tmp_path / "a.safetensors", 1), _timm_weights(tmp_path / "b.safetensors", 2)
    add_snapshot(hub_cache, TIMM_REPO, SHA_A, {"model.safetensors": tmp_path / "a.safetensors"})
    old = TimmAdapter(TIMM_TAG)
    assert old.weights_fingerprint() == f"timm-pretrained:{TIMM_TAG}:hub:{TIMM_REPO}@{SHA_A}"
    # upstream moves main after the identity was resolved (a long job, a shared cache): the build still loads
    # the recorded commit; timm left to itself would load refs/main, the other weights
    add_snapshot(hub_cache, TIMM_REPO, SHA_B, {"model.safetensors": tmp_path / "b.safetensors"})
    old.build(torch.device("cpu"))
    assert old.weights_identity()["weights_revision"] == SHA_A
    assert old._model.pretrained_cfg["hf_hub_id"] == f"{TIMM_REPO}@{SHA_A}"
    torch.testing.assert_close(old._model.state_dict()[QKV], state_a[QKV])

    hub.reset_state()
    new = TimmAdapter(TIMM_TAG)  # a new process: main is SHA_B now
    new.build(torch.device("cpu"))
    assert new.weights_identity()["weights_revision"] == SHA_B
    torch.testing.assert_close(new._model.state_dict()[QKV], state_b[QKV])
    assert new.fingerprint() != old.fingerprint()

    pinned = TimmAdapter(TIMM_TAG, revision=SHA_A)  # revision= pins the other snapshot
    pinned.build(torch.device("cpu"))
    ident = pinned.weights_identity()
    assert (ident["weights_revision"], ident["revision"]["resolved_by"]) == (SHA_A, "pinned")
    torch.testing.assert_close(pinned._model.state_dict()[QKV], state_a[QKV])
    assert pinned.fingerprint() == old.fingerprint()  # revision=<the commit main was>: the same cache entry
    torch.testing.assert_close(_embed(pinned), _embed(old))
    assert not torch.allclose(_embed(pinned), _embed(new))  # the embeddings follow the commit loaded

    set_ref(hub_cache, TIMM_REPO, SHA_A, "v1")  # a tag name resolves through its own ref
    tagged = TimmAdapter(TIMM_TAG, revision="v1")
    tagged.build(torch.device("cpu"))
    assert tagged.weights_identity()["weights_revision"] == SHA_A
    torch.testing.assert_close(tagged._model.state_dict()[QKV], state_a[QKV])


def _timm_hub_repo(folder: Path, seed: int) -> dict[str, Path]:
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(seed)
    save_for_hf(timm.create_model(TIMM_TAG, pretrained=False), str(folder), safe_serialization=True)
    return {p.name: p for p in folder.iterdir() if p.is_file()}


def test_timm_hub_architecture_loads_config_and_weights_of_one_commit(hub_cache, tmp_path):
    from safetensors.torch import load_file

    from prism_plugin.model_adapters.timm_generic import TimmAdapter

    repo = "testorg/tiny-timm"
    files_a, files_b = _timm_hub_repo(tmp_path / "a", 1), _timm_hub_repo(tmp_path / "b", 2)
    add_snapshot(hub_cache, repo, SHA_A, files_a)
    add_snapshot(hub_cache, repo, SHA_B, files_b)  # main -> SHA_B
    main = TimmAdapter(f"hf-hub:{repo}")
    pinned = TimmAdapter(f"hf-hub:{repo}", revision=SHA_A)
    for adapter, files, sha in ((main, files_b, SHA_B), (pinned, files_a, SHA_A)):
        adapter.build(torch.device("cpu"))
        assert adapter.weights_identity()["weights_revision"] == sha
        assert adapter._model.pretrained_cfg["hf_hub_id"] == f"{repo}@{sha}"
        torch.testing.assert_close(adapter._model.state_dict()[QKV], load_file(str(files["model.safetensors"]))[QKV])
    assert not torch.allclose(_embed(main), _embed(pinned))
    with pytest.raises(PrismError) as err:  # two revisions named: one line
        TimmAdapter(f"hf-hub:{repo}@{SHA_A}", revision=SHA_B)
    assert "already names revision" in str(err.value) and "\n" not in str(err.value)


def test_revision_without_hub_weights_is_one_line(hub_cache, tmp_path):
    from prism_plugin.model_adapters.timm_generic import TimmAdapter

    ckpt = tmp_path / "w.pt"
    torch.save({}, ckpt)
    for kwargs in ({"pretrained": "false"}, {"checkpoint": str(ckpt)}):
        with pytest.raises(PrismError) as err:
            TimmAdapter(TIMM_TAG, revision=SHA_A, **kwargs)
        assert "revision=" in str(err.value) and "\n" not in str(err.value)


TINY_CLIP = {"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16,
                                             "head_width": 16},
             "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1}}


def _open_clip_repo(folder: Path, seed: int, config: bool = True) -> dict[str, Path]:
    open_clip = needs("open_clip")
    from safetensors.torch import save_file

    folder.mkdir()
    torch.manual_seed(seed)
    state = {k: v.contiguous() for k, v in open_clip.CLIP(**TINY_CLIP).state_dict().items()}
    save_file(state, str(folder / "open_clip_model.safetensors"))
    if config:
        (folder / "open_clip_config.json").write_text(json.dumps({
            "model_cfg": TINY_CLIP, "preprocess_cfg": {"mean": [0.5] * 3, "std": [0.25] * 3}}))
    return {p.name: p for p in folder.iterdir()}


def test_open_clip_hub_repo_and_tag_load_the_commit_they_record(hub_cache, tmp_path, monkeypatch):
    open_clip = needs("open_clip")
    from safetensors.torch import load_file

    from prism_plugin.model_adapters.openclip_generic import OpenCLIPAdapter

    conv = "visual.conv1.weight"
    repo = "testorg/tiny-clip"
    files_a, files_b = _open_clip_repo(tmp_path / "a", 1), _open_clip_repo(tmp_path / "b", 2)
    add_snapshot(hub_cache, repo, SHA_A, files_a)
    first = OpenCLIPAdapter(f"hf-hub:{repo}")
    assert first.weights_fingerprint().endswith(f"hub:{repo}@{SHA_A}")
    add_snapshot(hub_cache, repo, SHA_B, files_b)  # upstream moved main after the identity was resolved
    first.build(torch.device("cpu"))
    torch.testing.assert_close(first._model.state_dict()[conv], load_file(str(files_a["open_clip_model.safetensors"]))[conv])
    hub.reset_state()
    main, pinned = OpenCLIPAdapter(f"hf-hub:{repo}"), OpenCLIPAdapter(f"hf-hub:{repo}", revision=SHA_A)
    for adapter, files, sha in ((main, files_b, SHA_B), (pinned, files_a, SHA_A)):
        adapter.build(torch.device("cpu"))
        assert adapter.weights_identity()["weights_revision"] == sha
        torch.testing.assert_close(adapter._model.state_dict()[conv],
                                   load_file(str(files["open_clip_model.safetensors"]))[conv])
    assert not torch.allclose(_embed(main), _embed(pinned))

    # a built-in architecture with a pretrained tag whose weights live on the hub (registered for the test the
    # way open_clip's own table holds its tags: 'org/repo/' = the default file names)
    import open_clip.factory as factory
    import open_clip.pretrained as pretrained

    monkeypatch.setitem(factory._MODEL_CONFIGS, "Tiny-CLIP", TINY_CLIP)
    monkeypatch.setitem(pretrained._PRETRAINED, "Tiny-CLIP",
                        {"tiny": {"hf_hub": "testorg/tiny-clip-tag/", "mean": (0.5,) * 3, "std": (0.25,) * 3}})
    tag_a, tag_b = _open_clip_repo(tmp_path / "ta", 3, False), _open_clip_repo(tmp_path / "tb", 4, False)
    add_snapshot(hub_cache, "testorg/tiny-clip-tag", SHA_A, tag_a)
    add_snapshot(hub_cache, "testorg/tiny-clip-tag", SHA_B, tag_b)
    assert open_clip.get_pretrained_cfg("Tiny-CLIP", "tiny")
    tagged = OpenCLIPAdapter("Tiny-CLIP/tiny", revision=SHA_A)
    assert tagged.hub_id == "testorg/tiny-clip-tag"
    tagged.build(torch.device("cpu"))
    assert tagged.weights_identity()["weights_revision"] == SHA_A
    torch.testing.assert_close(tagged._model.state_dict()[conv], load_file(str(tag_a["open_clip_model.safetensors"]))[conv])
    latest = OpenCLIPAdapter("Tiny-CLIP/tiny")
    latest.build(torch.device("cpu"))
    assert latest.weights_identity()["weights_revision"] == SHA_B
    torch.testing.assert_close(latest._model.state_dict()[conv], load_file(str(tag_b["open_clip_model.safetensors"]))[conv])
    with pytest.raises(PrismError) as err:  # random init: no hub weights to pin
        OpenCLIPAdapter("Tiny-CLIP", revision=SHA_A)
    assert "revision=" in str(err.value) and "\n" not in str(err.value)


def test_prism_run_timm_revision_recorded_and_diffed(tiny_task, tmp_path):
    """Real runs: timm:<tag> at main (SHA_B) and pinned to SHA_A record those commits, load those weights (other
    numbers), and `prism-run diff` says the hub commit differs, with both commits."""
    cache, embeddings = tmp_path / "hf-hub", tmp_path / "prism-cache"
    _timm_weights(tmp_path / "a.safetensors", 1), _timm_weights(tmp_path / "b.safetensors", 2)
    add_snapshot(cache, TIMM_REPO, SHA_A, {"model.safetensors": tmp_path / "a.safetensors"})
    add_snapshot(cache, TIMM_REPO, SHA_B, {"model.safetensors": tmp_path / "b.safetensors"})
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PRISM_CACHE_DIR": str(embeddings)}

    def run(out: str, *extra: str) -> dict:
        prism_run("--task", str(tiny_task), "--model", f"timm:{TIMM_TAG}", "--no-report", "--quiet",
                  "--num-workers", "0", "--output", str(tmp_path / out), *extra, env=env, check=True)
        return json.loads((tmp_path / out / "summary.json").read_text())

    main, pinned = run("main"), run("pinned", "--model-args", f"revision={SHA_A}")
    assert main["embedding_identity"]["weights_revision"] == SHA_B
    assert pinned["embedding_identity"]["weights_revision"] == SHA_A
    assert pinned["embedding_identity"]["revision"]["resolved_by"] == "pinned"
    runs_main, runs_pinned = (pd.read_csv(tmp_path / d / "runs.csv") for d in ("main", "pinned"))
    assert set(runs_main["weights_revision"]) == {SHA_B} and set(runs_pinned["weights_revision"]) == {SHA_A}
    assert not runs_main["nll"].equals(runs_pinned["nll"])
    proc = prism_run("diff", str(tmp_path / "main"), str(tmp_path / "pinned"), env=env)
    assert proc.returncode == 0, proc.stderr
    said = [x for x in proc.stdout.splitlines() if "weights_revision" in x and x.startswith("> - ")]
    assert len(said) == 1 and f"A {SHA_B}; B {SHA_A}" in said[0], proc.stdout
    assert "differ in weights_revision" in proc.stderr
    failed = prism_run("diff", str(tmp_path / "main"), str(tmp_path / "pinned"), "--require-same",
                       "weights_revision", env=env)
    assert failed.returncode == 1 and "**Result: FAIL**" in failed.stdout
