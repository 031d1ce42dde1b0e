"""The ``perturb`` task key: seeded image transforms (HED/HSV jitter, blur, JPEG, scale) applied as any
source's images are read, part of the images fingerprint, validated with file:line: key messages."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from prism_plugin.data import perturb as pt
from prism_plugin.data.hema_demo import render_cell
from prism_plugin.errors import PrismError

CLASSES = "[neutrophil, lymphocyte, monocyte, eosinophil, basophil]"


def _cell(i=0):
    return render_cell("eosinophil", "a", np.random.default_rng(i), size=32)


def _spec(*transforms, seed=0):
    return pt.check_perturb({"seed": seed, "transforms": list(transforms)}, lambda key, msg: PrismError(f"{key}: {msg}"))


@pytest.mark.parametrize("transform", [
    {"kind": "hed_jitter", "alpha": 0.3, "beta": 0.05},
    {"kind": "hsv_jitter", "hue": 0.1},
    {"kind": "blur", "sigma": [1.0, 2.0]},
    {"kind": "jpeg", "quality": 10},
    {"kind": "scale", "factor": 0.4},
    {"kind": "scale", "factor": 1.6, "mode": "zoom"},
    {"kind": "scale", "factor": 0.6, "mode": "zoom"},
])
def test_each_transform_changes_the_image_deterministically(transform):
    img = _cell()
    spec = _spec(transform)
    out = pt.apply_perturb(img, spec, "x/1.png")
    assert out.shape == img.shape and out.dtype == np.uint8
    assert np.abs(out.astype(int) - img).mean() > 0.5
    assert np.array_equal(out, pt.apply_perturb(img, spec, "x/1.png"))
    if transform["kind"] in ("hed_jitter", "hsv_jitter", "blur"):  # random per image: another key, another draw
        assert not np.array_equal(out, pt.apply_perturb(img, spec, "x/2.png"))
        assert not np.array_equal(out, pt.apply_perturb(img, _spec(transform, seed=1), "x/1.png"))


def test_hed_round_trip_and_hsv_round_trip_are_near_identity():
    img = _cell(1)
    same = pt.apply_perturb(img, _spec({"kind": "hed_jitter", "alpha": 0, "beta": 0}), "k")
    assert np.abs(same.astype(int) - img).max() <= 2
    hsv = pt.rgb_to_hsv(img / 255.0)
    assert np.abs(pt.hsv_to_rgb(hsv) * 255 - img).max() < 1e-6 * 255 + 1e-6
    np.testing.assert_allclose(pt.RGB_FROM_HED @ pt.HED_FROM_RGB, np.eye(3), atol=1e-12)
    # more haematoxylin (the first stain) darkens red most: its OD vector (0.65, 0.70, 0.29) absorbs red/green
    grey = np.full((4, 4, 3), 200, np.uint8)
    stains = (np.log(grey[0, 0] / 255.0) / np.log(1e-6)) @ pt.HED_FROM_RGB
    more_h = np.exp(((stains + [0.05, 0, 0]) * np.log(1e-6)) @ pt.RGB_FROM_HED) * 255
    assert more_h[2] - more_h[0] > 10


def _write_folder_task(tmp_path, perturb=""):
    root = tmp_path / "imgs"
    for split in ("train", "test"):
        for ci, cls in enumerate(("neutrophil", "basophil")):
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(2):
                Image.fromarray(render_cell(cls, "b", np.random.default_rng([ci, i]), 24)).save(
                    root / split / cls / f"{i}.png")
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    name = "pt_" + str(abs(hash(perturb)) % 10**6)
    (tasks / f"{name}.yaml").write_text(
        f"task: {name}\ndataset: D\nclass_names: [neutrophil, basophil]\n"
        f"source: {{type: imagefolder, root: {root}}}\nsplits: {{train: train, test: test}}\n{perturb}")
    return tasks, name


def test_perturb_reaches_every_image_and_the_fingerprint(tmp_path):
    from prism_plugin.data.catalogue import open_source
    from prism_plugin.tasks.index import TaskIndex

    tasks, clean_name = _write_folder_task(tmp_path)
    _, p_name = _write_folder_task(tmp_path, "perturb: {seed: 3, transforms: [{kind: hsv_jitter, hue: 0.2}]}\n")
    _, p2_name = _write_folder_task(tmp_path, "perturb: {seed: 4, transforms: [{kind: hsv_jitter, hue: 0.2}]}\n")
    index = TaskIndex([tasks])
    clean, pert, pert2 = (index.load_task(n) for n in (clean_name, p_name, p2_name))
    assert pert.extras["perturb"] == {"seed": 3, "transforms": [{"kind": "hsv_jitter", "hue": 0.2, "saturation": 0.1,
                                                                 "value": 0.1}]}
    a, b, c = (open_source(t).split("test") for t in (clean, pert, pert2))
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert open_source(pert).split("test").fingerprint == b.fingerprint  # stable
    assert np.array_equal(a.labels, b.labels)
    item = b.paths[0]
    assert isinstance(item, pt.PerturbedImageRef) and str(item) == "test/basophil/0.png"
    with Image.open(item) as im:
        got = np.asarray(im.convert("RGB"))
    with Image.open(a.paths[0]) as im:
        base = np.asarray(im.convert("RGB"))
    assert np.array_equal(got, pt.apply_perturb(base, pert.extras["perturb"], "test/basophil/0.png"))
    assert not np.array_equal(got, base)
    import pickle  # items travel to extraction workers
    assert np.array_equal(pickle.loads(pickle.dumps(item)).pixels(), got)


def test_perturb_of_array_rows(tmp_path):
    """An ImageRef source (npz rows): the perturbation wraps the row and hashes the row's own digest."""
    from prism_plugin.data.refs import ArrayImageRef

    rows = np.stack([_cell(i) for i in range(2)])
    ref = pt.PerturbedImageRef(ArrayImageRef(rows, 1, "f.npz:x[1]"), "f.npz:x[1]", _spec({"kind": "blur"}))
    with Image.open(ref) as im:
        got = np.asarray(im.convert("RGB"))
    assert np.array_equal(got, pt.apply_perturb(rows[1], _spec({"kind": "blur"}), "f.npz:x[1]"))
    other = pt.PerturbedImageRef(ArrayImageRef(rows, 1, "f.npz:x[1]"), "f.npz:x[1]", _spec({"kind": "blur", "sigma": 2}))
    assert ref.digest_bytes() != other.digest_bytes()


