"""Hub access: offline or unauthorised requests for pretrained weights fail at once, with the remedies.

The hub client retries a failed download five times (~25 s); the adapters put
it in offline mode first (``HF_HUB_OFFLINE=1`` / ``--offline`` / no network)
so the answer comes from the local cache immediately.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from prism_plugin.embed import hub
from prism_plugin.errors import PrismError

from .adapters_support import EIGHT, adapter_class, needs_backend


@pytest.fixture
def clean_hub(monkeypatch, tmp_path):
    """An empty hub cache and a restorable offline switch."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    hub.reset_state()
    yield constants
    hub.reset_state()


def assert_remedies(message: str, hub_id: str) -> None:
    assert hub_id in message
    assert "checkpoint=PATH" in message and "log in" in message
    assert "\n" not in message


@pytest.mark.parametrize("name", list(EIGHT))
def test_offline_request_fails_fast_with_hub_id(name, clean_hub, monkeypatch, network_attempts):
    needs_backend(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    adapter = adapter_class(name)()  # pretrained weights from the hub
    with pytest.raises(hub.HubWeightsError) as err:
        adapter.build(torch.device("cpu"))
    assert network_attempts == []  # offline: no lookup, no connect
    assert adapter._model is None  # failed before building the network
    message = str(err.value)
    assert_remedies(message, adapter.hub_id)
    assert "local hub cache" in message and "HF_HUB_OFFLINE" in message
    if adapter.gated:
        assert "accept the model's terms" in message


def test_no_network_switches_the_hub_client_offline(clean_hub, monkeypatch, network_attempts):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(clean_hub, "HF_HUB_OFFLINE", False)
    # nothing listens on port 9 of localhost: the probe is refused at once
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    adapter = adapter_class("uni")()
    with pytest.raises(hub.HubWeightsError) as err:
        adapter.build(torch.device("cpu"))
    connects = [a for kind, a in network_attempts if kind == "connect"]
    assert len(connects) == 1 and connects[0][1] == 9, network_attempts  # one refused probe, no retries
    assert clean_hub.HF_HUB_OFFLINE is True  # the already-imported client was switched too
    assert "no network: 127.0.0.1:9 unreachable" in str(err.value)
    assert_remedies(str(err.value), "MahmoodLab/UNI")


def test_unauthorised_gated_model_names_both_remedies(clean_hub, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    calls = []

    def refuse(repo_id, filename, **kwargs):
        calls.append(filename)
        raise GatedRepoError(f"Access to model {repo_id} is restricted",
                             response=SimpleNamespace(status_code=401, headers={}, request=None))

    monkeypatch.setattr(hub, "prepare_hub", lambda offline=None: False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    adapter = adapter_class("virchow2")()
    with pytest.raises(hub.HubWeightsError) as err:
        adapter.build(torch.device("cpu"))
    assert len(calls) == 1  # no retry, no second file name after a refusal
    assert "refused by the hub" in str(err.value)
    assert "https://huggingface.co/paige-ai/Virchow2" in str(err.value)
    assert_remedies(str(err.value), "paige-ai/Virchow2")


def test_weights_come_from_the_hub_cache_when_offline(clean_hub, monkeypatch, tmp_path):
    """A cached snapshot is used offline: the same path as a download, no network."""
    import huggingface_hub

    adapter = adapter_class("uni")(pretrained=False)
    adapter.arch_overrides = {"depth": 1}
    adapter.build(torch.device("cpu"))
    weights = tmp_path / "snapshot" / "pytorch_model.bin"
    weights.parent.mkdir()
    torch.save(adapter._model.state_dict(), weights)
    seen = {}

    def from_cache(repo_id, filename, revision=None, **kwargs):
        seen.update(repo=repo_id, offline=hub.offline_requested())
        if filename != "pytorch_model.bin":
            raise FileNotFoundError(filename)
        return str(weights)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", from_cache)
    loaded = adapter_class("uni")()
    loaded.arch_overrides = {"depth": 1}
    loaded.build(torch.device("cpu"))
    assert seen == {"repo": "MahmoodLab/UNI", "offline": True}
    x = torch.randn(2, 3, 224, 224)
    with torch.inference_mode():
        torch.testing.assert_close(loaded.forward(x), adapter.forward(x))


def test_timm_generic_hub_model_fails_fast_offline(clean_hub, monkeypatch, network_attempts):
    from prism_plugin.model_adapters.timm_generic import TimmAdapter

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PrismError) as err:  # the hub config is needed to build the architecture
        TimmAdapter("hf-hub:timm/vit_small_patch16_224.augreg_in21k", pretrained=True).build(torch.device("cpu"))
    assert network_attempts == []  # offline: no lookup, no connect
    assert_remedies(str(err.value), "timm/vit_small_patch16_224.augreg_in21k")


def test_cli_offline_flag_gives_one_line(clean_hub, monkeypatch, tiny_task, tmp_path, capsys):
    from prism_plugin.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # --offline alone must switch it on
    rc = main(["--task", str(tiny_task), "--model", "gigapath", "--offline", "--quiet", "--no-report",
               "--num-workers", "0", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [line for line in err.splitlines() if line.startswith("prism-run: error")]
    assert len(lines) == 1 and "prov-gigapath/prov-gigapath" in lines[0] and "checkpoint=PATH" in lines[0]
