"""Run the ``python`` blocks of the docs pages given as JSON on stdin; print one JSON result per block.

Used by test_docs.py in one subprocess (importing torch once): each page gets its own folder under
the given root, its declared yaml files are written there as they appear, and each block runs
there with ``exec`` in a fresh namespace.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path


def main() -> int:
    root, pages = Path(sys.argv[1]), json.load(sys.stdin)
    results = []
    for page in pages:
        folder = root / page["slug"]
        folder.mkdir(parents=True, exist_ok=True)
        for i, (lang, body, path) in enumerate(page["blocks"]):
            if path:
                (folder / path).parent.mkdir(parents=True, exist_ok=True)
                (folder / path).write_text(body, encoding="utf-8")
                continue
            if lang != "python":
                continue
            os.chdir(folder)
            start = time.perf_counter()
            error, output = None, io.StringIO()
            try:
                with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                    exec(compile(body, f"{page['page']} [block {i}]", "exec"), {"__name__": "__main__"})
            except BaseException:  # noqa: BLE001 - report every failure, SystemExit included
                error = traceback.format_exc(limit=-8) + "\noutput of the block (tail):\n" + output.getvalue()[-2000:]
            results.append({"page": page["page"], "block": i, "error": error, "seconds": round(time.perf_counter() - start, 1)})
    print("\n@@RESULTS@@" + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
