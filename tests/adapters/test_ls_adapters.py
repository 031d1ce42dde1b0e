"""``prism-run ls adapters``: the eight PRISM models with dims, preprocessing, licences and hub ids, the
generic families ("per model"), and what a plugin declares at registration."""

from __future__ import annotations

from prism_plugin.cli import main
from prism_plugin.embed.adapter import Adapter, Preprocessing
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import PluginHost

from .adapters_support import EIGHT, adapter_class

HEADER = ("adapter", "dim", "input", "resize/crop interp mean-std", "licence", "pretrained on", "aliases", "description",
          "gated", "from")


def _table(out: str) -> tuple[list[str], dict[str, str]]:
    lines = [line for line in out.splitlines() if line.strip()]
    return lines, {line.split()[0]: line for line in lines[1:]}


def _cell(lines: list[str], row: str, column: str) -> str:
    """The text of one column of one row (columns are aligned under the header)."""
    header = lines[0]
    start = header.index(column)
    later = [header.index(c) for c in HEADER if header.index(c) > start]
    end = min(later) if later else None
    return row[start:end].strip()


def test_ls_adapters_shows_the_eight_and_the_generic_families(capsys):
    assert main(["ls", "adapters"]) == 0
    lines, rows = _table(capsys.readouterr().out)
    assert all(c in lines[0] for c in HEADER), lines[0]
    for name in EIGHT:
        cls = adapter_class(name)
        line = rows[name]
        assert f"{cls.paper_dim}-d" in line and cls.licence in line and cls.hub_id in line, line
        assert "(gated)" not in line and _cell(lines, line, "gated") == ("yes" if cls.gated else "no")
        assert _cell(lines, line, "dim") == str(cls.poolings[cls.default_pooling])
        assert _cell(lines, line, "licence") == f"{cls.licence} ({cls.licence_date})"
        prep = cls.profiles["prism_main"]
        assert _cell(lines, line, "resize/crop interp mean-std").startswith(
            f"{prep.resize}/{prep.crop} {prep.interpolation}")
    assert _cell(lines, rows["uni"], "dim") == "1024"
    assert _cell(lines, rows["uni"], "resize/crop interp mean-std") == "224/224 bilinear imagenet"
    assert _cell(lines, rows["conch"], "resize/crop interp mean-std") == "448/448 bicubic clip"
    assert _cell(lines, rows["demo_vit"], "licence").startswith("Apache-2.0")
    assert _cell(lines, rows["demo_vit"], "dim") == "192"
    assert _cell(lines, rows["demo_vit"], "resize/crop interp mean-std").startswith("107/96 bicubic")
    for family in ("timm:<name>", "open_clip:<name>", "hf:<name>", "precomputed", "demo_vit"):
        assert family in rows, family
    for family in ("timm:<name>", "open_clip:<name>", "hf:<name>"):
        assert _cell(lines, rows[family], "dim") == "per model" == _cell(lines, rows[family], "licence")
        assert _cell(lines, rows[family], "gated") == "per model"
    assert "licence per model" in rows["open_clip:<name>"] and "licence per model" in rows["hf:<name>"]
    assert _cell(lines, rows["precomputed"], "dim") == "from files"
    assert _cell(lines, rows["precomputed"], "gated") == "n/a" == _cell(lines, rows["demo_vit"], "gated")
    assert all(line.rstrip().endswith("prism_plugin (built in)") for line in rows.values())


class SmallAdapter(Adapter):
    """A plain adapter declaring its facts as class attributes."""

    name = "small"
    embed_dim = 48
    preprocessing = Preprocessing(72, 64, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bilinear")
    licence = "BSD-3-Clause"


class FactsPlugin:
    __name__ = "facts_plugin"

    @hookimpl
    def register_adapters(self, register):
        register("declared", lambda **kw: SmallAdapter(**kw), description="facts given at registration",
                 aliases=("declared_alias",), dim=384, preprocessing=Preprocessing(256, 224), licence="MIT")
        register("from_class", SmallAdapter, description="facts read from the class")
        # a lazy entry must be listed without importing it (the module does not even exist)
        register("lazy_one", "no_such_package.adapters:Heavy", description="imported only when used")


def test_plugin_adapter_facts_from_registration_or_class_and_never_imported(capsys):
    host = PluginHost(extra_plugins=[FactsPlugin()], third_party=False)
    assert main(["ls", "adapters"], host=host) == 0
    lines, rows = _table(capsys.readouterr().out)
    declared, from_class, lazy = rows["declared"], rows["from_class"], rows["lazy_one"]
    assert _cell(lines, declared, "dim") == "384" and _cell(lines, declared, "licence") == "MIT"
    assert _cell(lines, declared, "resize/crop interp mean-std") == "256/224 bicubic imagenet"
    assert _cell(lines, declared, "aliases") == "declared_alias"
    assert _cell(lines, from_class, "dim") == "48" and _cell(lines, from_class, "licence") == "BSD-3-Clause"
    assert _cell(lines, from_class, "resize/crop interp mean-std") == "72/64 bilinear 0.5/0.5"
    assert _cell(lines, lazy, "dim") == "at build" and _cell(lines, lazy, "licence") == "-"
    # a plain adapter that declares no gating: not declared (it may or may not download gated weights)
    assert _cell(lines, from_class, "gated") == "-" == _cell(lines, lazy, "gated")
    assert all(line.rstrip().endswith("passed in code") for line in (declared, from_class, lazy))


def test_the_demo_registration_declares_what_the_demo_builds():
    from prism_plugin.model_adapters.demo import DEMO_PREPROCESSING, DemoViT

    adapter = DemoViT()
    adapter.build("cpu")
    assert adapter.embed_dim == 192 and adapter.preprocessing == DEMO_PREPROCESSING
