"""``prism-run cache ls|verify|rm``: inspect, re-check and prune the embedding cache.

* ``ls`` lists every entry with its state (complete, partial = an interrupted extraction that the next run resumes,
  extracting = another process holds its lock), size, shape and provenance (task, split, adapter, creation time).
* ``verify`` re-computes the checksums of complete entries (and of the shards of partial ones) against their
  manifests; ``--delete-corrupt`` removes what fails so the next run re-extracts it. Exit status 1 when anything is
  corrupt.
* ``rm`` removes entries selected by key prefix, ``--task``, ``--adapter``, ``--partial`` or ``--all``. Removal
  takes the entry's lock (so it never deletes an extraction in progress: such entries are skipped and reported) and
  renames the folder away before deleting it, so a run reading the cache at the same moment sees the entry either
  whole or gone and recomputes it if needed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from prism_plugin.commands import print_rows
from prism_plugin.embed.cache import CacheEntry, EmbeddingCache
from prism_plugin.errors import PrismError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cache", description="Inspect the embedding cache ($PRISM_CACHE_DIR or ~/.cache/prism-plugin).")
    sub = p.add_subparsers(dest="cache_command", required=True, metavar="{ls,verify,rm}")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help="cache folder (default: $PRISM_CACHE_DIR or ~/.cache/prism-plugin)")
        q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    ls = sub.add_parser("ls", help="list entries with state, size and provenance")
    ls.add_argument("--json", action="store_true", help="one JSON object per entry instead of a table")
    common(ls)
    ver = sub.add_parser("verify", help="re-check checksums, shapes and dtypes")
    ver.add_argument("keys", nargs="*", metavar="KEY", help="key prefixes (default: every entry)")
    ver.add_argument("--delete-corrupt", action="store_true", help="remove entries (and shards) that fail")
    common(ver)
    rm = sub.add_parser("rm", help="remove entries (safe while other runs read the cache)")
    rm.add_argument("keys", nargs="*", metavar="KEY", help="key prefixes (at least 4 characters), as `cache ls` shows")
    rm.add_argument("--task", help="entries extracted for this task")
    rm.add_argument("--adapter", help="entries of this adapter (name or display name)")
    rm.add_argument("--partial", action="store_true", help="interrupted extractions (no manifest)")
    rm.add_argument("--all", action="store_true", help="every entry")
    rm.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    rm.add_argument("--wait", type=float, default=5.0, metavar="S",
                    help="seconds to wait for an entry another process is writing (default 5; then it is skipped)")
    common(rm)
    return p


def _size(n: int | None) -> str:
    n = int(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def _cache(args) -> EmbeddingCache:
    cache = EmbeddingCache(args.cache_dir)
    if args.cache_dir is not None and not Path(args.cache_dir).is_dir():
        raise PrismError(f"--cache-dir {args.cache_dir}: no such directory")
    return cache


def _select_by_keys(cache: EmbeddingCache, prefixes: list[str]) -> list[CacheEntry]:
    out: dict[str, CacheEntry] = {}
    for prefix in prefixes:
        if len(prefix) < 4 or any(ch not in "0123456789abcdef" for ch in prefix.lower()):
            raise PrismError(f"cache key {prefix!r}: give at least 4 hex characters of a key from `prism-run cache ls`")
        found = cache.find(prefix)
        if not found:
            raise PrismError(f"cache key {prefix!r}: no entry in {cache.root} starts with it (see `prism-run cache ls`)")
        if len(found) > 1:
            raise PrismError(f"cache key {prefix!r} matches {len(found)} entries; give more characters")
        out[found[0].key] = found[0]
    return list(out.values())


def cmd_ls(args) -> int:
    cache = _cache(args)
    infos = [e.info() for e in cache.entries()]
    if args.json:
        for info in infos:
            print(json.dumps(info, sort_keys=True))
        return 0
    if not infos:
        print(f"no embedding cache entries in {cache.root}")
        return 0
    header = ("key", "state", "task", "split", "adapter", "tiles x dim", "size", "created")
    rows = []
    for i in infos:
        if i["state"] == "complete":
            shape = f"{i.get('n')} x {i.get('dim')}"
        else:
            shape = f"{i.get('shards', 0)} shard(s)"
        rows.append((i["key"][:12], i["state"], i.get("task") or "-", i.get("split") or "-", i.get("adapter") or "-",
                     shape, _size(i["size_bytes"]), i.get("created") or i.get("modified") or "-"))
    print_rows(header, rows)
    total = sum(i["size_bytes"] for i in infos)
    n_complete = sum(i["state"] == "complete" for i in infos)
    print(f"{len(infos)} entries ({n_complete} complete), {_size(total)} in {cache.root / 'embeddings'}")
    return 0


def _check_shards(entry: CacheEntry, delete: bool) -> list[str]:
    """Problems of the finished shards of a partial entry (checksums against their records)."""
    import warnings

    bad = []
    for index in entry.shards_on_disk():
        meta = entry.shard_record(index)
        rows = meta.get("rows") if meta else None
        if not isinstance(rows, int):
            bad.append(f"shard {index}: unreadable record")
            continue
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            if delete:
                with entry.lock():
                    ok = entry.shard_done(index, rows, start=meta.get("start"))
            else:
                ok = _shard_intact(entry, index, meta)
        if not ok:
            bad.append(f"shard {index}: checksum or shape mismatch")
    return bad


def _shard_intact(entry: CacheEntry, index: int, meta: dict) -> bool:
    from prism_plugin.embed.cache import file_checksum

    fpath, lpath = entry.shard_paths(index)
    try:
        return (file_checksum(fpath) == meta["features_checksum"]
                and file_checksum(lpath) == meta["labels_checksum"])
    except (OSError, KeyError):
        return False


def cmd_verify(args) -> int:
    cache = _cache(args)
    entries = _select_by_keys(cache, args.keys) if args.keys else cache.entries()
    n_ok = n_bad = n_partial = 0
    for entry in entries:
        if not entry.exists():
            if entry.locked_elsewhere():
                print(f"{entry.key[:12]}  extracting (skipped: another process is writing it)")
                continue
            n_partial += 1
            problems = _check_shards(entry, args.delete_corrupt)
            if problems:
                n_bad += 1
                action = "; bad shards removed" if args.delete_corrupt else ""
                print(f"{entry.key[:12]}  CORRUPT partial entry: {'; '.join(problems)}{action}")
            else:
                print(f"{entry.key[:12]}  partial: {len(entry.shards_on_disk())} intact shard(s); "
                      "the next run resumes it")
            continue
        problem = entry.check()
        if problem is None:
            n_ok += 1
            print(f"{entry.key[:12]}  ok")
            continue
        if problem == "removed while being checked" or not entry.exists():
            print(f"{entry.key[:12]}  removed by another process while being checked")
            continue
        n_bad += 1
        if args.delete_corrupt:
            removed = entry.remove(timeout=5.0)
            action = "; removed (the next run re-extracts it)" if removed else "; in use, not removed"
        else:
            action = "; rerun with --delete-corrupt, or just run the task (it re-extracts corrupt entries)"
        print(f"{entry.key[:12]}  CORRUPT: {problem}{action}")
    print(f"verified {len(entries)} entries: {n_ok} ok, {n_bad} corrupt, {n_partial} partial")
    return 1 if n_bad else 0


def cmd_rm(args) -> int:
    cache = _cache(args)
    if not (args.keys or args.task or args.adapter or args.partial or args.all):
        raise PrismError("cache rm: say what to remove: KEY prefixes, --task NAME, --adapter NAME, --partial or --all")
    chosen = _select_by_keys(cache, args.keys) if args.keys else cache.entries()
    if args.task or args.adapter or args.partial:
        kept = []
        for entry in chosen:
            info = entry.info()
            if args.partial and info["state"] == "complete":
                continue
            if args.task and info.get("task") != args.task:
                continue
            if args.adapter and args.adapter not in (info.get("adapter"), info.get("adapter_name")):
                continue
            kept.append(entry)
        chosen = kept
    freed = removed = skipped = 0
    for entry in chosen:
        info = entry.info()
        label = f"{entry.key[:12]}  {info.get('task') or '-'} {info.get('split') or ''} {info.get('adapter') or ''}".rstrip()
        if args.dry_run:
            print(f"would remove {label} ({_size(info['size_bytes'])})")
            continue
        if entry.remove(timeout=args.wait):
            removed += 1
            freed += info["size_bytes"]
            print(f"removed {label} ({_size(info['size_bytes'])})")
        else:
            skipped += 1
            print(f"skipped {label}: another process is writing it (retry later or raise --wait)")
    if not args.dry_run:
        cache.empty_trash()
        print(f"removed {removed} entries, freed {_size(freed)}" + (f"; {skipped} in use, skipped" if skipped else ""))
    return 0


def run(args) -> int:
    return {"ls": cmd_ls, "verify": cmd_verify, "rm": cmd_rm}[args.cache_command](args)
