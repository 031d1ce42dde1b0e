#!/usr/bin/env python
"""Adversarial battery for ``prism-run`` (issue 14): bad inputs, faults and hostile names.

Not part of the pytest suite (no ``test_`` prefix). Run it with the project's interpreter::

    python tests/battery/battery.py [--only FAMILY[,FAMILY]] [--case SUBSTR] [--jobs N]
                                                          [--keep] [--json FILE] [--list]

Every case builds its inputs in a fresh sandbox (``<tmp>/<case>/sb``, with a decoy folder beside it at
``<tmp>/<case>/decoy``), runs the installed console script as a real subprocess (``nice -n 10``,
without root's permission override where ``setpriv`` exists, so read-only folders are read-only),
then classifies the outcome. See README.md in this folder for the outcome classes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PYTHON = Path(sys.executable)
PRISM = PYTHON.with_name("prism-run")
if not PRISM.exists():  # pragma: no cover - a venv without the console script: the one on PATH
    PRISM = Path(shutil.which("prism-run") or "prism-run")

#: planted in files that are not task files: must never reach stdout/stderr or any written file
FILE_SECRET = "H6SECRET-fileContent-9f27c1"
#: the hub token in every case's environment: must never be echoed or written
TOKEN_SECRET = "hf_H6battery0TOKEN0doNotLeak"

OUTCOMES = ("clear", "ok", "skip", "setup_error", "outside_write", "leak", "signal", "hang", "orphan",
            "traceback", "internal", "silent_wrong", "unclear", "refused", "noise")
BAD = ("outside_write", "leak", "signal", "hang", "orphan", "traceback", "internal", "silent_wrong",
       "unclear", "refused", "noise", "setup_error")
#: library warnings that a run must not print (issue 14: pandas fragmentation, torch non-writable arrays)
NOISE = re.compile(r"PerformanceWarning|highly fragmented|non-writable tensor|NumPy array is not writable"
                   r"|SettingWithCopyWarning|FutureWarning")
#: third-party entries that may appear in $TMPDIR (torch's inductor cache folder): not the tool's leftovers
TMP_IGNORE = re.compile(r"^torchinductor_")

SETPRIV = shutil.which("setpriv")
PRIV_PREFIX = ([SETPRIV, "--bounding-set=-dac_override,-dac_read_search",
                "--inh-caps=-dac_override,-dac_read_search", "--"] if SETPRIV and os.geteuid() == 0 else [])
NICE = ["nice", "-n", "10"] if shutil.which("nice") else []


# --------------------------------------------------------------------------------------------------
# sandbox
# --------------------------------------------------------------------------------------------------
class SetupError(Exception):
    pass


@dataclass
class Result:
    rc: int | None
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.stdout + "\n" + self.stderr


MPL_TEMPLATE: dict[str, Path] = {}


def build_mpl_template(base: Path) -> None:
    d = base / "mpl-template"
    d.mkdir()
    p = subprocess.run([str(PYTHON), "-c", "import matplotlib; matplotlib.use('Agg'); import matplotlib.font_manager"],
                       env={**os.environ, "MPLCONFIGDIR": str(d)}, capture_output=True, timeout=120)
    if p.returncode == 0:
        MPL_TEMPLATE["dir"] = d


class SB:
    """One case's sandbox: ``root/sb`` (cwd, HOME, caches, inputs, output) and ``root/decoy``."""

    def __init__(self, root: Path):
        self.root = root
        self.sb = root / "sb"
        self.decoy = root / "decoy"
        self.work = self.sb / "work"
        self.out = self.sb / "out"
        self.cache = self.sb / "cache"          # --cache-dir
        self.envcache = self.sb / "envcache"    # $PRISM_CACHE_DIR
        self.home = self.sb / "home"
        self.xdg = self.sb / "xdg"
        self.tp = self.sb / "thirdparty"        # MPLCONFIGDIR, TORCH_HOME: third-party caches, allowed
        self.tmp = self.sb / "tmp"              # TMPDIR
        self.tasks = self.sb / "tasks"
        self.emb = self.sb / "emb"
        self.data = self.sb / "data"
        for d in (self.work, self.home / ".cache", self.xdg, self.tp, self.tmp, self.tasks, self.emb, self.data,
                  self.decoy):
            d.mkdir(parents=True, exist_ok=True)
        if MPL_TEMPLATE.get("dir"):  # matplotlib's font cache, built once: no third-party noise or cost per case
            shutil.copytree(MPL_TEMPLATE["dir"], self.tp / "mpl")
        # decoys: a results tree and a secret, where hostile names would land
        (self.decoy / "runs.csv").write_text("model,auroc\nDECOY,0.5\n")
        (self.decoy / "g").mkdir()
        (self.decoy / "g" / "runs.csv").write_text("model,auroc\nDECOY,0.5\n")
        self.secret_file = self.decoy / "secret.txt"
        self.secret_file.write_text(f"password: {FILE_SECRET}\nline two {FILE_SECRET}: [unclosed\n\tbad: : :\n")
        self.allowed: list[Path] = [self.out, self.cache, self.envcache, self.tp, self.tmp]
        self.umask: int | None = None
        self.fsize: int | None = None
        self.env_extra: dict[str, str] = {}
        self.pre_files: dict[str, str] = {}
        self.setup_notes: list[str] = []

    # ---- environment and commands ----
    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("PRISM_", "HF_", "HUGGING", "XDG_", "PYTEST", "COV_")) and
                k not in ("HOME", "TMPDIR", "MPLCONFIGDIR", "TORCH_HOME", "PYTHONPATH")}
        keep.update({
            "HOME": str(self.home), "XDG_CACHE_HOME": str(self.xdg), "PRISM_CACHE_DIR": str(self.envcache),
            "MPLCONFIGDIR": str(self.tp / "mpl"), "TORCH_HOME": str(self.tp / "torch"), "TMPDIR": str(self.tmp),
            "HF_TOKEN": TOKEN_SECRET, "HUGGING_FACE_HUB_TOKEN": TOKEN_SECRET, "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(self.tp / "hf"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "0", "PYTHONDONTWRITEBYTECODE": "1",
            "COLUMNS": "200",
        })
        for k, v in self.env_extra.items():
            if v is None:
                keep.pop(k, None)
            else:
                keep[k] = v
        return keep

    def _preexec(self):
        fsize = self.fsize

        def fn():
            if fsize is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        return fn if fsize is not None else None

    def popen(self, argv: list[str], exe: list[str] | None = None, env: dict | None = None) -> subprocess.Popen:
        cmd = NICE + PRIV_PREFIX + (exe or [str(PRISM)]) + [str(a) for a in argv]
        return subprocess.Popen(cmd, cwd=self.work, env={**self.env(), **(env or {})}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                umask=self.umask if self.umask is not None else -1, preexec_fn=self._preexec())

    def run(self, argv: list[str], timeout: float = 90, exe: list[str] | None = None, env: dict | None = None) -> Result:
        t0 = time.monotonic()
        p = self.popen(argv, exe, env)
        timed_out = False
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _killpg(p.pid)
            try:
                out, err = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
        res = Result(p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     time.monotonic() - t0, timed_out)
        left = _session_procs(p.pid)
        if left:
            res.notes.append(f"{len(left)} process(es) of the run still alive after it exited")
            _killpg(p.pid)
        return res

    def must(self, argv: list[str], timeout: float = 120, **kw) -> Result:
        """A setup command that has to succeed."""
        res = self.run(argv, timeout=timeout, **kw)
        if res.rc != 0:
            tail = (res.stderr.strip().splitlines() or ["(no stderr)"])[-1][:300]
            raise SetupError(f"setup command failed (rc={res.rc}): prism-run {' '.join(map(str, argv))[:200]}: {tail}")
        return res

    # ---- inputs ----
    def emb_set(self, model: str = "M", dataset: str = "MyData", n=(40, 20, 20), d: int = 4, k: int = 2,
                seed: int = 0, shift: float = 2.0, mut: Callable[[dict], None] | None = None,
                splits=("train", "val", "test"), base: Path | None = None) -> Path:
        """Gaussian class clusters saved as ``<base>/<model>/<dataset>/{split}_{features,labels}.npy``.

        ``mut(arrays)`` may edit ``{split: [X, y]}`` (or replace items by bytes to write raw) before saving.
        Returns the ``root=`` folder (``<base>/<model>``)."""
        rng = np.random.default_rng(seed)
        arrays: dict[str, list] = {}
        for split, m in zip(splits, n):
            y = np.arange(m) % k
            X = rng.normal(size=(m, d)).astype(np.float32)
            X[np.arange(m), y % d] += shift
            arrays[split] = [X, y.astype(np.int64)]
        if mut is not None:
            mut(arrays)
        folder = (base or self.emb) / model / dataset
        folder.mkdir(parents=True, exist_ok=True)
        for split, (X, y) in arrays.items():
            for kind, arr in (("features", X), ("labels", y)):
                path = folder / f"{split}_{kind}.npy"
                if arr is None:
                    continue
                if isinstance(arr, (bytes, bytearray)):
                    path.write_bytes(arr)
                elif isinstance(arr, Path):
                    path.symlink_to(arr)
                elif isinstance(arr, str) and arr == "DIR":
                    path.mkdir()
                else:
                    np.save(path, arr, allow_pickle=arr.dtype == object)
        return (base or self.emb) / model

    def task(self, name: Any = "t", file: str | None = None, extra: str = "", drop=(), folder: Path | None = None,
             **keys: Any) -> Path:
        d: dict[str, Any] = {"task": name, "dataset": "MyData", "class_names": ["a", "b"],
                             "source": {"type": "precomputed"},
                             "splits": {"train": "train", "val": "val", "test": "test"},
                             "label_fractions": [0.5, 1.0], "seeds": [42]}
        d.update(keys)
        for k in drop:
            d.pop(k, None)
        folder = folder or self.tasks
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (file or f"{_fname(str(name))}.yaml")
        path.write_text(yaml.safe_dump(d, sort_keys=False, allow_unicode=True) + extra)
        return path

    def yaml_file(self, rel: str, text: str) -> Path:
        path = self.tasks / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def args(self, task: Path | str, root: Path | None = None, *, report: bool = False, quiet: bool = True,
             out: Path | None = None, extra=(), model_args: str | None = None) -> list[str]:
        root = root if root is not None else self.emb / "M"
        a = ["--task", str(task), "--model", "precomputed", "--model-args", model_args or f"root={root}",
             "--output", str(out or self.out), "--cache-dir", str(self.cache)]
        if not report:
            a.append("--no-report")
        if quiet:
            a.append("--quiet")
        return a + list(extra)


def _fname(text: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)[:60]
    return safe or "x"


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _session_procs(sid: int) -> list[str]:
    """Live processes of session ``sid`` (every run starts its own session): what the run left behind."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) != sid:
                continue
            with open(f"/proc/{pid}/stat") as fh:
                st = fh.read()
            if ") Z " in st:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")[:120]
            out.append(f"{pid}:{cmd}")
        except (ProcessLookupError, FileNotFoundError, PermissionError, OSError):
            continue
    return out


# --------------------------------------------------------------------------------------------------
# snapshots
# --------------------------------------------------------------------------------------------------
def _digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=12)
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return h.hexdigest()


def snapshot(base: Path, exclude: list[Path]) -> dict[str, tuple]:
    excl = {str(p) for p in exclude}
    snap: dict[str, tuple] = {}
    for dirpath, dirs, files in os.walk(base, followlinks=False):
        keep = []
        for d in dirs:
            full = os.path.join(dirpath, d)
            if full in excl:
                continue
            keep.append(d)
        dirs[:] = keep
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                snap[full] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                snap[full] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                snap[full] = ("file", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode),
                              _digest(Path(full)) if st.st_size < 8 << 20 else "big")
    return snap


def diff(before: dict, after: dict) -> list[str]:
    out = []
    for k in sorted(set(before) | set(after)):
        if k not in before:
            out.append(f"+{k}")
        elif k not in after:
            out.append(f"-{k}")
        elif before[k] != after[k]:
            out.append(f"~{k}")
    return out


def files_under(*roots: Path) -> list[Path]:
    found = []
    for r in roots:
        if r.is_dir():
            found += [p for p in r.rglob("*") if p.is_file() and not p.is_symlink()]
    return found


# --------------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------------
@dataclass
class Case:
    id: str
    family: str
    doc: str
    #: builds the inputs and returns the argv of the judged command (after ``prism-run``); may run setup
    #: commands with ``sb.must``. Or ``custom`` returns the Result itself.
    build: Callable[[SB], list[str]] | None = None
    custom: Callable[[SB], Result] | None = None
    #: error | ok | either | flag | validate
    expect: str = "error"
    #: regexes that must all match the error line (error/either/flag refusals; validate: the output)
    token: tuple[str, ...] = ()
    #: for ok/flag: place -> regex that must match there when the run succeeds
    #: (places: console, summary, report, runs, stdout)
    flags: dict[str, str] = field(default_factory=dict)
    #: extra judgement of a successful run: returns a problem (-> silent_wrong) or None
    check: Callable[[SB, Result], str | None] | None = None
    #: extra judgement of a refusal: returns a problem (-> unclear) or None
    err_check: Callable[[SB, Result], str | None] | None = None
    #: text that must never appear in stdout/stderr (-> unclear)
    forbid: tuple[str, ...] = ("allow_pickle",)
    timeout: float = 90
    #: extra writable paths relative to the sandbox (sb), e.g. "work/prism_results"
    allowed: tuple[str, ...] = ()
    #: check library warnings (NOISE) on the judged command
    quiet_libs: bool = False
    #: the executable is python -c (api cases) instead of prism-run
    python: bool = False
    #: flags are required only when this holds on the written results (e.g. T really at a bound)
    flag_if: Callable[[SB], bool] | None = None


def line_err(res: Result) -> tuple[str | None, str]:
    """The single error line, or None and why not.

    ``prism-run validate`` reports each problem on a line of its own (``error  FILE:LINE: ...``): there the
    error lines together are the message, and other lines (``ok ...``, warnings) may stand beside them."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    if getattr(res, "argv", [None])[:1] == ["validate"]:
        errs = [ln for ln in (res.stderr + "\n" + res.stdout).splitlines()
                if ln.startswith(("prism-run: error:", "error ", "error\t"))]
        if not errs:
            return None, f"validate: no error line (output: {_tail(res.text)!r})"
        return " || ".join(errs), ""
    errs = [ln for ln in lines if ln.startswith("prism-run: error:")]
    if not errs:
        return None, f"no 'prism-run: error:' line (stderr: {_tail(res.stderr)!r})"
    # the tool's own warnings (data checks) may precede the error; anything else is clutter
    other = [ln for ln in lines if not ln.startswith(("prism-run: error:", "prism-run: warning:", "warning:"))]
    if len(errs) != 1 or other:
        return errs[-1], f"{len(lines)} stderr lines, expected one error line (first: {lines[0][:120]!r})"
    return errs[0], ""


def _tail(text: str, n: int = 220) -> str:
    text = " | ".join(ln.strip() for ln in text.strip().splitlines()[-3:])
    return text[-n:]


