"""Composition: include chains and cycles, groups and what propagates, override precedence, and errors
that name the file, the line and the key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from prism_plugin.errors import PrismError
from prism_plugin.tasks.builtin import builtin_task_dir
from prism_plugin.tasks.index import TaskIndex

TASK = """\
task: {name}
dataset: {dataset}
class_names: [a, b]
source: {{type: imagefolder, root: data}}
splits: {{train: train, val: val, test: test}}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def user(tmp_path):
    d = tmp_path / "user_tasks"
    write(d, "_base.yaml", "label_fractions: [0.1, 1.0]\nseeds: [1, 2]\nprobe: {kind: logistic, C: 2.0, max_iter: 50}\n")
    write(d, "_mid.yaml", "include: _base.yaml\nseeds: [7]\nece_bins: 10\n")
    write(d, "plain.yaml", TASK.format(name="plain", dataset="P") + "include: _mid.yaml\n")
    write(d, "own.yaml", TASK.format(name="own", dataset="O") + "include: _mid.yaml\nlabel_fractions: [0.5]\n"
          "probe: {C: 0.5}\n")
    return d


def test_include_chain_local_keys_win(user):
    idx = TaskIndex([user])
    t = idx.load_task("plain")
    assert t.label_fractions == (0.1, 1.0) and t.seeds == (7,) and t.ece_bins == 10  # _mid over _base
    assert t.probe == {"kind": "logistic", "C": 2.0, "max_iter": 50, "backend": "sklearn"}
    own = idx.load_task("own")
    assert own.label_fractions == (0.5,) and own.probe["C"] == 0.5 and own.probe["max_iter"] == 50  # nested merge


def test_include_cycle_is_reported(tmp_path):
    write(tmp_path, "_a.yaml", "include: _b.yaml\nseeds: [1]\n")
    write(tmp_path, "_b.yaml", "include: _a.yaml\n")
    write(tmp_path, "t.yaml", TASK.format(name="t", dataset="T") + "include: _a.yaml\n")
    with pytest.raises(PrismError, match=r"include cycle .*_a.yaml -> _b.yaml -> _a.yaml"):
        TaskIndex([tmp_path]).load_task("t")


def test_group_propagation_and_precedence(user):
    write(user, "inner.yaml", """\
        group: inner
        seeds: [11]
        probe: {C: 0.25}
        tasks: [plain, own]
        """)
    write(user, "outer.yaml", """\
        group: outer
        label_fractions: [0.01, 0.02]
        seeds: [99]
        tasks:
          - inner
          - plain
        """)
    idx = TaskIndex([user])
    inner = {t.name: t for t in idx.expand("inner")}
    # fragments a member includes lose to the group; the member's own keys win over it
    assert inner["plain"].seeds == (11,) and inner["plain"].probe["C"] == 0.25
    assert inner["own"].probe["C"] == 0.5 and inner["own"].seeds == (11,) and inner["own"].label_fractions == (0.5,)
    with pytest.raises(PrismError, match=r"task 'plain' appears twice in group 'outer'"):
        idx.load_group("outer")
    write(user, "outer.yaml", "group: outer\nlabel_fractions: [0.01, 0.02]\nseeds: [99]\ntasks: [inner]\n")
    outer = {t.name: t for t in TaskIndex([user]).expand("outer")}
    assert outer["plain"].seeds == (11,)                         # the inner group beats the outer one
    assert outer["plain"].label_fractions == (0.01, 0.02)        # what the inner group leaves, the outer sets
    assert outer["own"].label_fractions == (0.5,)                # the member's own file beats both
    over = {t.name: t for t in TaskIndex([user]).expand("outer", ["seeds=[5]", "probe.C=3.0"])}
    assert over["plain"].seeds == (5,) and over["own"].probe["C"] == 3.0  # --set beats everything


def test_bad_keys_are_reported_with_file_line_and_key(tmp_path):
    f = write(tmp_path, "bad.yaml", """\
        task: bad
        dataset: B
        class_names: [a, b]
        lable_fractions: [0.1]
        source: {type: imagefolder, root: data, rot: x}
        splits: {train: train, test: test}
        seeds: [1, 1]
        """)
    with pytest.raises(PrismError) as exc:
        TaskIndex([tmp_path]).load_task("bad")
    lines = str(exc.value).splitlines()
    assert any(l.startswith(f"{f}:4: unknown key 'lable_fractions'") and "did you mean 'label_fractions'" in l
               for l in lines), lines
    assert any(l.startswith(f"{f}:5: source.rot: not a imagefolder option") for l in lines), lines
    assert any(l.startswith(f"{f}:7: seeds: contains duplicates") for l in lines), lines


