"""Built-in plugin: the task catalogue shipped with the package.

An installed wheel carries the catalogue as ``prism_plugin/task_files/``; an
editable install of a checkout reads the repository's ``tasks/`` folder.
"""

from __future__ import annotations

from pathlib import Path

from prism_plugin.hookspecs import hookimpl

_PACKAGE = Path(__file__).resolve().parents[1]


def builtin_task_dir() -> Path:
    installed = _PACKAGE / "task_files"
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parents[1] / "tasks"  # src/prism_plugin -> repository root
    return checkout


@hookimpl
def task_paths():
    return [builtin_task_dir()]