_BASE_METRICS = {"auroc", "f1_macro", "f1_binary", "brier", "nll", "nll_scaled", "ece_fixed", "ece_adaptive",
                 "temperature", "ece_scaled_fixed", "ece_scaled_adaptive", "degeneracy_share"}
_SUMMARY_DROP = {"resolved_task", "versions", "fingerprints", "adapter", "timings", "embedding_cache",
                 "run_fingerprint", "task", "model"}


def summary_text(sb: SB) -> str | None:
    paths = sorted(sb.out.rglob("summary.json")) if sb.out.is_dir() else []
    if not paths:
        return None
    try:
        d = json.loads(paths[0].read_text())
    except (OSError, ValueError):
        return None
    if isinstance(d, dict):
        d = {k: v for k, v in d.items() if k not in _SUMMARY_DROP}
        cells = d.get("cells")
        if isinstance(cells, list):
            d["cells"] = [{k: v for k, v in c.items()
                           if re.sub(r"_(mean|std)$", "", k) not in _BASE_METRICS | {"model", "dataset", "fraction",
                                                                                      "n_runs"}}
                          for c in cells if isinstance(c, dict)]
    return json.dumps(d)


def report_text(sb: SB) -> str | None:
    paths = sorted(sb.out.rglob("report.md")) if sb.out.is_dir() else []
    return paths[0].read_text(errors="replace") if paths else None


def runs_text(sb: SB) -> str | None:
    paths = sorted(sb.out.rglob("runs.csv")) if sb.out.is_dir() else []
    return paths[0].read_text(errors="replace") if paths else None


def place_text(sb: SB, res: Result, place: str) -> str | None:
    if place == "console":
        return res.text
    if place == "stdout":
        return res.stdout
    if place == "summary":
        return summary_text(sb)
    if place == "report":
        return report_text(sb)
    if place == "runs":
        return runs_text(sb)
    raise ValueError(place)


@dataclass
class Verdict:
    case: Case
    outcome: str
    detail: str
    cmd: str
    elapsed: float
    notes: list[str]


def judge(case: Case, sb: SB, res: Result, outside: list[str], cmd: str) -> Verdict:
    notes = list(sb.setup_notes) + list(res.notes)
    V = lambda o, d: Verdict(case, o, d, cmd, res.elapsed, notes)  # noqa: E731
    written = files_under(sb.out, sb.cache, sb.envcache)
    leaked_files = []
    for p in written:
        if sb.pre_files.get(str(p)) == _digest(p):
            continue  # planted by the case before the judged command, unchanged
        try:
            if p.stat().st_size < 4 << 20:
                data = p.read_bytes()
                if FILE_SECRET.encode() in data or TOKEN_SECRET.encode() in data:
                    leaked_files.append(str(p.relative_to(sb.sb)))
        except OSError:
            pass
    partial = [str(p.relative_to(sb.sb)) for p in written
               if p.name.startswith(".") or p.name.endswith((".tmp", ".partial")) or ".tmp." in p.name]
    if partial:
        notes.append(f"temporary-looking files left: {partial[:3]}")
    left_tmp = ([str(p.relative_to(sb.sb)) for p in sb.tmp.iterdir() if not TMP_IGNORE.match(p.name)]
                if sb.tmp.is_dir() else [])
    if left_tmp:
        notes.append(f"left in TMPDIR: {left_tmp[:3]}")
    if NOISE.search(res.text) and not case.quiet_libs:
        notes.append("library warning on the console: " + NOISE.search(res.text).group(0))
    if res.orphans:
        return V("orphan", f"processes alive after the run ended: {res.orphans[:3]}")
    if res.timed_out:
        return V("hang", f"no exit within {case.timeout:.0f} s")
    if res.rc is not None and res.rc < 0:
        return V("signal", f"killed by signal {-res.rc} ({signal.Signals(-res.rc).name}); stderr {_tail(res.stderr)!r}")
    if res.rc is not None and res.rc > 128 and not case.python:
        return V("signal", f"exit {res.rc} (signal {res.rc - 128}); stderr {_tail(res.stderr)!r}")
    if outside:
        return V("outside_write", f"{len(outside)} change(s) outside output/cache: {outside[:4]}")
    if FILE_SECRET in res.text or TOKEN_SECRET in res.text:
        return V("leak", "a planted secret appears on the console: " + _tail(
            next(ln for ln in res.text.splitlines() if FILE_SECRET in ln or TOKEN_SECRET in ln), 200))
    if leaked_files:
        return V("leak", f"a planted secret was written into {leaked_files[:3]}")
    if case.python:
        return judge_python(case, sb, res, V)
    if "Traceback (most recent call last)" in res.text:
        return V("traceback", _tail(res.stderr))
    if re.search(r"internal error", res.text, re.I):
        return V("internal", _tail(res.stderr))
    for bad in case.forbid:
        if bad in res.text:
            return V("unclear", f"output contains {bad!r}: {_tail(res.stderr)!r}")
    if case.quiet_libs and NOISE.search(res.text):
        m = NOISE.search(res.text)
        ln = next(line for line in res.text.splitlines() if m.group(0) in line)
        return V("noise", f"library warning on the console: {ln.strip()[:200]!r}")
    if case.expect == "validate":
        return judge_validate(case, sb, res, V)
    if res.rc == 0:
        if case.expect == "error":
            return V("silent_wrong", f"exit 0, expected a refusal naming {case.token}; "
                                     f"console: {_tail(res.text)!r}")
        missing = []
        need = case.flags if case.flag_if is None or case.flag_if(sb) else {}
        if case.flags and not need:
            notes.append("condition for the flag not met in runs.csv: no flag required")
        for place, rx in need.items():
            txt = place_text(sb, res, place)
            if txt is None:
                missing.append(f"{place} (not written)")
            elif not re.search(rx, txt, re.I | re.S):
                missing.append(place)
        if missing:
            return V("silent_wrong", f"exit 0 without the expected flag /{'/ '.join(set(case.flags.values()))}/ in: "
                                     f"{', '.join(missing)}")
        if case.check is not None:
            problem = case.check(sb, res)
            if problem:
                return V("silent_wrong", problem)
        return V("ok", "exit 0" + (f"; flagged ({', '.join(need)})" if need else ""))
    # a refusal
    line, why = line_err(res)
    if line is None:
        return V("unclear", f"exit {res.rc}: {why}")
    if case.expect == "ok":
        return V("refused", f"exit {res.rc}, expected success: {line[:220]!r}")
    if why:
        return V("unclear", f"exit {res.rc}: {why}: {_tail(res.stderr)!r}")
    miss = [t for t in case.token if not re.search(t, line, re.I)]
    if miss:
        return V("unclear", f"error line lacks /{'/, /'.join(miss)}/: {line[:240]!r}")
    if case.err_check is not None:
        problem = case.err_check(sb, res)
        if problem:
            return V("unclear", problem)
    return V("clear", line[:200])


def judge_validate(case, sb, res, V):
    if res.rc == 0 and case.flags:
        missing = [p for p, rx in case.flags.items() if not re.search(rx, place_text(sb, res, p) or "", re.I | re.S)]
        if missing:
            return V("silent_wrong", f"exit 0 without /{list(case.flags.values())[0]}/ in {missing}")
        return V("ok", "exit 0, warned")
    if res.rc == 0:
        return V("silent_wrong", f"validate exit 0, expected problems {case.token}")
    lines = [ln.strip() for ln in res.text.splitlines() if ln.strip()]
    dup = sorted({ln for ln in lines if lines.count(ln) > 1})
    miss = [t for t in case.token if not re.search(t, res.text, re.I)]
    if miss:
        return V("unclear", f"exit {res.rc}; not reported: {miss}; output: {_tail(res.text)!r}")
    if dup:
        return V("unclear", f"exit {res.rc}; reported twice: {dup[0][:160]!r}")
    if case.err_check is not None:
        problem = case.err_check(sb, res)
        if problem:
            return V("unclear", problem)
    return V("clear", f"all {len(case.token)} problems reported once")


def judge_python(case, sb, res, V):
    """API cases: a PrismError naming the argument is 'clear'; any other exception is a traceback."""
    if res.rc == 0:
        if case.expect == "error":
            return V("silent_wrong", f"returned without an error: {_tail(res.stdout)!r}")
        if case.check is not None:
            problem = case.check(sb, res)
            if problem:
                return V("silent_wrong", problem)
        return V("ok", "returned")
    last = (res.stderr.strip().splitlines() or [""])[-1]
    if not last.startswith(("prism_plugin.errors.PrismError", "PrismError")):
        return V("traceback", f"raised {last[:200]!r}")
    miss = [t for t in case.token if not re.search(t, last, re.I)]
    if miss:
        return V("unclear", f"PrismError lacks /{miss}/: {last[:200]!r}")
    return V("clear", last[:200])


def execute(case: Case, base: Path, keep: bool) -> Verdict:
    root = base / case.id
    root.mkdir(parents=True)
    sb = SB(root)
    cmd = "(custom)"
    try:
        try:
            argv = case.build(sb) if case.build is not None else None
        except SetupError as exc:
            return Verdict(case, "setup_error", str(exc), cmd, 0.0, [])
        except Skip as exc:
            return Verdict(case, "skip", str(exc), cmd, 0.0, [])
        exclude = sb.allowed + [sb.sb / a for a in case.allowed]
        before = snapshot(root, exclude)
        sb.pre_files = {str(p): _digest(p) for p in files_under(sb.out, sb.cache, sb.envcache)}
        if case.custom is not None:
            try:
                res = case.custom(sb)
            except SetupError as exc:
                return Verdict(case, "setup_error", str(exc), cmd, 0.0, [])
            cmd = getattr(res, "cmd", cmd)
        else:
            exe = [str(PYTHON), "-c"] if case.python else None
            res = sb.run(argv, timeout=case.timeout, exe=exe)
            res.argv = [str(a) for a in argv]
            shown = [a.replace(str(sb.sb), "$SB").replace(str(sb.root), "$R") for a in map(str, argv)]
            cmd = ("python -c ..." if case.python else "prism-run " + " ".join(shown))[:400]
        after = snapshot(root, exclude)
        outside = [d.replace(str(root), "$R") for d in diff(before, after)]
        return judge(case, sb, res, outside, cmd)
    except Exception as exc:  # a bug of the battery itself
        import traceback

        return Verdict(case, "setup_error", f"battery error: {exc!r} {traceback.format_exc()[-300:]}", cmd, 0.0, [])
    finally:
        if not keep:
            _rmtree(root)


class Skip(Exception):
    pass


def _rmtree(path: Path) -> None:
    def onerror(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o755)
            os.chmod(p, 0o755)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)


# --------------------------------------------------------------------------------------------------
# case helpers
# --------------------------------------------------------------------------------------------------
CASES: list[Case] = []


def case(id: str, family: str, doc: str, **kw) -> Case:
    c = Case(id=id, family=family, doc=doc, **kw)
    assert all(x.id != id for x in CASES), id
    CASES.append(c)
    return c


def simple_run(task_kw: dict | None = None, emb_kw: dict | None = None, extra=(), report=False, quiet=True,
               pre: Callable[[SB], None] | None = None):
    """build(): one precomputed task + embeddings, the standard run argv."""
    def build(sb: SB):
        sb.emb_set(**(emb_kw or {}))
        t = sb.task(**(task_kw or {}))
        if pre is not None:
            pre(sb)
        return sb.args(t, report=report, quiet=quiet, extra=extra)
    return build


def mut_split(split: str, fn: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]]):
    def mut(arrs):
        X, y = arrs[split]
        arrs[split] = list(fn(X, y))
    return mut


def npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/h6battery-pwned",))


def pickled_array() -> np.ndarray:
    arr = np.empty(40, dtype=object)
    arr[:] = [_Evil()] * 40
    return arr


def no_read_outside(n_marker: int):
    """check(): the run must not have read the decoy arrays (their test split has ``n_marker`` rows)."""
    def check(sb: SB, res: Result):
        txt = runs_text(sb) or ""
        if re.search(rf",{n_marker},", txt) or f"n_test\": {n_marker}" in txt:
            return f"exit 0 and read the decoy arrays outside the --model-args root (n_test={n_marker})"
        return None
    return check


def plant_decoy_arrays(sb: SB, folder: Path, n_test: int = 14) -> None:
    sb.emb_set(model=folder.parent.name, dataset=folder.name, n=(30, 12, n_test), base=folder.parent.parent,
               seed=3)



def runs_rows(sb: SB) -> list[dict]:
    import csv

    paths = sorted(sb.out.rglob("runs.csv")) if sb.out.is_dir() else []
    if not paths:
        return []
    with open(paths[0]) as fh:
        return list(csv.DictReader(fh))


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def t_at_bound(sb: SB) -> bool:
    bounds = (0.1, 10.0)
    paths = sorted(sb.out.rglob("summary.json"))
    if paths:
        try:
            bounds = tuple(json.loads(paths[0].read_text())["resolved_task"]["temperature_bounds"])
        except (ValueError, KeyError, TypeError):
            pass
    lo, hi = float(bounds[0]), float(bounds[-1])
    ts = [_f(r.get("temperature")) for r in runs_rows(sb)]
    return any(abs(t - lo) <= 1e-3 * max(lo, 1e-9) or abs(t - hi) <= 1e-3 * hi for t in ts if t == t)


def not_converged(sb: SB) -> bool:
    return any(str(r.get("probe_converged", "")).lower() in ("false", "0", "0.0") for r in runs_rows(sb))


def nll_got_worse(sb: SB) -> bool:
    return any(_f(r.get("nll_scaled")) > _f(r.get("nll")) + 1e-12 for r in runs_rows(sb))


# ==================================================================================================
# family: names (hostile group / task / model / sweep / embeddings_key names)
# ==================================================================================================
def _group_case(cid, doc, gname, extra_check=None):
    def build(sb: SB):
        sb.emb_set()
        sb.task("member")
        g = sb.yaml_file("g.yaml", yaml.safe_dump({"group": gname(sb) if callable(gname) else gname,
                                                   "tasks": ["member"]}))
        return sb.args(g, extra=["--include-path", str(sb.tasks)])
    case(cid, "names", doc, build=build, expect="either", check=extra_check)


_group_case("group_dotdot", "group name ../../decoy/g", "../../decoy/g")
_group_case("group_dotdot_deep", "group name ../../../../../../../tmp/h6b-escape", "../../../../../../../tmp/h6b-escape",
            extra_check=lambda sb, r: "wrote /tmp/h6b-escape" if Path("/tmp/h6b-escape").exists() else None)
_group_case("group_abs", "group name = absolute path of the decoy", lambda sb: str(sb.decoy / "g"))
_group_case("group_nul", "group name with a NUL byte", "gr\0oup")
_group_case("group_long", "group name of 400 characters", "g" * 400)
_group_case("group_dotdot_only", "group name '..'", "..")
_group_case("group_dot", "group name '.'", ".")
_group_case("group_slashes", "group name 'a/../../../decoy'", "a/../../../decoy")
_group_case("group_newline", "group name with a newline", "a\nb")


