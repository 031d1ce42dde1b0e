"""``prism-run ls adapters`` lists the eight PRISM models with dims, licences and hub ids, and the generic families."""

from __future__ import annotations

from prism_plugin.cli import main

from .adapters_support import EIGHT, adapter_class


def test_ls_adapters_shows_the_eight_and_the_generic_families(capsys):
    assert main(["ls", "adapters"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:] if line.strip()}
    for name in EIGHT:
        cls = adapter_class(name)
        line = rows[name]
        assert f"{cls.paper_dim}-d" in line and cls.licence in line and cls.hub_id in line, line
        assert ("(gated)" in line) == cls.gated
    for family in ("timm:<name>", "open_clip:<name>", "hf:<name>", "precomputed", "demo_vit"):
        assert family in rows, family
    assert "licence per model" in rows["open_clip:<name>"] and "licence per model" in rows["hf:<name>"]
