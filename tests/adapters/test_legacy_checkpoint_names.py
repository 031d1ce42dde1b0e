"""Midnight's hub checkpoint has transformers-4 Dinov2 weight names; transformers 5 renamed them.

The adapter's own renaming (``kaiko.legacy_dinov2_state``) is checked against transformers' own
loader: the same legacy-named file loaded by ``Dinov2Model.from_pretrained`` (which converts the
names itself) and by our strict loader must give the same network.
"""

from __future__ import annotations

import pytest

from tests.conftest import needs

torch = pytest.importorskip("torch")
transformers = needs("transformers")


def _legacy_names(state):
    """A transformers-5 Dinov2 state dict written with the transformers-4 names (fused SwiGLU input)."""
    out = {}
    for key, value in state.items():
        if ".mlp.up_proj." in key:
            continue
        if ".mlp.gate_proj." in key:
            stem, kind = key.split(".mlp.gate_proj.")
            out[f"{stem}.mlp.weights_in.{kind}"] = torch.cat([value, state[f"{stem}.mlp.up_proj.{kind}"]], 0)
            continue
        for new, old in (("attention.q_proj.", "attention.attention.query."),
                         ("attention.k_proj.", "attention.attention.key."),
                         ("attention.v_proj.", "attention.attention.value."),
                         ("attention.o_proj.", "attention.output.dense."), ("mlp.down_proj.", "mlp.weights_out.")):
            key = key.replace(new, old)
        out[key] = value
    return out


def test_midnight_reads_transformers4_names_like_transformers_does(tmp_path):
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 reads these names natively")
    from safetensors.torch import save_file

    from prism_plugin.model_adapters.kaiko import legacy_dinov2_state

    cfg = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=4,
                                    use_swiglu_ffn=True, patch_size=14, image_size=28, layerscale_value=1e-5)
    torch.manual_seed(0)
    source = transformers.Dinov2Model(cfg).eval()
    legacy = _legacy_names(source.state_dict())
    assert "encoder.layer.0.mlp.weights_in.weight" in legacy
    folder = tmp_path / "ckpt"
    folder.mkdir()
    cfg.save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in legacy.items()}, str(folder / "model.safetensors"))
    theirs = transformers.Dinov2Model.from_pretrained(folder).eval()  # transformers' own name conversion
    torch.manual_seed(1)
    ours = transformers.Dinov2Model(cfg).eval()
    ours.load_state_dict(legacy_dinov2_state(legacy, ours.state_dict()), strict=True)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        assert torch.equal(theirs(pixel_values=x).last_hidden_state, ours(pixel_values=x).last_hidden_state)