def _two_task_case(cid, doc, name_of, extra_check=None):
    def build(sb: SB):
        sb.emb_set()
        t1 = sb.task(name_of(sb), file="t1.yaml")
        t2 = sb.task("plain", file="t2.yaml")
        a = sb.args(t1)
        return a + ["--task", str(t2)]
    case(cid, "names", doc, build=build, expect="either", check=extra_check)


_two_task_case("task_dotdot", "task name ../../decoy/t (two tasks: <output>/<task>/<model>)", lambda sb: "../../decoy/t")
_two_task_case("task_abs", "task name = absolute decoy path", lambda sb: str(sb.decoy / "t"))
_two_task_case("task_nul", "task name with NUL", lambda sb: "t\0x")
_two_task_case("task_long", "task name of 5000 characters", lambda sb: "t" * 5000)
_two_task_case("task_dotdot_only", "task name '..'", lambda sb: "..")
_two_task_case("task_backslash", "task name '..\\\\..\\\\decoy'", lambda sb: "..\\..\\decoy")
_two_task_case("task_unicode", "task name with unicode and spaces (should just work)", lambda sb: "tâche ü 病理")


def _default_output_case():
    def build(sb: SB):
        sb.emb_set()
        t = sb.task("../../../decoy/dflt")
        return ["--task", str(t), "--model", "precomputed", "--model-args", f"root={sb.emb / 'M'}",
                "--cache-dir", str(sb.cache), "--no-report", "--quiet"]
    case("task_dotdot_default_output", "names", "task ../../../decoy/dflt, no --output (prism_results/<task>/<model>)",
         build=build, expect="either", allowed=("work/prism_results",))


_default_output_case()


def _model_name_case(cid, doc, name_of):
    def build(sb: SB):
        root = sb.emb_set()
        t1 = sb.task("one", file="t1.yaml")
        t2 = sb.task("two", file="t2.yaml")
        return (sb.args(t1, model_args=f"root={root},name={name_of(sb)}") + ["--task", str(t2)])
    case(cid, "names", doc, build=build, expect="either")


_model_name_case("model_name_dotdot", "--model-args name=../../decoy/m with two tasks", lambda sb: "../../decoy/m")
_model_name_case("model_name_abs", "--model-args name=<absolute decoy path>", lambda sb: str(sb.decoy / "m"))
_model_name_case("model_name_long", "--model-args name of 600 characters", lambda sb: "m" * 600)
_model_name_case("model_name_dotdot_only", "--model-args name=..", lambda sb: "..")


def _collide_tasks(sb: SB):
    sb.emb_set()
    t1 = sb.task("a/b", file="t1.yaml")
    t2 = sb.task("a_b", file="t2.yaml", seeds=[123])
    return sb.args(t1) + ["--task", str(t2)]


def _two_results(sb: SB, res: Result):
    n = len(list(sb.out.rglob("runs.csv")))
    return None if n >= 2 else f"two tasks ran but only {n} runs.csv remain: one results folder overwrote the other"


case("task_names_collide", "names", "tasks 'a/b' and 'a_b' sanitise to the same folder", build=_collide_tasks,
     expect="either", check=_two_results)


def _collide_models(sb: SB):
    root = sb.emb_set()
    t1 = sb.task("one", file="t1.yaml")
    t2 = sb.task("two", file="t2.yaml")
    return ["--task", str(t1), "--task", str(t2), "--model", "precomputed", "--model-args", f"root={root},name=x/y",
            "--model", "precomputed", "--model-args", f"root={root},name=x_y", "--output", str(sb.out),
            "--cache-dir", str(sb.cache), "--no-report", "--quiet"]


def _four_results(sb: SB, res: Result):
    n = len(list(sb.out.rglob("runs.csv")))
    return None if n >= 4 else f"2 tasks x 2 models ran but only {n} runs.csv remain (model folders collided)"


case("model_names_collide", "names", "models named 'x/y' and 'x_y' sanitise to one folder", build=_collide_models,
     expect="either", check=_four_results)


def _sweep_case(cid, doc, sweep):
    def build(sb: SB):
        sb.emb_set()
        t1 = sb.task("sw", sweep=sweep)
        return sb.args(t1)
    case(cid, "names", doc, build=build, expect="either")


_sweep_case("sweep_kind_dotdot", "sweep over probe.kind with a value ../../../decoy/x",
            {"probe.kind": ["logistic", "../../../decoy/x"]})
_sweep_case("sweep_probe_dict_hostile", "sweep over whole probe mappings with a hostile backend string",
            {"probe": [{"kind": "logistic"}, {"kind": "logistic", "backend": "/../../decoy"}]})
_sweep_case("sweep_C_values", "a normal C sweep: variants stay under --output", {"probe.C": [0.1, 1.0]})


def _key_escape(cid, doc, key, value_of, what="embeddings_key"):
    def build(sb: SB):
        root = sb.emb_set()
        target = value_of(sb)
        plant_decoy_arrays(sb, sb.decoy / "emb" / "D")
        kw = {key: target}
        t = sb.task("k", **kw)
        return sb.args(t, root=root)
    case(cid, "names", doc, build=build, expect="either", check=no_read_outside(14))


_key_escape("embeddings_key_dotdot", "embeddings_key: ../../../decoy/emb/D (reads outside root=)", "embeddings_key",
            lambda sb: "../../../decoy/emb/D")
_key_escape("embeddings_key_abs", "embeddings_key: absolute path of decoy arrays", "embeddings_key",
            lambda sb: str(sb.decoy / "emb" / "D"))
_key_escape("dataset_dotdot", "dataset: ../../../decoy/emb/D (the default embeddings_key)", "dataset",
            lambda sb: "../../../decoy/emb/D")


def _split_escape(sb: SB):
    root = sb.emb_set()
    plant_decoy_arrays(sb, sb.decoy / "emb" / "D")
    t = sb.task("s", splits={"train": "train", "val": "val", "test": "../../../../decoy/emb/D/test"})
    return sb.args(t, root=root)


case("split_name_dotdot", "names", "splits.test: ../../../../decoy/emb/D/test (a split name that is a path)",
     build=_split_escape, expect="either", check=no_read_outside(14))
case("class_names_hostile", "names", "class_names are paths (used in report/figures)",
     build=simple_run({"class_names": ["../../../decoy/a", "/etc/b"]}, report=True), expect="either")


# ==================================================================================================
# family: includes (validate is fast; one run)
# ==================================================================================================
BASE_TASK = ("task: inc\ndataset: MyData\nclass_names: [a, b]\nsource: {type: precomputed}\n"
             "splits: {train: train, val: val, test: test}\n")


def _inc_case(cid, doc, include_of, token=(r"include",), expect="error", setup=None, timeout=60, run=False):
    def build(sb: SB):
        if setup:
            setup(sb)
        inc = include_of(sb)
        text = BASE_TASK + "include: " + json.dumps(inc) + "\n"
        t = sb.yaml_file("inc.yaml", text)
        if run:
            sb.emb_set()
            return sb.args(t)
        return ["validate", str(t)]
    case(cid, "includes", doc, build=build, expect=expect, token=token, timeout=timeout)


def _frag(sb: SB):
    (sb.decoy / "_frag.yaml").write_text("seeds: [7]\n")


_inc_case("include_abs_secret", "include: an absolute non-YAML secret file", lambda sb: str(sb.secret_file))
_inc_case("include_abs_fragment", "include: an absolute, valid fragment outside the task folders (confined too)",
          lambda sb: str(sb.decoy / "_frag.yaml"), setup=_frag)
_inc_case("include_rel_escape", "include: ../../decoy/_frag.yaml", lambda sb: "../../decoy/_frag.yaml", setup=_frag)
_inc_case("include_rel_escape_secret", "include: ../../decoy/secret.txt", lambda sb: "../../decoy/secret.txt")


def _symlink_setup(sb: SB):
    _frag(sb)
    (sb.tasks / "_link.yaml").symlink_to(sb.decoy / "_frag.yaml")


_inc_case("include_symlink_escape", "include: a symlink in the task folder pointing outside", lambda sb: "_link.yaml",
          setup=_symlink_setup)


def _symlink_secret(sb: SB):
    (sb.tasks / "_s.yaml").symlink_to(sb.secret_file)


_inc_case("include_symlink_secret", "include: a symlink to a secret non-YAML file", lambda sb: "_s.yaml",
          setup=_symlink_secret)
_inc_case("include_directory", "include: a directory", lambda sb: "sub",
          setup=lambda sb: (sb.tasks / "sub").mkdir())


def _binary(sb: SB):
    (sb.tasks / "_bin.yaml").write_bytes(os.urandom(300) + FILE_SECRET.encode() + b"\x00\xff" + os.urandom(100))


_inc_case("include_binary", "include: a binary file (with a secret inside)", lambda sb: "_bin.yaml", setup=_binary)


def _cycle(sb: SB):
    (sb.tasks / "_a.yaml").write_text("include: _b.yaml\nseeds: [1]\n")
    (sb.tasks / "_b.yaml").write_text("include: _a.yaml\n")


_inc_case("include_cycle", "include cycle _a -> _b -> _a", lambda sb: "_a.yaml", setup=_cycle,
          token=(r"cycl|circular|recurs",))
_inc_case("include_self", "a task that includes itself", lambda sb: "inc.yaml", token=(r"cycl|circular|recurs|itself",))
_inc_case("include_missing", "include: a file that does not exist", lambda sb: "_nope.yaml", token=(r"_nope",))
_inc_case("include_dev_zero", "include: /dev/zero (must not hang or eat memory)", lambda sb: "/dev/zero", timeout=40)
_inc_case("include_proc_environ", "include: /proc/self/environ (holds the hub token)", lambda sb: "/proc/self/environ")
_inc_case("include_etc_passwd", "include: /etc/passwd (absolute, outside)", lambda sb: "/etc/passwd")
_inc_case("include_nul", "include name with a NUL byte", lambda sb: "_a\0.yaml")
_inc_case("include_nonstring", "include: [1, {a: b}]", lambda sb: [1, {"a": "b"}])
_inc_case("include_abs_run", "include: absolute secret file, in a real run (not validate)",
          lambda sb: str(sb.secret_file), run=True)


def _secret_as_task(sb: SB):
    return ["validate", str(sb.secret_file)]


case("validate_secret_file", "includes", "prism-run validate <a non-task secret file>", build=_secret_as_task,
     expect="error")
case("task_secret_file_run", "includes", "--task <a non-task secret file>",
     build=lambda sb: ["--task", str(sb.secret_file), "--model", "demo_vit", "--output", str(sb.out), "--quiet"])
case("validate_dev_zero", "includes", "prism-run validate /dev/zero", build=lambda sb: ["validate", "/dev/zero"],
     timeout=40)
case("task_is_directory", "includes", "--task <a directory>",
     build=lambda sb: ["--task", str(sb.decoy), "--model", "demo_vit", "--output", str(sb.out), "--quiet"],
     token=(r"decoy|folder|director",))
case("include_path_is_file", "includes", "--include-path <a file>",
     build=lambda sb: ["validate", "prism_demo", "--include-path", str(sb.secret_file)],
     token=(r"--include-path",), expect="error")
case("include_path_missing", "includes", "--include-path <missing folder>",
     build=lambda sb: ["validate", "prism_demo", "--include-path", str(sb.sb / "nope")],
     token=(r"--include-path|nope",), expect="either")


def _group_include_abs(sb: SB):
    _frag(sb)
    sb.task("member")
    g = sb.yaml_file("g.yaml", f"group: gg\ninclude: {sb.decoy / '_frag.yaml'}\ntasks: [member]\n")
    return ["validate", str(g), "--include-path", str(sb.tasks)]


case("group_include_abs", "includes", "a group file with an absolute include outside the task folders",
     build=_group_include_abs, token=(r"include",))


def _yaml_error_secret_fragment(sb: SB):
    (sb.decoy / "_bad.yaml").write_text(f"seeds: [1\n{FILE_SECRET}: : x\n")
    t = sb.yaml_file("inc.yaml", BASE_TASK + "include: ../../decoy/_bad.yaml\n")
    return ["validate", str(t)]


case("include_yaml_error_outside", "includes", "relative include of a broken YAML outside (content must not echo)",
     build=_yaml_error_secret_fragment, token=(r"include",))


# ==================================================================================================
# family: labels (shapes and dtypes of label files)
# ==================================================================================================
def _lab(cid, doc, split, fn, expect="error", token=None, extra=(), n=(40, 20, 20), task_kw=None):
    token = token if token is not None else (rf"{split}_labels", r"1-D|one-dimensional|integer|label")
    case(cid, "labels", doc, build=simple_run(task_kw, {"mut": mut_split(split, fn), "n": n}, extra=extra),
         expect=expect, token=token)


_lab("onehot_train", "one-hot (N, 2) train labels", "train", lambda X, y: (X, np.eye(2, dtype=np.int64)[y]),
     token=(r"train_labels", r"1-D|one-dimensional|shape"))
_lab("onehot_test_limit", "one-hot (N, 2) test labels with --limit 10 (pairs wrong rows today)", "test",
     lambda X, y: (X, np.eye(2, dtype=np.int64)[y]), extra=("--limit", "10"),
     token=(r"test_labels", r"1-D|one-dimensional|shape"))
_lab("onehot_float_val", "one-hot float (N, 2) val labels", "val", lambda X, y: (X, np.eye(2)[y]),
     token=(r"val_labels", r"1-D|one-dimensional|shape"))
_lab("column_labels", "(N, 1) column-vector labels", "train", lambda X, y: (X, y[:, None]), expect="either",
     token=(r"train_labels",))
_lab("labels_3d", "(N, 1, 1) labels", "test", lambda X, y: (X, y[:, None, None]), expect="either",
     token=(r"test_labels",))
_lab("float_half_labels", "float labels with 0.5", "train", lambda X, y: (X, y.astype(float) * 0.5),
     token=(r"train_labels", r"integer"))
_lab("float_integer_labels", "integer-valued float labels 0.0/1.0", "train", lambda X, y: (X, y.astype(float)),
     expect="either", token=(r"train_labels",))
_lab("negative_labels", "a -1 label in test", "test", lambda X, y: (X, np.where(np.arange(len(y)) == 3, -1, y)),
     token=(r"test_labels|test", r"-1|negative|range|0\.\.|class"))
_lab("label_out_of_range", "label 2 in a 2-class task (val)", "val",
     lambda X, y: (X, np.where(np.arange(len(y)) == 0, 2, y)), token=(r"val", r"2|range|class"))
_lab("string_labels", "unicode string labels", "train", lambda X, y: (X, np.array(["a", "b"])[y]),
     token=(r"train_labels", r"integer|dtype|string"))
_lab("nan_labels", "float labels with a NaN", "test",
     lambda X, y: (X, np.where(np.arange(len(y)) == 1, np.nan, y.astype(float))),
     token=(r"test_labels", r"NaN|integer|finite"))
_lab("zero_d_labels", "a 0-d labels array", "train", lambda X, y: (X, np.array(1)),
     token=(r"train_labels", r"0-d|scalar|1-D|shape|dimension"))
