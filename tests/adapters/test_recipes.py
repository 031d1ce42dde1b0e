"""Every built-in adapter's preprocessing profiles equal the published recipes written down, with their
sources, in docs/recipes.md; the precision each profile runs in is the published one."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism_plugin.embed.adapter import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, dtype_name
from prism_plugin.model_adapters import builtin_classes

PAGE = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"


def published() -> dict[tuple[str, str], dict[str, str]]:
    rows: dict[tuple[str, str], dict[str, str]] = {}
    head = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            head = None if not line.strip() else head
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["adapter", "profile"]:
            head = cells
            continue
        if head is None or set(cells[0]) <= {"-"}:
            continue
        row = dict(zip(head, cells))
        key = (row["adapter"].strip("`"), row["profile"].strip("`"))
        assert key not in rows, f"docs/recipes.md lists {key} twice"
        assert row["source"], f"docs/recipes.md: {key} has no source"
        rows[key] = row
    return rows


def statistics(pre) -> str:
    if tuple(pre.mean) == IMAGENET_MEAN and tuple(pre.std) == IMAGENET_STD:
        return "ImageNet"
    if tuple(pre.mean) == CLIP_MEAN and tuple(pre.std) == CLIP_STD:
        return "CLIP"
    return "/".join(f"{m:g}" for m in pre.mean) + " ± " + "/".join(f"{s:g}" for s in pre.std)


PROFILED = {n: c for n, c in builtin_classes().items() if getattr(c, "profiles", None)}
CASES = [(n, p) for n, c in PROFILED.items() for p in c.profiles]


def test_the_page_lists_every_profile_and_nothing_else():
    assert set(published()) == set(CASES)


@pytest.mark.parametrize("name,profile", CASES)
def test_profile_is_its_published_recipe(name, profile):
    row = published()[(name, profile)]
    cls = PROFILED[name]
    adapter = cls(profile=profile, pretrained=False)
    pre = adapter.preprocessing
    assert (str(pre.resize), str(pre.crop), pre.interpolation, statistics(pre)) == \
        (row["resize"], row["crop"], row["filter"], row["statistics"]), (name, profile)
    precision = row["precision"].split()[0]
    assert dtype_name(adapter.autocast_dtype) == precision, (name, profile)
    # a published precision is not the adapter's choice; "(ours)" marks a profile whose source states none
    assert ("(ours)" in row["precision"]) == (profile in ("model_card", "audit")), (name, profile)
    # the recipe (transform and precision) is part of the embedding's identity
    assert adapter.config()["preprocessing"] == pre.describe() and adapter.config()["dtype"] == precision


def test_prism_profiles_run_in_the_published_precision_and_dtype_overrides():
    uni = PROFILED["uni"]
    assert dtype_name(uni(pretrained=False).autocast_dtype) == "fp32"  # prism_main, the default
    assert dtype_name(uni(profile="prism_camelyon17", pretrained=False).autocast_dtype) == "fp16"
    assert dtype_name(uni(profile="prism_camelyon17", dtype="bf16", pretrained=False).autocast_dtype) == "bf16"
    keys = {uni(profile=p, pretrained=False).fingerprint() for p in ("prism_main", "prism_camelyon17", "model_card")}
    assert len(keys) == 3
