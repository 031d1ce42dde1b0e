"""Chaos rounds on the demo: SIGKILL at random moments, concurrent runs, eviction while reading.

Not a unit test: a script that prints what it did and whether any output
differed from an uninterrupted run. Each round uses a fresh embedding cache
(the demo images are generated once into a private data folder)::

    python benchmarks/chaos.py --rounds 12            # ~10 min on 2 CPU cores
    python benchmarks/chaos.py --rounds 4 --seed 7

Round kinds, in turn:

* ``kill``: a cold run is SIGKILLed (with its DataLoader workers) 1-3 times at
  uniformly random moments within the reference run's wall time (start-up,
  extraction, grid or the final writes, whatever the dice say), then run to
  completion with the same arguments. Checks: runs.csv byte-identical to the
  reference, ``reused_cells`` = exactly the cells saved before the last start,
  tiles embedded by the last start = tiles not already in intact shards.
* ``grid-kill``: the same on a warm cache, with the kill inside the grid.
* ``concurrent``: three runs start together on one cold cache (two into the
  same results folder, which take turns with ``--wait``, one elsewhere) while this script loops
  ``cache verify`` and ``cache rm`` on the same cache. Checks: every run exits
  0, every runs.csv identical to the reference, no torn file, and every
  surviving cache entry verifies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SHARD = 16
# --wait: the concurrent round's two runs into one results folder take turns (one writer per results folder)
ARGS = ["--task", "prism_demo", "--model", "demo_vit", "--limit", "96", "--quiet", "--no-report", "--wait"]


def cli() -> list[str]:
    exe = Path(sys.executable).with_name("prism-run")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prism_plugin.cli"]


class Chaos:
    def __init__(self, work: Path, seed: int):
        self.work = work
        self.rng = random.Random(seed)
        self.env = {**os.environ, "PRISM_CACHE_DIR": str(work / "data"), "PRISM_SHARD_SIZE": str(SHARD),
                    "HF_HUB_OFFLINE": "1"}
        self.n = 0
        self.live: list[subprocess.Popen] = []
        self.stats = {"rounds": 0, "kills": 0, "phases": {}, "cells_reused": 0, "cells_total": 0,
                      "tiles_saved": 0, "tiles_total": 0, "differences": [], "concurrent_runs": 0,
                      "evictions": 0, "verifies": 0, "env_changes": 0}

    # -- processes ----------------------------------------------------------
    def start(self, cache: Path, out: Path) -> subprocess.Popen:
        self.n += 1
        log = open(self.work / f"run{self.n}.log", "wb")
        p = subprocess.Popen(cli() + ARGS + ["--cache-dir", str(cache), "--output", str(out)], env=self.env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        p.log = log  # type: ignore[attr-defined]
        self.live.append(p)
        return p

    def kill_all(self) -> None:
        """On the way out (Ctrl-C, error): stop every run this script started, by process group."""
        for p in self.live:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def finish(self, p: subprocess.Popen, timeout: float = 900) -> str:
        p.wait(timeout)
        p.log.close()
        text = Path(p.log.name).read_text(errors="replace")
        if p.returncode != 0 or "Traceback" in text or "internal error" in text:
            self.stats["differences"].append(f"run {p.log.name} failed (rc {p.returncode}): {text[-400:]}")
        return text

    def run(self, cache: Path, out: Path) -> float:
        t0 = time.monotonic()
        self.finish(self.start(cache, out))
        return time.monotonic() - t0

    def kill_point(self, warm: bool) -> tuple[str, float]:
        """A random kill point: a moment after start, or just after the i-th shard or j-th cell is
        written (+ a random 0-0.3 s), so kills land in every phase whatever the machine's speed."""
        events = [("cell", j) for j in range(1, self.n_cells)]
        if not warm:
            events += [("shard", i) for i in range(1, self.n_shards)] + [("time", 0)] * 4
        kind, n = self.rng.choice(events)
        if kind == "time":
            return "time", self.rng.uniform(0.5, 0.5 * self.t_cold)
        return kind, n + self.rng.uniform(0.0, 0.3)  # integer part: count; fraction: delay in s

    def kill_after(self, p: subprocess.Popen, point: tuple[str, float], cache: Path, out: Path) -> str:
        kind, value = point
        t0 = time.monotonic()
        count, delay = int(value), value - int(value)

        def reached() -> bool:
            if kind == "time":
                return time.monotonic() - t0 >= value
            if kind == "shard":
                return self.shards_written(cache) >= count
            return len(list((out / "cells").glob("*.json"))) >= count

        while not reached():
            if p.poll() is not None:
                p.log.close()
                return "finished first"
            time.sleep(0.005)
        if kind != "time":
            time.sleep(delay)
        phase = self.phase(cache, out)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        p.log.close()
        if p.returncode != -signal.SIGKILL:
            return "finished first"
        self.stats["kills"] += 1
        self.stats["phases"][phase] = self.stats["phases"].get(phase, 0) + 1
        return phase

    # -- state --------------------------------------------------------------
    @staticmethod
    def entries(cache: Path):
        from prism_plugin.embed.cache import EmbeddingCache

        return EmbeddingCache(cache).entries()

    def tiles_done(self, cache: Path) -> int:
        done = 0
        for e in self.entries(cache):
            if e.exists():
                done += int(e.manifest()["n"])
            else:
                for i in e.shards_on_disk():
                    try:
                        meta = json.loads(e.shard_meta_path(i).read_text())
                        fpath, lpath = e.shard_paths(i)
                        from prism_plugin.embed.cache import file_checksum

                        if (file_checksum(fpath) == meta["features_checksum"]
                                and file_checksum(lpath) == meta["labels_checksum"]):
                            done += int(meta["rows"])
                    except (OSError, ValueError, KeyError):
                        pass
        return done

    def shards_written(self, cache: Path) -> int:
        n = 0
        for e in self.entries(cache):
            if e.exists():
                try:
                    n += int(e.manifest().get("n_shards", 0))
                except Exception:  # noqa: BLE001 - removed meanwhile
                    pass
            else:
                n += len(e.shards_on_disk())
        return n

    def phase(self, cache: Path, out: Path) -> str:
        entries = self.entries(cache)
        if len(entries) < 3 or not all(e.exists() for e in entries):
            return "extraction" if entries else "start-up"
        cells = len(list((out / "cells").glob("*.json")))
        return "grid" if cells < self.n_cells else "final writes"

    @staticmethod
    def saved_cells(out: Path) -> set[str]:
        ids = set()
        for p in (out / "cells").glob("*.json"):
            ids.add(json.loads(p.read_text())["run_id"])
        return ids

    @staticmethod
    def plugins_of(out: Path):
        for p in sorted((out / "cells").glob("*.json")):
            return (json.loads(p.read_text()).get("inputs") or {}).get("plugins")
        return None

    def env_changed(self, out: Path) -> bool:
        """Another process (pip install in a shared venv) changed the metric plugins mid-round."""
        return self.plugins_of(out) != self.ref_plugins

    def compare(self, out: Path, what: str) -> bool:
        runs = out / "runs.csv"
        if runs.exists() and runs.read_bytes() == self.ref:
            return True
        if runs.exists() and self.env_changed(out):
            self.stats["env_changes"] += 1
            print(f"  ({what}: the set of metric plugins changed under us: round not counted)", flush=True)
            return False
        self.stats["differences"].append(f"{what}: runs.csv differs from the uninterrupted run")
        return False

    # -- rounds -------------------------------------------------------------
    def reference(self) -> None:
        cache, out = self.work / "ref-cache", self.work / "ref"
        self.t_cold = self.run(cache, out)
        self.ref = (out / "runs.csv").read_bytes()
        self.ref_plugins = self.plugins_of(out)
        s = json.loads((out / "summary.json").read_text())
        self.n_cells, self.n_tiles = s["n_runs"], s["timings"]["extracted_tiles"]
        self.n_shards = sum(-(-int(e.manifest()["n"]) // SHARD) for e in self.entries(cache))
        self.warm_cache = cache
        t0 = time.monotonic()
        self.run(cache, self.work / "ref-warm")
        self.t_warm = time.monotonic() - t0
        self.compare(self.work / "ref-warm", "warm rerun")
        print(f"reference: {self.n_cells} cells, {self.n_tiles} tiles, cold {self.t_cold:.1f} s, "
              f"warm {self.t_warm:.1f} s", flush=True)

    def kill_round(self, k: int, warm: bool) -> None:
        cache = self.work / f"c{k}"
        if warm:
            shutil.copytree(self.warm_cache / "embeddings", cache / "embeddings",
                            ignore=shutil.ignore_patterns("*.lock", ".trash"))
        out = self.work / f"o{k}"
        phases = []
        for _ in range(1 if warm else self.rng.randint(1, 3)):
            phases.append(self.kill_after(self.start(cache, out), self.kill_point(warm), cache, out))
        before_cells, before_tiles = self.saved_cells(out), self.tiles_done(cache)
        self.run(cache, out)
        s = json.loads((out / "summary.json").read_text())
        if any("metric plugins changed" in x["reason"] for x in s.get("stale_cells", [])):
            self.stats["env_changes"] += 1  # a pip install in the shared venv between our runs
            print(f"  (round {k}: the set of metric plugins changed between runs: round not counted)", flush=True)
            return
        if not self.compare(out, f"round {k}") and self.env_changed(out):
            return
        if set(s["reused_cells"]) != before_cells:
            self.stats["differences"].append(f"round {k}: reused {sorted(s['reused_cells'])}, saved {sorted(before_cells)}")
        extracted = s["timings"]["extracted_tiles"]
        if extracted != self.n_tiles - before_tiles:
            self.stats["differences"].append(f"round {k}: embedded {extracted} tiles, "
                                             f"{self.n_tiles - before_tiles} were missing")
        self.stats["cells_reused"] += len(before_cells)
        self.stats["cells_total"] += self.n_cells
        self.stats["tiles_saved"] += before_tiles
        self.stats["tiles_total"] += self.n_tiles
        print(f"round {k:2d} {'grid-kill' if warm else 'kill':10s} kills at {', '.join(phases):40s} "
              f"resume reused {len(before_cells):2d}/{self.n_cells} cells, {before_tiles:3d}/{self.n_tiles} tiles "
              f"-> {'identical' if (out / 'runs.csv').read_bytes() == self.ref else 'DIFFERENT'}", flush=True)

    def concurrent_round(self, k: int) -> None:
        from prism_plugin import cli as prism_cli

        cache = self.work / f"c{k}"
        outs = [self.work / f"o{k}a", self.work / f"o{k}a", self.work / f"o{k}b"]
        procs = [self.start(cache, o) for o in outs]
        stop = threading.Event()
        counts = {"rm": 0, "verify": 0, "errors": []}

        def janitor():
            import contextlib
            import io
            import warnings

            while not stop.is_set():
                for argv in (["cache", "verify", "--cache-dir", str(cache)],
                             ["cache", "rm", "--all", "--wait", "0.1", "--cache-dir", str(cache)]):
                    if not cache.exists() or self.rng.random() < 0.6:
                        continue
                    with contextlib.redirect_stdout(io.StringIO()) as buf, warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        rc = prism_cli.main(argv)
                    if rc not in (0, 1):
                        counts["errors"].append((argv, rc))
                    key = argv[1]
                    counts[key] += 1
                    if key == "rm":
                        self.stats["evictions"] += buf.getvalue().count("removed ") - 1
                time.sleep(self.rng.uniform(0.2, 1.5))

        t = threading.Thread(target=janitor)
        t.start()
        for p in procs:
            self.finish(p)
        stop.set()
        t.join()
        if not all([self.compare(o, f"round {k} concurrent {o.name}") for o in sorted(set(outs))]):
            if any(self.env_changed(o) for o in outs):
                return
        bad = [e.key[:12] for e in self.entries(cache) if e.exists() and e.check() is not None]
        if bad or counts["errors"]:
            self.stats["differences"].append(f"round {k}: corrupt entries {bad}, cache command errors {counts['errors']}")
        extracted = sum(json.loads((o / "summary.json").read_text())["timings"]["extracted_tiles"]
                        for o in sorted(set(outs)))
        self.stats["concurrent_runs"] += len(procs)
        self.stats["verifies"] += counts["verify"]
        print(f"round {k:2d} concurrent 3 runs + {counts['verify']} verify / {counts['rm']} rm: "
              f"{extracted} tiles embedded per the last summary of each folder -> "
              f"{'identical' if all((o / 'runs.csv').read_bytes() == self.ref for o in outs) else 'DIFFERENT'}",
              flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temp folder)")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="prism-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PRISM_CACHE_DIR"] = str(work / "data")
    chaos = Chaos(work, args.seed)
    t0 = time.monotonic()
    kinds = ["kill", "grid-kill", "kill", "concurrent"]
    try:
        chaos.reference()
        for k in range(1, args.rounds + 1):
            kind = kinds[(k - 1) % len(kinds)]
            if kind == "concurrent":
                chaos.concurrent_round(k)
            else:
                chaos.kill_round(k, warm=kind == "grid-kill")
            chaos.stats["rounds"] += 1
    finally:
        chaos.kill_all()
    s = chaos.stats
    print(f"\nchaos: {s['rounds']} rounds in {time.monotonic() - t0:.0f} s; {s['kills']} SIGKILLs landed "
          f"({', '.join(f'{v} {k}' for k, v in sorted(s['phases'].items()))}); {s['concurrent_runs']} concurrent runs "
          f"with {s['verifies']} verify and {s['evictions']} evictions beside them")
    print(f"resume reused {s['cells_reused']} of {s['cells_total']} cells and {s['tiles_saved']} of "
          f"{s['tiles_total']} tiles; differences found: {len(s['differences'])}"
          + (f"; {s['env_changes']} round(s) not counted (plugins changed by another process)"
             if s["env_changes"] else ""))
    for d in s["differences"]:
        print("  DIFFERENCE:", d)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if s["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