_lab("bool_labels", "boolean labels", "train", lambda X, y: (X, y.astype(bool)), expect="either",
     token=(r"train_labels",))
_lab("huge_int_labels", "labels 2**40", "test", lambda X, y: (X, y * (2 ** 40)), token=(r"test", r"range|class"))
_lab("complex_labels", "complex labels", "train", lambda X, y: (X, y.astype(complex)),
     token=(r"train_labels", r"integer|dtype|complex"))
_lab("structured_labels", "structured-dtype labels", "val",
     lambda X, y: (X, np.array([(v, v) for v in y], dtype=[("a", "i8"), ("b", "i8")])),
     token=(r"val_labels", r"integer|dtype|structured"))
_lab("uint8_labels", "uint8 labels (fine)", "train", lambda X, y: (X, y.astype(np.uint8)), expect="ok")
_lab("short_labels", "test labels 2 shorter than features", "test", lambda X, y: (X, y[:-2]),
     token=(r"test_labels", r"length|rows"))
_lab("empty_labels_file_vs_rows", "0 labels for 20 rows", "val", lambda X, y: (X, y[:0]),
     token=(r"val", r"length|rows|empty"))
_lab("onehot_three_class", "(N, 3) one-hot labels on a 3-class task", "train",
     lambda X, y: (X, np.eye(3, dtype=np.int64)[y]), task_kw={"class_names": ["a", "b", "c"]},
     token=(r"train_labels", r"1-D|one-dimensional|shape"))


# ==================================================================================================
# family: npy (corrupt, 0-d, 0-byte, truncated feature files)
# ==================================================================================================
def _npy(cid, doc, split, fn, expect="error", token=None, extra=(), timeout=60):
    token = token if token is not None else (rf"{split}_features",)
    case(cid, "npy", doc, build=simple_run(None, {"mut": mut_split(split, fn)}, extra=extra), expect=expect,
         token=token, timeout=timeout)


_npy("zero_d_features", "0-d features array", "train", lambda X, y: (np.array(1.0), y))
_npy("zero_byte_features", "0-byte features file", "test", lambda X, y: (b"", y))
_npy("truncated_features", "features file cut in half", "val", lambda X, y: (npy_bytes(X)[: len(npy_bytes(X)) // 2], y))
_npy("corrupt_header", "garbage bytes (with a secret) as features", "train",
     lambda X, y: (b"\x93NUMPY\x01\x00v\x00{'descr': <f4, " + FILE_SECRET.encode() + os.urandom(64), y))
_npy("not_npy_text", "a text file with a secret as features", "test", lambda X, y: (b"hello " + FILE_SECRET.encode(), y))
_npy("pickled_features", "pickled object array as features (never unpickle, never suggest allow_pickle)", "train",
     lambda X, y: (pickled_array(), y), token=(r"train_features", r"pickle"))
_npy("pickled_labels", "pickled object array as labels", "val", lambda X, y: (X, pickled_array()[:20]),
     token=(r"val_labels", r"pickle"))
_npy("one_d_features", "(N,) features", "train", lambda X, y: (X[:, 0].copy(), y))
_npy("three_d_features", "(N, 2, 2) features", "test", lambda X, y: (X.reshape(len(X), 2, 2), y), expect="either")
_npy("inf_features", "an inf in train features", "train", lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5,
                                                                              np.inf, X).astype(np.float32), y),
     token=(r"train", r"inf|finite|NaN"))
_npy("nan_features_test", "a NaN in test features", "test",
     lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 7, np.nan, X).astype(np.float32), y),
     token=(r"test", r"NaN|finite"))
_npy("dim_mismatch", "test has 5 features, train 4", "test",
     lambda X, y: (np.concatenate([X, X[:, :1]], axis=1), y), token=(r"test|train", r"4|5|dimension|feature"))
_npy("empty_split", "a test split with 0 rows", "test", lambda X, y: (X[:0], y[:0]), token=(r"test", r"empty|no |0 "))
_npy("features_is_dir", "test_features.npy is a directory", "test", lambda X, y: ("DIR", y))
_npy("npz_as_npy", "an .npz (zip) saved under the .npy name", "train",
     lambda X, y: (_npz_bytes(X), y))
_npy("huge_shape_header", "header claims 10^12 rows on a tiny file", "val",
     lambda X, y: (_huge_header(), y), timeout=40)
_npy("big_endian", "big-endian float32 features (fine)", "train", lambda X, y: (X.astype(">f4"), y), expect="ok")
_npy("fortran_order", "Fortran-ordered features (fine)", "train", lambda X, y: (np.asfortranarray(X), y), expect="ok")
_npy("float16", "float16 features (fine)", "test", lambda X, y: (X.astype(np.float16), y), expect="ok")
_npy("int_features", "integer features", "val", lambda X, y: ((X * 10).astype(np.int32), y), expect="either")
_npy("object_strings_nopickle", "features as a unicode string array", "train",
     lambda X, y: (np.array([["a"] * 4] * len(X)), y), token=(r"train_features", r"number|numeric|dtype|float"))


def _npz_bytes(X):
    import io

    buf = io.BytesIO()
    np.savez(buf, X=X)
    return buf.getvalue()