def test_group_problems_all_reported_with_lines(tmp_path):
    write(tmp_path, "ok.yaml", TASK.format(name="ok", dataset="OK"))
    write(tmp_path, "broken.yaml", TASK.format(name="broken", dataset="B") + "ece_bins: -3\n")
    g = write(tmp_path, "g.yaml", """\
        group: g
        seeds: [1]
        colour: blue
        tasks:
          - ok
          - no_such_task
          - broken
          - g2
        """)
    write(tmp_path, "g2.yaml", "group: g2\ntasks: [g]\n")
    with pytest.raises(PrismError) as exc:
        TaskIndex([tmp_path]).load_group("g")
    msg = str(exc.value)
    assert f"{g}:3: unknown key 'colour' in a group" in msg
    assert f"{g}:6: tasks[1]: unknown task 'no_such_task'" in msg
    assert f"{tmp_path / 'broken.yaml'}:6: ece_bins: must be between 1 and 10000, got -3" in msg
    assert "group cycle g -> g2 -> g" in msg


def test_group_keys_are_validated_where_they_are_written(tmp_path):
    write(tmp_path, "ok.yaml", TASK.format(name="ok", dataset="OK"))
    g = write(tmp_path, "g.yaml", "group: g\ntasks: [ok]\nseeds: [-1]\n")
    with pytest.raises(PrismError, match=rf"{g}:3: seeds: must be between 0"):
        TaskIndex([tmp_path]).load_group("g")


def test_setting_source_type_replaces_the_included_source(tmp_path):
    write(tmp_path, "t.yaml", TASK.format(name="t", dataset="T"))
    idx = TaskIndex([tmp_path])
    t = idx.load_task("t", ["source.type=hf", "source.path=owner/data", "source.revision=" + "a" * 40])
    assert t.source == {"type": "hf", "path": "owner/data", "revision": "a" * 40}
    assert idx.load_task("t", ["source.root=elsewhere"]).source == {"type": "imagefolder", "root": "elsewhere"}
    write(tmp_path, "flat.yaml", "include: t.yaml\ntask: flat\nsource: {type: imagefolder, layout: flat}\n")
    idx = TaskIndex([tmp_path])
    assert idx.load_task("flat").source == {"type": "imagefolder", "root": "data", "layout": "flat"}  # restated type
    with pytest.raises(PrismError, match=r"^--set.*source.rot: not a imagefolder option"):
        idx.load_task("t", ["source.rot=x"])  # a typo at the same layer as the type is still an error
    with pytest.raises(PrismError, match=r"source.revision: a hub dataset needs a pinned revision"):
        idx.load_task("t", ["source.type=hf", "source.path=owner/data"])


def test_user_folder_groups_mix_with_the_catalogue(tmp_path):
    write(tmp_path, "mine.yaml", "group: mine\nlabel_fractions: [1.0]\ntasks: [prism_mhist, prism_camelyon17_h0_to_h1]\n")
    idx = TaskIndex([tmp_path, builtin_task_dir()])
    tasks = idx.expand("mine")
    assert [t.name for t in tasks] == ["prism_mhist", "prism_camelyon17_h0_to_h1"]
    assert all(t.label_fractions == (1.0,) for t in tasks)  # overrides _prism_protocol.yaml's grid
    assert idx.load_task("prism_mhist").label_fractions[0] == 0.01


def test_split_procedure_is_validated(tmp_path):
    write(tmp_path, "s.yaml", TASK.format(name="s", dataset="S") +
          "split: {procedure: random_split, seed: 1, parts: {train: 0.7, val: 0.2, test: 0.2}}\n")
    with pytest.raises(PrismError, match=r"s.yaml:6: split.parts: fractions must sum to 1"):
        TaskIndex([tmp_path]).load_task("s")
    write(tmp_path, "s.yaml", TASK.format(name="s", dataset="S") +
          "split: {procedure: stratified, seed: 1, parts: {train: 0.7, rest: 0.3}}\n")
    with pytest.raises(PrismError, match=r"split.parts: part\(s\) \['rest'\] are used by no split"):
        TaskIndex([tmp_path]).load_task("s")


def test_plugin_task_paths_provide_tasks_and_groups(tmp_path):
    """A plugin's ``task_paths`` folder is searched for groups too (after --include-path folders)."""
    from prism_plugin.hookspecs import hookimpl
    from prism_plugin.plugins import PluginHost
    from prism_plugin.tasks.index import default_index

    folder = tmp_path / "plugin_tasks"
    write(folder, "ptask.yaml", TASK.format(name="ptask", dataset="PT"))
    write(folder, "pgroup.yaml", "group: pgroup\nseeds: [3]\ntasks: [ptask, prism_demo]\n")

    class Plugin:
        @hookimpl
        def task_paths(self):
            return [folder]

    host = PluginHost(extra_plugins=[Plugin()])
    idx = default_index(host, [])
    assert idx.groups()["pgroup"].file == folder / "pgroup.yaml"
    assert [(t.name, t.seeds) for t in idx.expand("pgroup")] == [("ptask", (3,)), ("prism_demo", (3,))]
    user = tmp_path / "user"
    write(user, "pgroup.yaml", "group: pgroup\ntasks: [ptask]\n")  # --include-path folders come first
    assert [t.name for t in default_index(host, [user]).expand("pgroup")] == ["ptask"]
