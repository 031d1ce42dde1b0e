"""Faults reach the user as one line naming the path (or argument) and the fix: file-system errors
anywhere in a run, a device this machine lacks, an unusable cache folder, a plugin whose write
failed because the disk did."""

from __future__ import annotations

import errno
import resource
import types

import pytest

from prism_plugin.cli import main
from prism_plugin.storage import FileSystemError
from prism_plugin.hookspecs import hookimpl
from prism_plugin.plugins import PluginFailure, PluginHost
from tests.conftest import write_precomputed


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    write_precomputed(root / "emb" / "Toy", {"train": 120, "val": 40, "test": 60})
    (root / "tasks").mkdir()
    (root / "tasks" / "toy.yaml").write_text(
        "task: toy\ndataset: Toy\nclass_names: [a, b]\nsource: {type: precomputed}\n"
        "splits: {train: train, val: val, test: test}\nlabel_fractions: [1.0]\nseeds: [42]\n")
    return root


def toy_args(root, out, *extra):
    return ["--task", "toy", "--include-path", str(root / "tasks"), "--model", "precomputed",
            "--model-args", f"root={root / 'emb'}", "--output", str(out), "--quiet", "--no-report", *extra]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("prism-run: error:")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err) and "internal error" not in "\n".join(err), err
    return errors[0]


def test_a_write_past_a_file_size_limit_names_the_file(toy, tmp_path, capsys):
    """A real failing write (RLIMIT_FSIZE: the kernel refuses with EFBIG) somewhere in the results."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (600, hard))
    try:
        rc = main(toy_args(toy, tmp_path / "out"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    line = one_error_line(capsys)
    assert rc == 2
    assert line.startswith(f"prism-run: error: cannot write {tmp_path / 'out'}/"), line
    assert "file too large" in line and "--output" in line
    assert not [p for p in (tmp_path / "out").rglob("*.tmp")]


def test_output_below_a_file_is_one_line(toy, tmp_path, capsys):
    (tmp_path / "blocker").write_text("a file")
    rc = main(toy_args(toy, tmp_path / "blocker" / "out"))
    line = one_error_line(capsys)
    assert rc == 2 and str(tmp_path / "blocker") in line


def test_os_errors_escaping_a_command_are_file_system_faults_not_bugs(monkeypatch, capsys):
    import prism_plugin.commands.ls as ls

    def boom(args):
        raise OSError(errno.EROFS, "Read-only file system", "/results/runs.csv")

    monkeypatch.setattr(ls, "run", boom)
    assert main(["ls", "tasks"]) == 2
    line = one_error_line(capsys)
    assert line == ("prism-run: error: cannot write /results/runs.csv: the file system is read-only; make the "
                    "folder writable or write elsewhere (--output DIR for results, --cache-dir DIR or "
                    "$PRISM_CACHE_DIR for the cache)")

    def bug(args):
        raise OSError("not about a file")

    monkeypatch.setattr(ls, "run", bug)
    assert main(["ls", "tasks"]) == 70  # a program error stays the command's: an internal error naming it
    line = capsys.readouterr().err.strip()
    assert line.startswith("prism-run: internal error: command 'ls' (plugin 'builtin_commands'"), line
    assert "failed in run: OSError: not about a file" in line and "\n" not in line


@pytest.mark.parametrize("device, words", [
    ("gpu0", "is not a device this tool can use; choose auto, cpu, cuda, cuda:N or mps"),
    ("cuda:99", "cuda:99"),
    ("mps", "MPS"),
    ("cpu:3", "one CPU device"),
])
def test_device_is_checked_before_any_work(toy, tmp_path, capsys, device, words):
    import torch

    if device == "mps" and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    rc = main(toy_args(toy, tmp_path / "out", "--device", device))
    line = one_error_line(capsys)
    assert rc == 2 and f"--device {device}" in line and words in line, line
    assert not (tmp_path / "out").exists()


def test_cuda_without_cuda_fails_at_once(toy, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(toy_args(toy, tmp_path / "out", "--device", "cuda")) == 2
    line = one_error_line(capsys)
    assert "--device cuda:" in line and "use --device cpu" in line
    assert not (tmp_path / "out").exists()


def test_unusable_cache_folder_is_named(toy, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(toy_args(toy, tmp_path / "out", "--cache-dir", str(tmp_path / "file"))) == 2
    assert "--cache-dir" in (line := one_error_line(capsys)) and "is a file, not a folder" in line
    assert main(toy_args(toy, tmp_path / "out", "--cache-dir", str(tmp_path / "file" / "sub"))) == 2
    assert f"{tmp_path / 'file'} is not a folder" in one_error_line(capsys)


def test_a_plugins_failed_write_is_the_disks_fault(tmp_path):
    plugin = types.ModuleType("figure_writer")
    target = tmp_path / "reliability" / "x.json"

    @hookimpl
    def run_metrics(run):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    plugin.run_metrics = run_metrics
    host = PluginHost(extra_plugins=[plugin], third_party=False)
    name = [p for p in host.implementations("run_metrics") if "figure" in p]
    assert name, host.implementations("run_metrics")
    for strict in (True, False):
        with pytest.raises(FileSystemError) as info:
            host.call("run_metrics", strict=strict, only=name, run=None)
        assert str(info.value).startswith(f"cannot write {target}: no space left on the device; free space there")
        assert not isinstance(info.value, PluginFailure)

    @hookimpl
    def run_metrics(run):  # noqa: F811 - a missing input file is still the plugin's own failure
        raise FileNotFoundError(errno.ENOENT, "No such file", "/nowhere")

    plugin2 = types.ModuleType("reader")
    plugin2.run_metrics = run_metrics
    host = PluginHost(extra_plugins=[plugin2], third_party=False)
    with pytest.raises(PluginFailure, match="reader"):
        host.call("run_metrics", strict=True, only=[p for p in host.implementations("run_metrics") if "reader" in p],
                  run=None)