def _huge_header():
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 4), }"
    hdr = hdr + " " * (63 - (len(hdr) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 64


def _symlink_secret_features(sb: SB):
    sb.emb_set(mut=mut_split("train", lambda X, y: (sb.secret_file, y)))
    return sb.args(sb.task())


case("features_symlink_secret", "npy", "train_features.npy is a symlink to a secret text file",
     build=_symlink_secret_features, token=(r"train_features",))


# ==================================================================================================
# family: overlap (split definitions and rows shared across splits)
# ==================================================================================================
OVL = r"overlap|identical|same|shared|duplicate"


def _ovl(cid, doc, expect, token, flags=None, splits=None, mut=None, extra=(), report=False, task_kw=None):
    kw = dict(task_kw or {})
    if splits:
        kw["splits"] = splits
    case(cid, "overlap", doc, build=simple_run(kw, {"mut": mut} if mut else None, extra=extra, report=report,
                                               quiet=False),
         expect=expect, token=token, flags=flags or {})


_ovl("val_eq_test_name", "splits {val: test, test: test}: T fitted on the evaluation split", "error",
     (r"val", r"test"), splits={"train": "train", "val": "test", "test": "test"})
_ovl("train_eq_test_name", "splits {test: train}", "flag", (r"train", r"test"),
     flags={"console": OVL, "summary": OVL}, splits={"train": "train", "val": "val", "test": "train"})
_ovl("train_eq_val_name", "splits {val: train}", "flag", (r"train", r"val"),
     flags={"console": OVL, "summary": OVL}, splits={"train": "train", "val": "train", "test": "test"})
_ovl("all_three_same", "train = val = test", "error", (r"val", r"test"),
     splits={"train": "train", "val": "train", "test": "train"})
_ovl("val_test_identical_files", "val files are byte copies of the test files", "error", (r"val", r"test"),
     mut=lambda a: a.__setitem__("val", [a["test"][0].copy(), a["test"][1].copy()]))
_ovl("val_test_permuted", "val = test rows in another order", "error", (r"val", r"test"),
     mut=lambda a: a.__setitem__("val", [a["test"][0][::-1].copy(), a["test"][1][::-1].copy()]))


def _symlink_val(sb: SB):
    root = sb.emb_set()
    folder = root / "MyData"
    for kind in ("features", "labels"):
        (folder / f"val_{kind}.npy").unlink()
        (folder / f"val_{kind}.npy").symlink_to(folder / f"test_{kind}.npy")
    return sb.args(sb.task(), quiet=False)


case("val_symlink_test", "overlap", "val_*.npy are symlinks to test_*.npy", build=_symlink_val, expect="error",
     token=(r"val", r"test"))


def _copy_rows(src, dst, k):
    def mut(a):
        X, y = a[dst]
        Xs, ys = a[src]
        X = X.copy(); y = y.copy()
        X[:k], y[:k] = Xs[:k], ys[:k]
        a[dst] = [X, y]
    return mut


_ovl("partial_train_test", "5 test rows copied into train", "flag", (r"train", r"test"),
     flags={"console": OVL, "summary": OVL}, mut=_copy_rows("test", "train", 6), report=True)
_ovl("partial_val_test", "5 test rows copied into val", "flag", (r"val", r"test"),
     flags={"console": OVL, "summary": OVL}, mut=_copy_rows("test", "val", 6))
_ovl("one_row_train_test", "a single test row duplicated into train", "flag", (r"train", r"test"),
     flags={"console": OVL, "summary": OVL}, mut=_copy_rows("test", "train", 1))
_ovl("val_eq_test_limit", "val = test with --limit 10", "error", (r"val", r"test"),
     splits={"train": "train", "val": "test", "test": "test"}, extra=("--limit", "10"))


def _allowed_val_test(sb: SB):
    key = ALLOW_KEY.get("key")
    if not key:
        raise Skip("no task key to allow val = test was found in `prism-run ls task-keys` / validate")
    sb.emb_set()
    t = sb.task(splits={"train": "train", "val": "test", "test": "test"}, **{key: ALLOW_KEY["value"]})
    return sb.args(t, quiet=False)


ALLOW_KEY: dict[str, Any] = {}
case("val_eq_test_allowed", "overlap", "val = test with the explicit allow key: runs and records the choice",
     build=_allowed_val_test, expect="ok", flags={"summary": OVL + r"|allow"})


def _api(cid, family, doc, code, token=(), expect="error"):
    prelude = ("import numpy as np\nfrom prism_plugin import evaluate\nrng=np.random.default_rng(0)\n"
               "X=rng.normal(size=(40,4)).astype('float32'); y=np.arange(40)%2; X[np.arange(40),y]+=2\n"
               "kw=dict(fractions=[1.0], seeds=[42])\n")
    case(cid, family, doc, build=lambda sb: [prelude + code], python=True, expect=expect, token=token, timeout=60)


_api("api_test_none", "overlap", "evaluate(train, val, None)", "evaluate((X,y),(X[:20],y[:20]),None,**kw)",
     token=(r"test",))
_api("api_val_is_test", "overlap", "evaluate(train, val=test arrays, test): refused or warned",
     "import warnings\nwith warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
     "    evaluate((X,y),(X[:20],y[:20]),(X[:20],y[:20]),**kw)\n"
     "print('WARNINGS:', ' | '.join(str(x.message) for x in w))",
     token=(r"val", r"test"), expect="either")
CASES[-1].check = lambda sb, r: (None if re.search(r"WARNINGS:.*(" + OVL + ")", r.stdout, re.I | re.S)
                                 else "val = test accepted without a warning")
_api("api_onehot", "labels", "evaluate with one-hot train labels", "evaluate((X,np.eye(2)[y]),(X,y),(X,y),**kw)",
     token=(r"train", r"1-D|one-dimensional|shape"))
_api("api_float_labels", "labels", "evaluate with 0.5 labels", "evaluate((X,y*0.5),(X,y),(X,y),**kw)",
     token=(r"train", r"integer"))


# ==================================================================================================
# family: degenerate features
# ==================================================================================================
def _deg(cid, doc, fn_all=None, expect="flag", token=(), flags=None, task_kw=None, check=None, report=False,
         emb_kw=None):
    def mut(a):
        for s in list(a):
            a[s] = list(fn_all(s, *a[s]))
    kw = dict(emb_kw or {})
    if fn_all:
        kw["mut"] = mut
    case(cid, "degenerate", doc, build=simple_run(task_kw, kw, quiet=False, report=report), expect=expect,
         token=token, flags=flags or {}, check=check)


ZERO = r"zero"
_deg("zero_rows_test", "5 test rows are all zeros",
     lambda s, X, y: ((X * (np.arange(len(X)) >= 5)[:, None]).astype(np.float32) if s == "test" else X, y),
     flags={"console": ZERO, "summary": ZERO}, token=(r"test", ZERO))
_deg("zero_rows_train", "6 train rows are all zeros",
     lambda s, X, y: ((X * (np.arange(len(X)) >= 6)[:, None]).astype(np.float32) if s == "train" else X, y),
     flags={"console": ZERO, "summary": ZERO}, token=(r"train", ZERO))
_deg("all_zero", "every feature of every split is zero", lambda s, X, y: (np.zeros_like(X), y),
     flags={"console": r"zero|constant", "summary": r"zero|constant"}, token=(r"zero|constant",))
_deg("constant_rows", "every row is the same vector", lambda s, X, y: (np.ones_like(X) * 0.3, y),
     flags={"console": r"constant|identical", "summary": r"constant|identical"}, token=(r"constant|identical",))
SCALE = r"scale|extreme|overflow|magnitude|large"
_deg("scale_1e37", "separable features x 1e37 (AUROC 0.5, ECE 0 today)", lambda s, X, y: (X * np.float32(1e37), y),
     flags={"console": SCALE, "summary": SCALE}, token=(SCALE,), report=True)
_deg("scale_1e20", "separable features x 1e20", lambda s, X, y: (X * np.float32(1e20), y),
     flags={"console": SCALE, "summary": SCALE}, token=(SCALE,))
_deg("scale_1e30_float64", "float64 features x 1e30", lambda s, X, y: (X.astype(np.float64) * 1e30, y),
     flags={"console": SCALE, "summary": SCALE}, token=(SCALE,))
_deg("scale_tiny", "features x 1e-30 (collapse)", lambda s, X, y: (X * np.float32(1e-30), y), expect="either",
     flags={"console": r"scale|small|collaps|constant|zero"})
ONE = r"one class|single class|only one|1 class"
_deg("one_class_test", "the test split has one class", lambda s, X, y: (X, np.zeros_like(y) if s == "test" else y),
     flags={"console": ONE, "summary": ONE + r"|single_class"}, token=(r"test", ONE))
_deg("one_class_train", "the train split has one class", lambda s, X, y: (X, np.zeros_like(y) if s == "train" else y),
     expect="error", token=(r"train", ONE + r"|class"))
_deg("one_class_val", "the val split has one class", lambda s, X, y: (X, np.zeros_like(y) if s == "val" else y),
     expect="either", flags={"console": r"val"})
_deg("test_one_row", "the test split has a single row", None, expect="either", emb_kw={"n": (40, 20, 1)},
     flags={"console": ONE + r"|one row|1 row|single"})
_deg("constant_one_column", "one constant column among good ones (fine)",
     lambda s, X, y: (np.concatenate([X, np.ones((len(X), 1), np.float32)], 1), y), expect="ok")
_deg("one_class_test_multiclass", "3-class task, test split has class 2 only",
     lambda s, X, y: (X, np.full_like(y, 2) if s == "test" else y), task_kw={"class_names": ["a", "b", "c"]},
     emb_kw={"k": 3, "n": (60, 30, 30)}, flags={"console": ONE, "summary": ONE + r"|single_class"},
     token=(r"test", ONE))


# ==================================================================================================
# family: convergence
# ==================================================================================================
CONV = r"converg"


def _conv(cid, doc, probe, expect="flag", token=(r"max_iter",), extra=(), report=True, flags=None):
    case(cid, "convergence", doc, build=simple_run({"probe": probe}, {"n": (200, 60, 60), "d": 16, "shift": 0.7},
                                                   extra=extra, report=report, quiet=False),
         expect=expect, token=token, flag_if=not_converged,
         flags=flags if flags is not None else {"console": CONV, "summary": CONV, "report": CONV})


_conv("max_iter_1", "probe.max_iter=1 (lbfgs stops early)", {"kind": "logistic", "C": 1.0, "max_iter": 1})
_conv("max_iter_3_C100", "probe.max_iter=3 with C=100", {"kind": "logistic", "C": 100.0, "max_iter": 3})
_conv("max_iter_1_torch", "max_iter=1 on the torch backend", {"kind": "logistic", "C": 1.0, "max_iter": 1,
                                                              "backend": "torch"}, expect="either")
_conv("max_iter_0", "probe.max_iter=0", {"kind": "logistic", "max_iter": 0}, expect="error", report=False)
_conv("max_iter_negative", "probe.max_iter=-5", {"kind": "logistic", "max_iter": -5}, expect="error", report=False)
_conv("max_iter_string", "probe.max_iter='many'", {"kind": "logistic", "max_iter": "many"}, expect="error",
      report=False)
_conv("max_iter_float", "probe.max_iter=2.5", {"kind": "logistic", "max_iter": 2.5}, expect="either", report=False,
      flags={})


# ==================================================================================================
# family: tbound (temperature at a search bound, NLL worse after scaling)
# ==================================================================================================
BOUND = r"bound"
NLLW = r"NLL[^.\n]{0,80}(wors|increas|higher|rose)|nll_worse|(wors|increas)[^.\n]{0,40}NLL"


def _tb(cid, doc, task_kw, expect="flag", token=(r"temperature_bounds",), flags=None, emb_kw=None, report=True,
        flag_if=t_at_bound):
    case(cid, "tbound", doc, build=simple_run(task_kw, emb_kw or {"n": (120, 60, 60)}, report=report, quiet=False),
         expect=expect, token=token, flag_if=flag_if,
         flags=flags if flags is not None else {"console": BOUND, "summary": BOUND, "report": BOUND})


_tb("C_tiny", "probe.C=1e-4: T pinned at the lower bound 0.1", {"probe": {"kind": "logistic", "C": 1e-4}})
_tb("C_0_01", "probe.C=0.01", {"probe": {"kind": "logistic", "C": 0.01}})
_tb("narrow_bounds", "temperature_bounds [0.99, 1.01]", {"temperature_bounds": [0.99, 1.01]})
_tb("upper_bound", "overconfident probe (C=1e4, noisy labels) with bounds [0.1, 1.2]",
    {"probe": {"kind": "logistic", "C": 1e4}, "temperature_bounds": [0.1, 1.2]},
    emb_kw={"n": (60, 60, 60), "d": 32, "shift": 0.3})
_tb("reversed_bounds", "temperature_bounds [5, 1]", {"temperature_bounds": [5, 1]}, expect="error", report=False)
_tb("zero_lower_bound", "temperature_bounds [0, 10]", {"temperature_bounds": [0, 10]}, expect="error", report=False)
_tb("negative_bound", "temperature_bounds [-1, 10]", {"temperature_bounds": [-1, 10]}, expect="error", report=False)
_tb("equal_bounds", "temperature_bounds [1, 1]", {"temperature_bounds": [1, 1]}, expect="either", report=False,
    flags={})
_tb("string_bounds", "temperature_bounds 'wide'", {"temperature_bounds": "wide"}, expect="error", report=False)
_tb("three_bounds", "temperature_bounds [0.1, 1, 10]", {"temperature_bounds": [0.1, 1, 10]}, expect="error",
    report=False)


def _nll_worse(a):
    """val perfectly separable (T fitted small: sharpen), test with shuffled labels: sharpening hurts test NLL."""
    rng = np.random.default_rng(5)
    Xv, yv = a["val"]
    Xv = Xv.copy(); Xv[np.arange(len(yv)), yv] += 6
    Xt, yt = a["test"]
    a["val"] = [Xv, yv]
    a["test"] = [Xt, rng.permutation(yt)]


_tb("nll_worse", "test NLL rises after scaling (val easy, test labels noisy)", {},
    flags={"console": NLLW, "summary": r"nll", "report": r"NLL"}, emb_kw={"n": (120, 60, 60), "mut": _nll_worse},
    flag_if=nll_got_worse)


# ==================================================================================================
# family: transfer (src/tgt link, label maps)
# ==================================================================================================
def _transfer(sb: SB, **kw):
    sb.emb_set()
    sb.emb_set(dataset="Other", seed=2)
    sb.task("srct", file="srct.yaml")
    sb.task("tgtt", file="tgtt.yaml", dataset="Other")
    d = {"task": "xfer", "kind": "transfer", "source_task": "srct", "target_task": "tgtt",
         "class_names": ["a", "b"], "label_fractions": [0.5, 1.0], "seeds": [42]}
    d.update(kw)
    d = {k: v for k, v in d.items() if v is not None}
    path = sb.tasks / "xfer.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def _xcase(cid, doc, kw, expect="error", token=(), validate=False, quiet_libs=False, check=None, report=False):
    def build(sb: SB):
        t = _transfer(sb, **kw)
        if validate:
            return ["validate", str(t), "--include-path", str(sb.tasks)]
        return sb.args(t, report=report, quiet=False, extra=["--include-path", str(sb.tasks)])
    case(cid, "transfer", doc, build=build, expect=expect, token=token, quiet_libs=quiet_libs, check=check)


_xcase("src_mismatch", "src: Wrong while the source task's dataset is MyData", {"src": "Wrong", "tgt": "Other"},
       token=(r"Wrong", r"MyData"))
_xcase("src_mismatch_validate", "the same, with prism-run validate", {"src": "Wrong", "tgt": "Other"},
       token=(r"Wrong", r"MyData"), validate=True)
_xcase("src_case_mismatch", "src: mydata (case differs)", {"src": "mydata", "tgt": "Other"}, expect="either",
       token=(r"mydata", r"MyData"))
_xcase("tgt_mismatch", "tgt: Wrong while the target dataset is Other", {"src": "MyData", "tgt": "Wrong"},
       expect="either", token=(r"Wrong", r"Other"))
_xcase("source_task_missing", "source_task: nope", {"source_task": "nope"}, token=(r"nope",))
_xcase("source_task_self", "source_task: xfer (itself)", {"source_task": "xfer"}, token=(r"xfer",))
_xcase("target_labels_out_of_range", "target_labels {positive: [7]} on a 2-class target (every row negative)",
       {"target_labels": {"positive": [7]}}, expect="flag", token=(r"target", r"7|label"))
CASES[-1].flags = {"console": r"one class|single class|\b7\b|no positive"}
_xcase("transfer_ok", "a consistent transfer (src/tgt right): no pandas fragmentation warnings",
       {"src": "MyData", "tgt": "Other"}, expect="ok", quiet_libs=True, report=True)
_xcase("transfer_no_kind", "source_task without kind: transfer", {"kind": None}, expect="error",
       token=(r"kind|transfer|source_task",))


# ==================================================================================================
# family: compare (models whose tasks are not reference datasets)
# ==================================================================================================
NOTCMP = r"not comparable|not ranked|unranked|excluded|refus|not one of the reference|cannot be compared"


def _compare_pre(sb: SB):
    sb.emb_set()
    t = sb.task("mine")
    sb.must(sb.args(t, out=sb.out / "res"))
    return ["compare", str(sb.out / "res")]


case("compare_nonreference_task", "compare", "compare a model run on a non-reference dataset (MyData)",
     build=_compare_pre, expect="flag", token=(r"MyData|reference",), flags={"stdout": NOTCMP}, quiet_libs=True)


def _compare_demo(sb: SB):
    sb.must(["--task", "prism_demo", "--model", "demo_vit", "--limit", "16", "--set", "label_fractions=[1.0]",
             "--set", "seeds=[42]", "--output", str(sb.out / "demo"), "--cache-dir", str(sb.cache), "--no-report",
             "--quiet", "--num-workers", "0"], timeout=240)
    return ["compare", str(sb.out / "demo")]


case("compare_demo_model", "compare", "compare the random-weight demo model (ranked above FMs today)",
     build=_compare_demo, expect="flag", token=(r"demo|Demo|reference",), flags={"stdout": NOTCMP}, timeout=120)
case("compare_missing_dir", "compare", "compare a folder that does not exist",
     build=lambda sb: ["compare", str(sb.sb / "nope")], token=(r"nope",))
case("compare_empty_dir", "compare", "compare an empty folder",
     build=lambda sb: (sb.out.mkdir(), ["compare", str(sb.out)])[1], token=(r"out|runs\.csv",))


def _compare_corrupt(sb: SB):
    sb.out.mkdir()
    (sb.out / "runs.csv").write_bytes(b"\x00\x01garbage," + FILE_SECRET.encode() + b"\n\xff\xfe,,\n")
    return ["compare", str(sb.out)]


case("compare_corrupt_runs", "compare", "compare a binary runs.csv holding a secret", build=_compare_corrupt,
     token=(r"runs\.csv",))


def _compare_cols(sb: SB):
    sb.out.mkdir()
    (sb.out / "runs.csv").write_text(f"model,dataset\nX,{FILE_SECRET}\n")
    return ["compare", str(sb.out)]


case("compare_missing_columns", "compare", "compare a runs.csv without metric columns", build=_compare_cols,
     token=(r"runs\.csv",))


# ==================================================================================================
# family: cells (edited / bit-rotted cell files, cells as a file)
# ==================================================================================================
def _cells_case(cid, doc, edit, expect="ok", token=(r"cells",)):
    def build(sb: SB):
        sb.emb_set()
        t = sb.task(seeds=[42, 123])
        a = sb.args(t)
        sb.must(a)
        sb.orig_runs = (sb.out / "runs.csv").read_bytes()
        cells = sorted((sb.out / "cells").glob("*.json"))
        if not cells:
            raise SetupError("no cells/*.json written by the first run")
        edit(sb, cells)
        return a

    def check(sb: SB, res: Result):
        now = (sb.out / "runs.csv").read_bytes() if (sb.out / "runs.csv").exists() else b""
        if b"0.123456" in now:
            return "the edited cell value 0.123456 reached runs.csv"
        if now != sb.orig_runs:
            return "runs.csv differs from the clean run's (the edited cell was reused or mixed in)"
        return None
    case(cid, "cells", doc, build=build, expect=expect, token=token, check=check)


def _edit_metric(sb, cells):
    d = json.loads(cells[0].read_text())
    d["row"]["auroc"] = 0.123456
    cells[0].write_text(json.dumps(d))


def _edit_text(sb, cells):
    txt = cells[0].read_text()
    m = re.search(r'"brier": 0\.(\d)', txt)
    if not m:
        raise SetupError("no brier value in the cell")
    d = m.group(1)
    cells[0].write_text(txt[:m.start(1)] + ("1" if d != "1" else "2") + txt[m.end(1):])


def _truncate(sb, cells):
    b = cells[0].read_bytes()
    cells[0].write_bytes(b[: len(b) // 2])


def _swap(sb, cells):
    shutil.copyfile(cells[0], cells[1])


def _cell_dir(sb, cells):
    cells[0].unlink()
    cells[0].mkdir()


def _cell_list(sb, cells):
    cells[0].write_text("[1, 2, 3]")


def _cell_bitflip(sb, cells):
    b = bytearray(cells[1].read_bytes())
    i = b.find(b'"f1_macro": ') + len(b'"f1_macro": ') + 3
    b[i] = ord("9") if b[i] != ord("9") else ord("8")
    cells[1].write_bytes(bytes(b))


def _cell_row_n_test(sb, cells):
    d = json.loads(cells[0].read_text())
    d["row"]["n_test"] = 999
    d["row"]["auroc"] = 0.123456
    cells[0].write_text(json.dumps(d, indent=1))


_cells_case("cell_metric_edited", "a cell's auroc edited to 0.123456 (valid JSON)", _edit_metric)
_cells_case("cell_digit_flipped", "one digit of brier flipped in the text", _edit_text)
_cells_case("cell_bitflip", "one byte of f1_macro changed", _cell_bitflip)
_cells_case("cell_truncated", "a cell cut in half (invalid JSON)", _truncate)
_cells_case("cell_copied_over_other", "cell A copied over cell B", _swap)
_cells_case("cell_is_directory", "a cell path is a directory", _cell_dir, expect="either")
_cells_case("cell_is_list", "a cell holds a JSON list", _cell_list)
_cells_case("cell_reformatted_edit", "cell re-serialised with indent and two values edited", _cell_row_n_test)


def _cells_file(sb: SB):
    sb.emb_set()
    t = sb.task()
    sb.out.mkdir()
    (sb.out / "cells").write_text("not a folder\n")
    return sb.args(t)


case("cells_is_file", "cells", "<output>/cells exists as a file", build=_cells_file, token=(r"cells",))


def _reliability_file(sb: SB):
    sb.emb_set()
    t = sb.task()
    sb.out.mkdir()
    (sb.out / "reliability").write_text("not a folder\n")
    return sb.args(t)


case("reliability_is_file", "cells", "<output>/reliability exists as a file", build=_reliability_file,
     token=(r"reliability",))


def _runs_csv_dir(sb: SB):
    sb.emb_set()
    t = sb.task()
    (sb.out / "runs.csv").mkdir(parents=True)
    return sb.args(t)


case("runs_csv_is_dir", "cells", "<output>/runs.csv exists as a directory", build=_runs_csv_dir,
     token=(r"runs\.csv",))


# ==================================================================================================
# family: grid (grid change into an existing results folder)
# ==================================================================================================
def _grid_case(cid, doc, change, first=None):
    def build(sb: SB):
        sb.emb_set()
        t = sb.task(seeds=[42, 123], **(first or {}))
        a = sb.args(t)
        sb.must(a)
        sb.orig_runs = (sb.out / "runs.csv").read_bytes()
        return a + change(sb)

    def kept(sb: SB, res: Result):
        for p in sb.out.rglob("runs.csv"):
            if p.read_bytes() == sb.orig_runs:
                return None
        return "the earlier results table was replaced: no runs.csv under --output still holds it"

    def err_check(sb: SB, res: Result):
        return kept(sb, res)
    case(cid, "grid", doc, build=build, expect="either", token=(r"--|grid|fraction|seed|exist|overwrite",),
         check=kept, err_check=err_check)


_grid_case("shrink_fractions", "--set label_fractions=[0.5] into a folder with the 2x2 grid",
           lambda sb: ["--set", "label_fractions=[0.5]"])
_grid_case("shrink_seeds", "--set seeds=[42] into a folder with 2 seeds", lambda sb: ["--set", "seeds=[42]"])
_grid_case("change_C", "--set probe.C=0.1 into the same folder", lambda sb: ["--set", "probe.C=0.1"])
_grid_case("change_limit", "--limit 10 into the same folder", lambda sb: ["--limit", "10"])
_grid_case("disjoint_fractions", "--set label_fractions=[0.25] (disjoint grid)",
           lambda sb: ["--set", "label_fractions=[0.25]"])


def _other_task_same_out(sb: SB):
    sb.emb_set()
    sb.emb_set(dataset="Other", seed=4)
    t = sb.task(seeds=[42, 123])
    a = sb.args(t)
    sb.must(a)
    sb.orig_runs = (sb.out / "runs.csv").read_bytes()
    u = sb.task("u", dataset="Other")
    return sb.args(u)


def _kept_any(sb, res):
    for p in sb.out.rglob("runs.csv"):
        if p.read_bytes() == sb.orig_runs:
            return None
    return "another task's run replaced the earlier results in the same --output without a word"


case("other_task_same_output", "grid", "a different task into the same --output", build=_other_task_same_out,
     expect="either", token=(r"--output|exist|overwrite|task",), check=_kept_any, err_check=_kept_any)


# ==================================================================================================
# family: killed (interrupted reruns; consistency of runs.csv / summary.json / report)
# ==================================================================================================
def _consistent(sb: SB, res: Result):
    """runs.csv, summary.json and report.md of --output describe the same grid (or the report marks a mismatch)."""
    import csv

    rp, sp, mp = sb.out / "runs.csv", sb.out / "summary.json", sb.out / "report.md"
    if not (rp.exists() and sp.exists()):
        return None
    with open(rp) as fh:
        rows = list(csv.DictReader(fh))
    try:
        summ = json.loads(sp.read_text())
    except ValueError:
        if re.search(r"summary\.json", res.text):
            return None
        return "exit 0 with a summary.json that is not valid JSON, and no word about it"
    fr_runs = sorted({float(r["fraction"]) for r in rows})
    fr_sum = sorted({float(c.get("fraction")) for c in summ.get("cells", []) if "fraction" in c})
    mark = mp.exists() and re.search(r"mismatch|stale|out of date|does not match|inconsistent|older", mp.read_text(),
                                     re.I)
    if (len(rows) != summ.get("n_runs") or fr_runs != fr_sum) and not mark:
        return (f"runs.csv has {len(rows)} runs at fractions {fr_runs}, summary.json says n_runs="
                f"{summ.get('n_runs')} at {fr_sum}, and report.md does not mark the mismatch")
    if mp.exists() and not mark:
        m = re.findall(r"(\d+) runs", mp.read_text())
        if m and str(len(rows)) not in m:
            return f"report.md speaks of {sorted(set(m))} runs, runs.csv has {len(rows)}"
    return None


def _swap_runs(sb: SB):
    sb.emb_set()
    t = sb.task(seeds=[42, 123])
    sb.must(sb.args(t, report=True))
    other = sb.sb / "other"
    sb.must(sb.args(t, out=other, extra=["--set", "label_fractions=[0.25]"]))
    shutil.copyfile(other / "runs.csv", sb.out / "runs.csv")  # killed after runs.csv, before summary/report
    return ["report", str(sb.out)]


case("runs_csv_newer_than_summary", "killed", "runs.csv of a new grid, summary.json of the old; prism-run report",
     build=_swap_runs, expect="either", token=(r"runs\.csv|summary\.json",), check=_consistent)


def _rerun_after_swap(sb: SB):
    sb.emb_set()
    t = sb.task(seeds=[42, 123])
    a = sb.args(t, report=True)
    sb.must(a)
    other = sb.sb / "other"
    sb.must(sb.args(t, out=other, extra=["--set", "label_fractions=[0.25]"]))
    shutil.copyfile(other / "runs.csv", sb.out / "runs.csv")
    return a


case("rerun_after_mixed_state", "killed", "rerun the original grid over a mixed runs.csv/summary.json state",
     build=_rerun_after_swap, expect="either", token=(r"runs\.csv|summary\.json|--",), check=_consistent)


def _summary_missing(sb: SB):
    sb.emb_set()
    t = sb.task()
    sb.must(sb.args(t, report=True))
    (sb.out / "summary.json").unlink()
    return ["report", str(sb.out)]


case("summary_missing_report", "killed", "summary.json deleted, then prism-run report", build=_summary_missing,
     expect="either", token=(r"summary\.json",), check=_consistent)


def _summary_corrupt(sb: SB):
    sb.emb_set()
    t = sb.task()
    sb.must(sb.args(t, report=True))
    (sb.out / "summary.json").write_text('{"task": "t", "n_runs": ' + FILE_SECRET + "\n")
    return ["report", str(sb.out)]


case("summary_corrupt_report", "killed", "summary.json truncated (with a secret), then prism-run report",
     build=_summary_corrupt, expect="either", token=(r"summary\.json",), check=_consistent)


def _runs_corrupt(sb: SB):
    sb.emb_set()
    t = sb.task()
    sb.must(sb.args(t))
    (sb.out / "runs.csv").write_bytes(b"model,auroc\n\x00\xff" + FILE_SECRET.encode() + b",x,y,z\n")
    return ["report", str(sb.out)]


case("runs_corrupt_report", "killed", "runs.csv replaced by garbage with a secret, then prism-run report",
     build=_runs_corrupt, expect="either", token=(r"runs\.csv",))


def _runs_deleted_rerun(sb: SB):
    sb.emb_set()
    t = sb.task(seeds=[42, 123])
    a = sb.args(t)
    sb.must(a)
    sb.orig_runs = (sb.out / "runs.csv").read_bytes()
    (sb.out / "runs.csv").unlink()
    return a


case("runs_deleted_rerun", "killed", "runs.csv deleted (cells kept), rerun: identical table",
     build=_runs_deleted_rerun, expect="ok",
     check=lambda sb, r: None if (sb.out / "runs.csv").read_bytes() == sb.orig_runs else "rerun runs.csv differs")


def _big_grid_task(sb: SB, fractions=(0.1, 0.25, 0.5, 0.75, 1.0), seeds=(42, 123, 456)):
    sb.emb_set(n=(2000, 200, 200), d=64, shift=0.3)
    return sb.task("big", label_fractions=list(fractions), seeds=list(seeds),
                   probe={"kind": "logistic", "C": 100.0, "max_iter": 5000})


def _kill_midway(sb: SB, argv: list[str], sig=signal.SIGKILL, when=None, max_wait=60.0, grace=20.0,
                 group=False) -> Result:
    """Start ``prism-run argv``; once ``when()`` holds, send ``sig`` to the main process only (as ``kill`` would)."""
    t0 = time.monotonic()
    p = sb.popen(argv)
    chunks = {"out": [], "err": []}

    def reader(stream, key):
        for chunk in iter(lambda: stream.read(4096), b""):
            chunks[key].append(chunk)

    th = [threading.Thread(target=reader, args=(p.stdout, "out"), daemon=True),
          threading.Thread(target=reader, args=(p.stderr, "err"), daemon=True)]
    for t in th:
        t.start()
    fired = False
    while time.monotonic() - t0 < max_wait and p.poll() is None:
        if when is None or when():
            try:
                if group:
                    os.killpg(p.pid, sig)
                else:
                    os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
            fired = True
            break
        time.sleep(0.05)
    notes = [] if fired else ["the run finished before the kill point"]
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    t1 = time.monotonic()
    for t in th:
        t.join(timeout=max(0.0, grace - (time.monotonic() - t1)))
    pipes_open = any(t.is_alive() for t in th)
    alive = _session_procs(p.pid)
    res = Result(p.returncode, b"".join(chunks["out"]).decode("utf-8", "replace"),
                 b"".join(chunks["err"]).decode("utf-8", "replace"), time.monotonic() - t0,
                 timed_out=pipes_open and not alive, notes=notes)
    if alive:
        res.orphans = alive
    if pipes_open and not alive:
        res.notes.append("stdout/stderr pipes stayed open")
    _killpg(p.pid)
    for t in th:
        t.join(timeout=2)
    return res


def _n_cells(sb: SB, k=1):
    return lambda: (sb.out / "cells").is_dir() and len(list((sb.out / "cells").glob("*.json"))) >= k


def _signal_case(cid, doc, sig, jobs=2):
    def build(sb: SB):
        sb.kill_task = _big_grid_task(sb)
        return None

    def custom(sb: SB):
        argv = sb.args(sb.kill_task, extra=["--jobs", str(jobs)])
        res = _kill_midway(sb, argv, sig=sig, when=_n_cells(sb, 1), max_wait=120)
        res.cmd = "prism-run " + " ".join(a.replace(str(sb.sb), "$SB") for a in argv) + f"  (then kill -{sig.name})"
        # the parent got the signal: a negative rc is expected here, not a defect
        if res.rc in (-sig, 128 + sig):
            res.rc = 0
        # a SIGTERMed run may print one line; a traceback from a worker is still judged
        return res
    case(cid, "killed", doc, build=build, custom=custom, expect="ok", timeout=150)


_signal_case("sigterm_jobs2", "SIGTERM to the parent of a --jobs 2 run: workers die, pipes close", signal.SIGTERM)
_signal_case("sigkill_jobs2", "kill -9 of the parent of a --jobs 2 run: workers die, pipes close", signal.SIGKILL)
_signal_case("sigint_jobs2", "SIGINT (Ctrl-C) to the parent of a --jobs 2 run", signal.SIGINT)


def _killed_rerun_consistency(sb: SB):
    _big_grid_task(sb)
    t = sb.task("big", file="big.yaml", label_fractions=[0.5, 1.0], seeds=[42, 123],
                probe={"kind": "logistic", "C": 100.0, "max_iter": 5000})
    a = sb.args(t, report=True)
    sb.must(a, timeout=240)
    b = a + ["--set", "label_fractions=[0.1,0.25,0.5,0.75,1.0]", "--set", "seeds=[42,123,456]"]
    r = _kill_midway(sb, b, when=_n_cells(sb, 6), max_wait=200)
    sb.setup_notes += [f"setup kill: {n}" for n in r.notes] + [f"setup kill left processes: {r.orphans[:2]}"] * bool(r.orphans)
    return ["report", str(sb.out)]


case("killed_rerun_then_report", "killed", "rerun with a bigger grid killed midway, then prism-run report: "
     "runs.csv/summary.json/report agree or are marked", build=_killed_rerun_consistency, expect="either",
     token=(r"runs\.csv|summary\.json|incomplete|interrupted|rerun",), check=_consistent, timeout=120)


def _demo_tiles_kill(sb: SB):
    demo = ["--task", "prism_demo", "--model", "demo_vit", "--limit", "8", "--set", "label_fractions=[1.0]",
            "--set", "seeds=[42]", "--output", str(sb.out), "--cache-dir", str(sb.cache), "--no-report", "--quiet",
            "--num-workers", "0"]

    def generating():
        for base in (sb.envcache, sb.cache):
            d = base / "datasets"
            if d.is_dir() and any(p.name.startswith(".") or "tmp" in p.name for p in d.iterdir()):
                return True
        return False
    t0 = time.monotonic()
    r = _kill_midway(sb, demo, when=lambda: generating() or time.monotonic() - t0 > 8, max_wait=30, group=True)
    sb.setup_notes += [f"setup kill: {n}" for n in r.notes] + (["killed while generating tiles"] if generating() else
                                                               ["killed before tile generation was seen"])
    sb.demo_args = demo
    return demo


def _no_hidden_tmp(sb: SB, res: Result):
    left = [str(p.relative_to(sb.sb)) for base in (sb.envcache, sb.cache) if base.is_dir()
            for p in base.rglob("*") if p.is_dir() and (p.name.startswith(".") or p.name.startswith("tmp"))]
    return f"hidden temporary folder(s) left after the rerun: {left[:3]}" if left else None


case("demo_tiles_killed", "killed", "kill -9 during demo tile generation, rerun: no hidden temp folder remains",
     build=_demo_tiles_kill, expect="ok", check=_no_hidden_tmp, timeout=240)


# ==================================================================================================
# family: cache (read-only caches, cache paths)
# ==================================================================================================
DEMO = ["--task", "prism_demo", "--model", "demo_vit", "--limit", "8", "--set", "label_fractions=[1.0]",
        "--set", "seeds=[42]", "--no-report", "--quiet", "--num-workers", "0"]


def _ro_env_cache(sb: SB):
    sb.envcache.mkdir(parents=True, exist_ok=True)
    os.chmod(sb.envcache, 0o555)
    return DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.cache)]


def _advice_followed(sb: SB, res: Result):
    line = line_err(res)[0] or ""
    if re.search(r"pass --cache-dir|use --cache-dir", line):
        return "the error advises --cache-dir, which this command already passes (demo tiles ignore it)"
    return None


case("ro_env_cache_writable_cachedir", "cache", "read-only $PRISM_CACHE_DIR beside a writable --cache-dir (demo)",
     build=_ro_env_cache, expect="either", token=(r"envcache|PRISM_CACHE_DIR",), timeout=240,
     err_check=_advice_followed)


def _ro_cachedir(sb: SB):
    sb.cache.mkdir(parents=True, exist_ok=True)
    os.chmod(sb.cache, 0o555)
    return DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.cache)]


