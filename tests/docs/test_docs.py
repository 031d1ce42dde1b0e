"""The documentation site builds (``mkdocs build --strict``) and every ``python`` block in it runs.

Each block runs in a scratch folder of its page (cwd), with ``PRISM_CACHE_DIR`` there too, after the
files its page declared above it (``# <path>.yaml`` blocks). All blocks share one interpreter (one
torch import) but not their variables. A block that cannot run offline must be ``bash`` or ``text``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.docs.pages import DOCS, ROOT, blocks, declared, pages, rel

MKDOCS = ROOT / "mkdocs.yml"
pytestmark = pytest.mark.skipif(not MKDOCS.is_file(), reason="mkdocs.yml is not beside the tests (an sdist)")

PYTHON_BLOCKS = [(rel(p), i) for p in pages() for i, (lang, _) in enumerate(blocks(p)) if lang == "python"]


def test_docs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "extending" / "run_metrics" / "index.html").is_file()


def test_every_hook_has_a_page():
    from prism_plugin import hookspecs

    hooks = {n for n, f in vars(hookspecs).items() if callable(f) and hasattr(f, f"{hookspecs.PROJECT}_spec")}
    hooks.discard("probe_heads")  # deprecated alias of register_heads
    missing = sorted(h for h in hooks if not (DOCS / "extending" / f"{h}.md").is_file())
    assert not missing, f"hooks without a page docs/extending/<hook>.md: {missing}"
    for hook in hooks:
        langs = [lang for lang, _ in blocks(DOCS / "extending" / f"{hook}.md")]
        assert "python" in langs, f"docs/extending/{hook}.md has no worked example (a python block)"


@pytest.fixture(scope="module")
def snippet_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("snippets")
    payload = [{"page": rel(p), "slug": rel(p).replace("/", "__").removesuffix(".md"),
                "blocks": [(lang, body, declared(body) if lang in ("yaml", "yml") else None)
                           for lang, body in blocks(p)]}
               for p in pages() if any(lang == "python" for lang, _ in blocks(p))]
    env = {**os.environ, "PRISM_CACHE_DIR": str(root / "cache"), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "docs" / "run_snippets.py"), str(root)],
                         input=json.dumps(payload), capture_output=True, text=True, env=env, cwd=root)
    assert "@@RESULTS@@" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
    out = json.loads(res.stdout.rsplit("@@RESULTS@@", 1)[1])
    return {(r["page"], r["block"]): r["error"] for r in out}


@pytest.mark.parametrize("page,block", PYTHON_BLOCKS, ids=[f"{p}#{i}" for p, i in PYTHON_BLOCKS])
def test_python_block_runs(snippet_results, page, block):
    assert (page, block) in snippet_results, "the block did not run"
    error = snippet_results[(page, block)]
    assert error is None, f"{page}, python block {block}:\n{error}"