@pytest.mark.parametrize("text, where, message", [
    ("perturb: {transforms: [{kind: hed_jiter}]}", "perturb.transforms[0].kind",
     "'hed_jiter' is not a perturbation kind; did you mean 'hed_jitter'"),
    ("perturb:\n  seed: 1\n  transforms:\n    - kind: blur\n      sigma: -1", "perturb.transforms[0].sigma",
     "must be a number in [0, 50]"),
    ("perturb: {transforms: [{kind: jpeg, quality: 2.5}]}", "perturb.transforms[0].quality", "must be an integer"),
    ("perturb: {transforms: [{kind: blur, sigmas: 1}]}", "perturb.transforms[0].sigmas", "did you mean 'sigma'?"),
    ("perturb: {transforms: [{kind: scale, mode: zooom}]}", "perturb.transforms[0].mode", "did you mean 'zoom'?"),
    ("perturb: {seed: x, transforms: [{kind: blur}]}", "perturb.seed", "must be an integer"),
    ("perturb: {transforms: []}", "perturb.transforms", "non-empty list"),
    ("perturb: {transform: []}", "perturb.transform", "did you mean 'transforms'?"),
])
def test_bad_perturb_is_one_line_with_file_line_and_key(tmp_path, text, where, message):
    from prism_plugin.tasks.index import TaskIndex

    tasks, name = _write_folder_task(tmp_path, text + "\n")
    with pytest.raises(PrismError) as err:
        TaskIndex([tasks]).load_task(name)
    first, *rest = str(err.value).splitlines()
    assert f"{name}.yaml:" in first and f": {where}: " in first and message in first, first
    assert rest == ([] if where != "perturb.transform" else [rest[0]])  # there, "transforms" is missing too


def test_precomputed_and_transfer_tasks_refuse_perturb(tmp_path):
    from prism_plugin.tasks.index import TaskIndex

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "emb.yaml").write_text(
        "task: emb\ndataset: E\nclass_names: [a, b]\nsource: {type: precomputed}\nsplits: {train: train, test: test}\n"
        "perturb: {transforms: [{kind: blur}]}\n")
    with pytest.raises(PrismError, match=r"emb\.yaml:6: perturb: the task reads precomputed embeddings .*nothing|"
                                         r"emb\.yaml:6: perturb: .*no images to perturb"):
        TaskIndex([tasks]).load_task("emb")
    (tasks / "tr.yaml").write_text("task: tr\nkind: transfer\nsource_task: hema_demo_a\ntarget_task: hema_demo_b\n"
                                   "perturb: {transforms: [{kind: blur}]}\n")
    from prism_plugin.tasks.builtin import builtin_task_dir

    with pytest.raises(PrismError, match=r"tr\.yaml:5: perturb: only applies to kind: indomain"):
        TaskIndex([tasks, builtin_task_dir()]).load_task("tr")


def test_a_plugin_perturbation_is_validated_and_applied_like_a_built_in(capsys):
    """A third party's kind (``register_perturbations``) takes part in validation and transforms."""
    import types

    from prism_plugin import cli
    from prism_plugin.hookspecs import hookimpl
    from prism_plugin.plugins import PluginHost

    def invert(img, rng, amount=1.0):
        return (255 - img * amount).clip(0, 255).astype(np.uint8)

    plugin = types.ModuleType("invert_plugin")
    plugin.register_perturbations = hookimpl(lambda register: register(
        "invert", invert, params={"amount": pt.Param(1.0, 0.0, 1.0)}, description="negative image"))
    host = PluginHost(extra_plugins=[plugin])
    assert host.perturbations.names()[:5] == list(pt.BUILTIN_KINDS) and "invert" in host.perturbations
    fail = lambda key, msg: PrismError(f"{key}: {msg}")  # noqa: E731
    spec = pt.check_perturb({"transforms": [{"kind": "invert"}]}, fail, host=host)
    assert spec["transforms"] == [{"kind": "invert", "amount": 1.0}]
    with pytest.raises(PrismError, match=r"transforms\[0\]\.amount: .*\[0, 1\]"):
        pt.check_perturb({"transforms": [{"kind": "invert", "amount": 3}]}, fail, host=host)
    with pytest.raises(PrismError, match="'invert' is not a perturbation kind"):
        pt.check_perturb({"transforms": [{"kind": "invert"}]}, fail)  # not registered on the shared host
    img = _cell()
    out = pt.apply_perturb(img, spec, "k", pt.transforms_of(spec, host))
    assert np.array_equal(out, 255 - img)
    assert cli.main(["ls", "perturbations"], host=host) == 0
    assert "invert" in capsys.readouterr().out