case("ro_cachedir", "cache", "read-only --cache-dir (demo)", build=_ro_cachedir, token=(r"cache",), timeout=240)


def _ro_cache_parent(sb: SB):
    ro = sb.sb / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    sb.allowed.append(ro)
    return DEMO + ["--output", str(sb.out), "--cache-dir", str(ro / "new")]


case("ro_cache_parent", "cache", "--cache-dir under a read-only parent", build=_ro_cache_parent,
     token=(r"ro/new|ro\b|cache",), timeout=240)


def _ro_home(sb: SB):
    sb.env_extra["PRISM_CACHE_DIR"] = None
    os.chmod(sb.home / ".cache", 0o555)
    os.chmod(sb.home, 0o555)
    os.chmod(sb.xdg, 0o555)
    return DEMO + ["--output", str(sb.out)]


case("ro_home_default_cache", "cache", "no cache flags, read-only HOME (default ~/.cache/prism-plugin)",
     build=_ro_home, expect="error", token=(r"home|cache",), timeout=240)


def _cache_is_file(sb: SB):
    (sb.sb / "afile").write_text("x\n")
    return DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.sb / "afile")]


case("cachedir_is_file", "cache", "--cache-dir is a file", build=_cache_is_file, token=(r"afile",))


def _env_cache_is_file(sb: SB):
    sb.env_extra["PRISM_CACHE_DIR"] = str(sb.sb / "afile")
    (sb.sb / "afile").write_text("x\n")
    return DEMO + ["--output", str(sb.out)]


case("env_cache_is_file", "cache", "$PRISM_CACHE_DIR is a file, no --cache-dir", build=_env_cache_is_file,
     token=(r"afile|PRISM_CACHE_DIR",))


def _ro_output(sb: SB):
    sb.emb_set()
    t = sb.task()
    sb.out.mkdir()
    os.chmod(sb.out, 0o555)
    return sb.args(t)


case("ro_output", "cache", "read-only --output folder", build=_ro_output, token=(r"out",))


def _ro_output_parent(sb: SB):
    sb.emb_set()
    t = sb.task()
    ro = sb.sb / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    sb.allowed.append(ro)
    return sb.args(t, out=ro / "res")


case("ro_output_parent", "cache", "--output under a read-only parent", build=_ro_output_parent, token=(r"ro",))


def _ro_existing_results(sb: SB):
    sb.emb_set()
    t = sb.task()
    a = sb.args(t)
    sb.must(a)
    for p in [sb.out, *sb.out.rglob("*")]:
        if p.is_dir():
            os.chmod(p, 0o555)
    return a + ["--set", "seeds=[42,123]"]


case("ro_existing_results", "cache", "rerun into a read-only existing results tree", build=_ro_existing_results,
     token=(r"out",))


def _corrupt_cache_entry(sb: SB):
    a = DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.cache)]
    sb.must(a, timeout=240)
    sb.orig_runs = (sb.out / "runs.csv").read_bytes()
    shards = [p for p in sb.cache.rglob("*.npy") if "feat" in p.name or "shard" in p.name] or list(sb.cache.rglob("*.npy"))
    if not shards:
        raise SetupError("no cache shard found")
    b = bytearray(shards[0].read_bytes())
    b[-5] ^= 0xFF
    shards[0].write_bytes(bytes(b))
    return a


case("corrupt_cache_shard", "cache", "one byte of a cached shard flipped: detected and re-extracted",
     build=_corrupt_cache_entry, expect="ok", timeout=240,
     check=lambda sb, r: None if (sb.out / "runs.csv").read_bytes() == sb.orig_runs else "runs.csv changed")


def _fsize(sb: SB, limit: int):
    sb.fsize = limit
    sb.emb_set()
    return sb.args(sb.task(), report=True)


case("fsize_limit_output", "cache", "RLIMIT_FSIZE 20 kB (a full disk): writing figures/report fails (EFBIG)",
     build=lambda sb: _fsize(sb, 20_000), token=(r"out|/|File too large|space",))


def _fsize_demo(sb: SB):
    sb.fsize = 12_000
    return DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.cache)]


case("fsize_limit_demo_cache", "cache", "RLIMIT_FSIZE 12 kB during demo tiles + cache writes",
     build=_fsize_demo, token=(r"cache|/|File too large|space",), timeout=240, expect="either")


# ==================================================================================================
# family: device
# ==================================================================================================
def _dev(cid, doc, argv_extra, token=(r"--device|cuda|device",), expect="error", model="demo_vit", timeout=90):
    def build(sb: SB):
        if model == "precomputed":
            sb.emb_set()
            return sb.args(sb.task(), extra=argv_extra)
        return DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.cache)] + argv_extra

    def err_check(sb, res):
        return None if res.elapsed < 30 else f"the refusal took {res.elapsed:.0f} s"
    case(cid, "device", doc, build=build, expect=expect, token=token, timeout=timeout, err_check=err_check)


HAS_CUDA = os.path.exists("/dev/nvidia0")
if not HAS_CUDA:
    _dev("device_cuda", "--device cuda without CUDA", ["--device", "cuda"])
    _dev("device_cuda_index", "--device cuda:7", ["--device", "cuda:7"])
    _dev("model_args_device_cuda", "--model-args device=cuda", ["--model-args", "device=cuda"],
         token=(r"device|cuda",))
    _dev("device_cuda_precomputed", "--device cuda with --model precomputed (no extraction)", ["--device", "cuda"],
         expect="either", model="precomputed")
_dev("device_bogus", "--device tpu", ["--device", "tpu"], token=(r"--device|tpu",))
_dev("device_negative_index", "--device cuda:-1", ["--device", "cuda:-1"])
_dev("device_empty", "--device ''", ["--device", ""], expect="either", token=(r"--device",), model="precomputed")


# ==================================================================================================
# family: allsplit (a split folder named `all`, imagefolder layouts)
# ==================================================================================================
def _images(root: Path, splits=("train", "val", "test"), classes=("a", "b"), n=4, flat=False):
    from PIL import Image

    rng = np.random.default_rng(0)
    for s in ([""] if flat else splits):
        for ci, c in enumerate(classes):
            d = root / s / c if s else root / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                arr = (rng.random((32, 32, 3)) * 120 + ci * 100).astype(np.uint8)
                Image.fromarray(arr).save(d / f"{i}.png")


def _all_split(sb: SB):
    root = sb.data / "imgs"
    _images(root, splits=("all", "val", "test"))
    t = sb.task("imgs", source={"type": "imagefolder", "root": str(root)},
                splits={"train": "all", "val": "val", "test": "test"}, label_fractions=[1.0])
    return ["--task", str(t), "--model", "demo_vit", "--output", str(sb.out), "--cache-dir", str(sb.cache),
            "--no-report", "--quiet", "--num-workers", "0"]


case("split_folder_all", "allsplit", "imagefolder with a split folder named 'all' (_NoAll today)",
     build=_all_split, expect="either", token=(r"all",), timeout=180)


def _all_split_only(sb: SB):
    root = sb.data / "imgs"
    _images(root, splits=("all",))
    t = sb.task("imgs", source={"type": "imagefolder", "root": str(root)},
                splits={"train": "all", "val": "all", "test": "all"}, label_fractions=[1.0])
    return ["--task", str(t), "--model", "demo_vit", "--output", str(sb.out), "--cache-dir", str(sb.cache),
            "--no-report", "--quiet", "--num-workers", "0"]


case("split_folder_all_everywhere", "allsplit", "every split is the folder 'all' (also val = test)",
     build=_all_split_only, expect="error", token=(r"all|val|test",), timeout=180)


def _all_split_procedure(sb: SB):
    root = sb.data / "imgs"
    _images(root, splits=("all", "extra"), n=6)
    t = sb.task("imgs", source={"type": "imagefolder", "root": str(root)},
                split={"procedure": "stratified", "seed": 0, "from": "all",
                       "parts": {"tr": 0.5, "va": 0.25, "te": "rest"}},
                splits={"train": "tr", "val": "va", "test": "te"}, label_fractions=[1.0])
    return ["--task", str(t), "--model", "demo_vit", "--output", str(sb.out), "--cache-dir", str(sb.cache),
            "--no-report", "--quiet", "--num-workers", "0"]


case("split_from_all_with_all_folder", "allsplit", "split: {from: all} where a folder is literally named 'all'",
     build=_all_split_procedure, expect="either", token=(r"all",), timeout=180)


def _precomputed_all(sb: SB):
    sb.emb_set(splits=("all", "val", "test"))
    t = sb.task(splits={"train": "all", "val": "val", "test": "test"})
    return sb.args(t)


case("precomputed_split_all", "allsplit", "precomputed arrays named all_features.npy", build=_precomputed_all,
     expect="either", token=(r"all",))


def _flat_class_all(sb: SB):
    root = sb.data / "flat"
    _images(root, classes=("all", "b"), flat=True, n=8)
    t = sb.task("flat", source={"type": "imagefolder", "root": str(root), "layout": "flat"}, class_names=["all", "b"],
                split={"procedure": "stratified", "seed": 0, "from": "all",
                       "parts": {"tr": 0.5, "va": 0.25, "te": "rest"}},
                splits={"train": "tr", "val": "va", "test": "te"}, label_fractions=[1.0])
    return ["--task", str(t), "--model", "demo_vit", "--output", str(sb.out), "--cache-dir", str(sb.cache),
            "--no-report", "--quiet", "--num-workers", "0"]


case("flat_class_named_all", "allsplit", "flat layout with a class folder named 'all'", build=_flat_class_all,
     expect="either", token=(r"all",), timeout=180)


# ==================================================================================================
# family: validate (several problems, shadowing)
# ==================================================================================================
def _val(cid, doc, text_of, tokens, flags=None, extra_args=()):
    def build(sb: SB):
        files = text_of(sb)
        return ["validate", *map(str, files), *extra_args]
    case(cid, "validate", doc, build=build, expect="validate", token=tokens, flags=flags or {})


_val("several_wrong_types", "seeds, ece_bins, label_fractions, probe.C all of the wrong type",
     lambda sb: [sb.yaml_file("bad.yaml", BASE_TASK.replace("task: inc", "task: bad") +
                              "seeds: abc\nece_bins: x\nlabel_fractions: 5\nprobe: {kind: logistic, C: big}\n")],
     (r"seeds", r"ece_bins", r"label_fractions", r"probe\.C|\bC\b"))
_val("typos", "label_fraction and seed misspelt", lambda sb: [sb.yaml_file(
    "typo.yaml", BASE_TASK.replace("task: inc", "task: typo") + "label_fraction: [0.5]\nseed: [1]\n")],
     (r"label_fraction\b", r"label_fractions", r"\bseed\b"))
_val("two_bad_files", "two files, each with a problem", lambda sb: [
    sb.yaml_file("one.yaml", BASE_TASK.replace("task: inc", "task: one") + "ece_bins: -3\n"),
    sb.yaml_file("two.yaml", BASE_TASK.replace("task: inc", "task: two") + "binary_logits: wobbly\n")],
     (r"one\.yaml", r"two\.yaml", r"ece_bins", r"binary_logits"))
_val("missing_required", "no dataset, no splits, no class_names", lambda sb: [
    sb.yaml_file("bare.yaml", "task: bare\nsource: {type: precomputed}\n")], (r"dataset|splits|class",))
_val("wrong_types_nested", "source.type unknown, splits not a mapping, probe.kind unknown", lambda sb: [
    sb.yaml_file("nest.yaml", "task: nest\ndataset: D\nclass_names: [a, b]\nsource: {type: nosuch}\n"
                              "splits: [train, test]\nprobe: {kind: nosuchhead}\n")],
     (r"source\.type|nosuch\b", r"splits", r"probe\.kind|nosuchhead"))
_val("set_wrong_type", "validate --set seeds=abc --set ece_bins=x", lambda sb: [
    sb.yaml_file("ok.yaml", BASE_TASK.replace("task: inc", "task: okk"))], (r"seeds", r"ece_bins"),
     extra_args=("--set", "seeds=abc", "--set", "ece_bins=x"))
_val("lines_named", "problems carry file and line", lambda sb: [
    sb.yaml_file("ln.yaml", BASE_TASK.replace("task: inc", "task: ln") + "seeds: abc\nece_bins: x\n")],
     (r"ln\.yaml:\d+|line \d+",))


def _shadow_task(sb: SB):
    sb.task("prism_demo", file="prism_demo.yaml")
    return ["validate", "prism_demo", "--include-path", str(sb.tasks)]


case("shadow_builtin_task", "validate", "a user task named prism_demo in --include-path", build=_shadow_task,
     expect="validate", flags={"console": r"shadow|overrid|built-in|builtin|hides"})


def _shadow_group(sb: SB):
    sb.task("member")
    sb.yaml_file("prism_main.yaml", "group: prism_main\ntasks: [member]\n")
    return ["validate", "prism_main", "--include-path", str(sb.tasks)]


case("shadow_builtin_group", "validate", "a user group named prism_main in --include-path", build=_shadow_group,
     expect="validate", flags={"console": r"shadow|overrid|built-in|builtin|hides"})


def _shadow_run(sb: SB):
    sb.emb_set(dataset="MyData")
    sb.task("prism_demo", file="prism_demo.yaml")
    return ["--task", "prism_demo", "--include-path", str(sb.tasks), "--model", "precomputed", "--model-args",
            f"root={sb.emb / 'M'}", "--output", str(sb.out), "--cache-dir", str(sb.cache), "--no-report"]


case("shadow_builtin_run", "validate", "running a task that shadows prism_demo warns", build=_shadow_run,
     expect="ok", flags={"console": r"shadow|overrid|built-in|builtin|hides"})


def _shadow_transfer_member(sb: SB):
    sb.task("prism_demo_multiclass", file="pdm.yaml")
    return ["validate", "prism_demo_transfer", "--include-path", str(sb.tasks)]


case("shadow_builtin_via_transfer", "validate", "a user task shadows the target of a built-in transfer task",
     build=_shadow_transfer_member, expect="validate",
     flags={"console": r"shadow|overrid|built-in|builtin|hides"}, token=(r"prism_demo_multiclass",))


# ==================================================================================================
# family: umask (file modes of results and cache)
# ==================================================================================================
def _modes(root_of: Callable[[SB], list[Path]], want_bits: int, forbid_bits: int = 0):
    def check(sb: SB, res: Result):
        bad = []
        for root in root_of(sb):
            for p in [root, *root.rglob("*")] if root.exists() else []:
                if p.is_symlink():
                    continue
                m = stat.S_IMODE(p.lstat().st_mode)
                want = want_bits | ((0o111 & (want_bits >> 2)) if p.is_dir() else 0)
                if (m & want) != want or (m & forbid_bits):
                    bad.append(f"{p.relative_to(sb.sb)}={m:o}")
        return f"{len(bad)} path(s) with modes not following the umask: {bad[:4]}" if bad else None
    return check


def _umask_case(cid, doc, umask, want, forbid=0, demo=False, report=True, roots=None, pre=None):
    def build(sb: SB):
        sb.umask = umask
        if demo:
            return DEMO + ["--output", str(sb.out), "--cache-dir", str(sb.cache)]
        sb.emb_set()
        a = sb.args(sb.task(), report=report)
        if pre:
            return pre(sb, a)
        return a
    case(cid, "umask", doc, build=build, expect="ok", timeout=240 if demo else 90,
         check=_modes(roots or (lambda sb: [sb.out]), want, forbid))


_umask_case("umask022_results", "umask 022: results files 0644, folders 0755", 0o022, 0o644)
_umask_case("umask002_results", "umask 002: results group-writable", 0o002, 0o664)
_umask_case("umask077_results", "umask 077: nothing group/other-readable", 0o077, 0o600, forbid=0o077)
_umask_case("umask022_demo_cache", "umask 022: demo cache entries and manifests readable", 0o022, 0o644, demo=True,
            roots=lambda sb: [sb.out, sb.cache, sb.envcache])


def _report_rerun(sb: SB, a):
    sb.umask = None
    sb.must(a)
    sb.umask = 0o022
    return ["report", str(sb.out)]


_umask_case("umask022_report_cmd", "umask 022: prism-run report rewrites readable files", 0o022, 0o644,
            pre=_report_rerun, roots=lambda sb: [sb.out / "report.md", sb.out / "report.html"])


def _findings_umask(sb: SB, a):
    sb.umask = None
    sb.must(a)
    sb.umask = 0o022
    return ["findings", str(sb.out), "--output", str(sb.out / "findings")]


_umask_case("umask022_findings", "umask 022: findings output readable", 0o022, 0o644, pre=_findings_umask,
            roots=lambda sb: [sb.out / "findings"])


# ==================================================================================================
# family: warnings (pandas / torch noise on stderr)
# ==================================================================================================
def _w(cid, doc, build, timeout=120):
    case(cid, "warnings", doc, build=build, expect="ok", quiet_libs=True, timeout=timeout)


def _w_findings(sb: SB):
    sb.emb_set(); t = sb.task(seeds=[42, 123])
    sb.must(sb.args(t))
    return ["findings", str(sb.out), "--output", str(sb.out / "findings")]


def _w_report(sb: SB):
    sb.emb_set(); t = sb.task(seeds=[42, 123])
    sb.must(sb.args(t))
    return ["report", str(sb.out)]


def _w_transfer_findings(sb: SB):
    t = _transfer(sb, src="MyData", tgt="Other")
    sb.must(sb.args(t, extra=["--include-path", str(sb.tasks)]))
    return ["findings", str(sb.out), "--output", str(sb.out / "findings"), "--include-path", str(sb.tasks)]


def _w_transfer_report(sb: SB):
    t = _transfer(sb, src="MyData", tgt="Other")
    sb.must(sb.args(t, extra=["--include-path", str(sb.tasks)]))
    return ["report", str(sb.out), "--include-path", str(sb.tasks)]


def _w_mlp(sb: SB):
    sb.emb_set()
    return sb.args(sb.task(label_fractions=[1.0]), quiet=False, extra=["--probe", "mlp"])


def _w_group(sb: SB):
    sb.emb_set()
    sb.task("m1"); sb.task("m2", seeds=[123])
    g = sb.yaml_file("grp.yaml", "group: grp\ntasks: [m1, m2]\n")
    return sb.args(g, report=True, quiet=False, extra=["--include-path", str(sb.tasks)])


def _w_jobs(sb: SB):
    sb.emb_set()
    return sb.args(sb.task(label_fractions=[0.25, 0.5, 1.0]), quiet=False, extra=["--jobs", "2"])


def _w_torch_backend(sb: SB):
    sb.emb_set()
    return sb.args(sb.task(), quiet=False, extra=["--probe-backend", "torch"])


_w("findings_noise", "prism-run findings on a results folder", _w_findings)
_w("report_noise", "prism-run report on a results folder", _w_report)
_w("transfer_findings_noise", "findings on transfer results", _w_transfer_findings)
_w("transfer_report_noise", "report on transfer results", _w_transfer_report)
_w("mlp_probe_noise", "--probe mlp: no torch non-writable-array warning", _w_mlp, timeout=180)
_w("group_run_noise", "a group run with report", _w_group)
_w("jobs2_noise", "--jobs 2 run", _w_jobs)
_w("torch_backend_noise", "--probe-backend torch", _w_torch_backend)



# ==================================================================================================
# family: collapse (prevalence-aware collapse; PRISM's degenerate column kept as defined)
# ==================================================================================================
def _placed_test(n0: int, n1: int, c0_as_1: int, c1_as_0: int):
    """mut(): train/val clean clusters; a test split of n0 + n1 rows whose features sit in the chosen clusters."""
    def mut(a):
        rng = np.random.default_rng(11)

        def rows(cluster, m):
            X = rng.normal(size=(m, 4)).astype(np.float32) * 0.5
            X[:, cluster] += 4.0
            return X
        for s, m in (("train", 200), ("val", 60)):
            y = np.arange(m) % 2
            X = rng.normal(size=(m, 4)).astype(np.float32) * 0.5
            X[np.arange(m), y] += 4.0
            a[s] = [X, y.astype(np.int64)]
        X = np.concatenate([rows(0, n0 - c0_as_1), rows(1, c0_as_1), rows(0, c1_as_0), rows(1, n1 - c1_as_0)])
        y = np.array([0] * n0 + [1] * n1, dtype=np.int64)
        a["test"] = [X, y]
    return mut


def _summary_flags(sb: SB) -> tuple[dict, list[dict]]:
    paths = sorted(sb.out.rglob("summary.json"))
    if not paths:
        return {}, []
    d = json.loads(paths[0].read_text())
    flags = d.get("flags") or []
    return d, [f for f in flags if isinstance(f, dict)]


def _collapse_missed(sb: SB, res: Result):
    rows = runs_rows(sb)
    if rows and "collapsed" in rows[0] and not any(r["collapsed"] == "True" for r in rows):
        return "runs.csv: collapsed is False for a 0.988 share with zero minority recall"
    d, flags = _summary_flags(sb)
    said = d.get("collapsed_fractions") or any(re.search(r"collaps", f.get("flag", "")) and
                                               f.get("level") == "warning" for f in flags)
    if not said:
        return "summary.json calls nothing collapsed: a 0.988 share with zero minority recall passes"
    rep = report_text(sb) or ""
    if not re.search(r"collaps", rep, re.I):
        return "the report/verdict does not mention the collapse"
    if rows and any(r.get("degenerate") == "True" for r in rows):
        return "PRISM's degenerate column (> 0.99 share) fired at a 0.988 share: the reference definition changed"
    return None


def _collapse_near_right(sb: SB, res: Result):
    rows = runs_rows(sb)
    if rows and not all(r.get("degenerate") == "True" for r in rows):
        return ("PRISM's degenerate column is not True at a 0.993 share: the reference definition (> 0.99) "
                "must stay as it is")
    if rows and "collapsed" in rows[0] and any(r["collapsed"] == "True" for r in rows):
        return "runs.csv: collapsed is True on a 97.7 % target predicted 99.3 % with minority recall 2/7"
    d, flags = _summary_flags(sb)
    if any(f.get("flag") == "collapsed" and f.get("level") == "warning" for f in flags):
        return "summary.json flags a collapse on a nearly right prediction of a 97.7 % majority"
    return None


case("collapse_zero_minority_recall", "collapse", "test 96 % one class, 98.8 % predicted, minority recall 0",
     build=simple_run({"label_fractions": [1.0]}, {"mut": _placed_test(240, 10, 3, 10)}, report=True, quiet=False),
     expect="ok", check=_collapse_missed)
case("collapse_prevalence_977", "collapse", "test 97.7 % one class, 99.3 % predicted, minority recall 2/7",
     build=simple_run({"label_fractions": [1.0]}, {"mut": _placed_test(293, 7, 0, 5)}, report=True, quiet=False),
     expect="ok", check=_collapse_near_right)
case("collapse_total", "collapse", "uninformative test features: everything predicted as class 0",
     build=simple_run({"label_fractions": [1.0]}, {"mut": _placed_test(150, 50, 0, 50)}, report=True, quiet=False),
     expect="ok", check=lambda sb, r: None if re.search(r"collaps", r.text, re.I) else
     "a total collapse (minority recall 0) is not said on the console")


# ==================================================================================================
# family: fingerprint (a third-party adapter's checkpoint= must key the embedding cache)
# ==================================================================================================
CKPT_ADAPTER = """
import numpy as np
from prism_plugin.embed.adapter import Adapter, Preprocessing


class CkptAdapter(Adapter):
    name = "h6_ckpt"
    display_name = "H6Ckpt"
    licence = "MIT"
    embed_dim = 8
    preprocessing = Preprocessing(resize=16, crop=16, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                                  interpolation="bilinear")

    def __init__(self, *, checkpoint=None, **base):
        super().__init__(**base)
        self.checkpoint = checkpoint

    @classmethod
    def accepted_args(cls):
        return super().accepted_args() | {"checkpoint"}

    def build(self, device):
        import os
        import torch
        path = self.checkpoint
        if os.path.isdir(path):
            path = os.path.join(path, "model.bin")
        self.W = torch.tensor(np.load(path, allow_pickle=False), dtype=torch.float32, device=device)

    def forward(self, batch):
        return batch.float().mean(dim=(2, 3)) @ self.W
"""


def _install_ckpt_adapter(sb: SB) -> None:
    site = sb.sb / "site"
    (site / "h6_ckpt_adapter-0.1.dist-info").mkdir(parents=True)
    (site / "h6_ckpt_adapter.py").write_text(CKPT_ADAPTER)
    (site / "h6_ckpt_adapter-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: h6-ckpt-adapter\nVersion: 0.1\n")
    (site / "h6_ckpt_adapter-0.1.dist-info" / "entry_points.txt").write_text(
        "[prism_plugin.adapters]\nh6_ckpt = h6_ckpt_adapter:CkptAdapter\n")
    sb.env_extra["PYTHONPATH"] = str(site)


def _weights(seed):
    return np.random.default_rng(seed).normal(size=(3, 8)).astype(np.float32)


def _ckpt_case(cid, doc, folder: bool):
    def build(sb: SB):
        _install_ckpt_adapter(sb)
        wdir = sb.data / "w"
        wdir.mkdir()
        wfile = wdir / "model.bin" if folder else wdir / "w.npy"
        with open(wfile, "wb") as fh:
            np.save(fh, _weights(1))
        ck = wdir if folder else wfile
        base = ["--task", "prism_demo", "--model", "h6_ckpt", "--model-args", f"checkpoint={ck}", "--limit", "8",
                "--set", "label_fractions=[1.0]", "--set", "seeds=[42]", "--cache-dir", str(sb.cache),
                "--no-report", "--quiet", "--num-workers", "0"]
        sb.must(base + ["--output", str(sb.out / "first")], timeout=240)
        with open(wfile, "wb") as fh:  # the same path, other weights
            np.save(fh, _weights(2))
        sb.first_runs = (sb.out / "first" / "runs.csv").read_bytes()
        return base + ["--output", str(sb.out / "second")]

    def check(sb: SB, res: Result):
        summ = json.loads((sb.out / "second" / "summary.json").read_text())
        cache = json.dumps(summ.get("embedding_cache", {}))
        if "extracted" not in cache and (sb.out / "second" / "runs.csv").read_bytes() == sb.first_runs:
            return ("checkpoint rewritten with other weights, yet every split was a cache hit and runs.csv is "
                    "identical: stale embeddings reused")
        return None
    case(cid, "fingerprint", doc, build=build, expect="ok", check=check, timeout=180)


_ckpt_case("checkpoint_file_rewritten", "third-party adapter, checkpoint=FILE rewritten in place", folder=False)
_ckpt_case("checkpoint_folder_rewritten", "third-party adapter, checkpoint=DIR whose model.bin changes", folder=True)


# ==================================================================================================
# discovery and main
# ==================================================================================================
def discover_allow_key(base: Path) -> None:
    """The task key (if any) that explicitly allows val = test, from `prism-run ls task-keys`."""
    try:
        p = subprocess.run([str(PRISM), "ls", "task-keys"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PRISM_CACHE_DIR": str(base / "lscache")})
    except (OSError, subprocess.TimeoutExpired):
        return
    for line in p.stdout.splitlines():
        parts = line.split()
        if parts and re.search(r"overlap|same_split|val_is_test|allow_val|temperature_on_test|fit_on_test",
                               parts[0], re.I):
            ALLOW_KEY["key"] = parts[0]
            ALLOW_KEY["value"] = ["val", "test"] if "overlap" in parts[0] else True
            return
    # a schema key (not registered through task_keys)
    try:
        src = (REPO / "src" / "prism_plugin" / "tasks" / "schema.py").read_text()
    except OSError:
        return
    m = re.search(r"\"(allow_[a-z_]*(?:overlap|test)[a-z_]*)\"", src)
    if m:
        ALLOW_KEY["key"] = m.group(1)
        ALLOW_KEY["value"] = True


def global_state() -> dict[str, Any]:
    home_cache = Path(os.path.expanduser("~/.cache/prism-plugin"))
    st: dict[str, Any] = {}
    if home_cache.is_dir():
        st["home_cache"] = sorted((str(p), p.stat().st_mtime_ns) for p in home_cache.iterdir())
    for name in ("prism_results", "prism_findings"):
        st[name] = (REPO / name).exists() or (Path.cwd() / name).exists()
    st["pwned"] = Path("/tmp/h6battery-pwned").exists()
    st["escape"] = Path("/tmp/h6b-escape").exists()
    return st


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="families to run (comma-separated, repeatable)")
    ap.add_argument("--case", action="append", default=[], help="run cases whose id contains this (repeatable)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep every sandbox (printed at the end)")
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    only = {f for x in args.only for f in x.split(",") if f}
    cases = [c for c in CASES if (not only or c.family in only) and (not args.case or any(s in c.id for s in args.case))]
    if args.list:
        for c in cases:
            print(f"{c.family:12s} {c.id:34s} {c.expect:8s} {c.doc}")
        print(f"{len(cases)} cases")
        return 0
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="prism-battery-"))
    discover_allow_key(base)
    build_mpl_template(base)
    g0 = global_state()
    t0 = time.monotonic()
    print(f"{len(cases)} cases, {args.jobs} at a time, sandboxes under {base}"
          f"{'' if PRIV_PREFIX else ' (WARNING: no setpriv, read-only cases run with root override)'}", flush=True)
    verdicts: list[Verdict] = []
    lock = threading.Lock()

    def one(c: Case) -> Verdict:
        v = execute(c, base, args.keep)
        with lock:
            verdicts.append(v)
            mark = " " if v.outcome in ("clear", "ok", "skip") else "!"
            print(f"{mark} [{len(verdicts):3d}/{len(cases)}] {v.outcome:13s} {c.family:11s} {c.id:34s} "
                  f"{v.elapsed:5.1f}s  {v.detail[:150]}", flush=True)
        return v

    # slow cases first so the pool drains evenly
    order = sorted(cases, key=lambda c: -c.timeout)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, order))
    g1 = global_state()
    verdicts.sort(key=lambda v: CASES.index(v.case))
    counts: dict[str, int] = {}
    fam: dict[str, dict[str, int]] = {}
    for v in verdicts:
        counts[v.outcome] = counts.get(v.outcome, 0) + 1
        fam.setdefault(v.case.family, {}).setdefault(v.outcome, 0)
        fam[v.case.family][v.outcome] += 1
    print(f"\n== {len(verdicts)} cases in {time.monotonic() - t0:.0f} s ==")
    print("outcomes: " + ", ".join(f"{k}={counts[k]}" for k in OUTCOMES if k in counts))
    print("\nper family:")
    for f, d in fam.items():
        print(f"  {f:12s} " + ", ".join(f"{k}={d[k]}" for k in OUTCOMES if k in d))
    bad = [v for v in verdicts if v.outcome in BAD]
    if bad:
        print("\nnot clear / not ok:")
        for v in bad:
            print(f"  {v.case.id} [{v.outcome}] {v.cmd}\n      -> {v.detail}")
    noted = [v for v in verdicts if v.notes]
    if noted:
        print("\nnotes:")
        for v in noted:
            print(f"  {v.case.id}: {'; '.join(v.notes)[:300]}")
    if g0 != g1:
        changed = {k: (g0.get(k), g1.get(k)) for k in set(g0) | set(g1) if g0.get(k) != g1.get(k)}
        if set(changed) <= {"home_cache"}:
            print("\nnote: the real ~/.cache/prism-plugin changed during the battery (every case points HOME and "
                  "PRISM_CACHE_DIR into its sandbox: most likely another process on this machine)")
        else:
            print(f"\nGLOBAL STATE CHANGED outside the sandboxes: {changed}")
    if args.json:
        args.json.write_text(json.dumps([{"id": v.case.id, "family": v.case.family, "doc": v.case.doc,
                                          "expect": v.case.expect, "outcome": v.outcome, "detail": v.detail,
                                          "cmd": v.cmd, "elapsed": round(v.elapsed, 2), "notes": v.notes}
                                         for v in verdicts], indent=1))
        print(f"results: {args.json}")
    if args.keep:
        print(f"sandboxes kept under {base}")
    else:
        _rmtree(base)
    return 1 if bad or {k for k in g0 if g0.get(k) != g1.get(k)} - {"home_cache"} else 0


if __name__ == "__main__":
    sys.exit(main())
