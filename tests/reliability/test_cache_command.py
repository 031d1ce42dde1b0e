"""`prism-run cache ls|verify|rm` on a copy of the warm demo cache (in-process, fast)."""

from __future__ import annotations

import json

import numpy as np

from prism_plugin import cli
from prism_plugin.embed.cache import EmbeddingCache
from tests.reliability.conftest import LIMIT


def run(capsys, *argv):
    rc = cli.main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_ls_shows_state_size_and_provenance(copy_cache, capsys):
    cache = copy_cache()
    rc, out, _ = run(capsys, "cache", "ls", "--cache-dir", str(cache))
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["key", "state", "task", "split"]
    body = lines[1:-1]
    assert len(body) == 3 and all("complete" in l and "prism_demo" in l and "DemoViT-Tiny" in l for l in body)
    assert {l.split()[3] for l in body} == {"train", "val", "test"}
    assert all(f"{LIMIT} x 192" in l for l in body)
    assert lines[-1].startswith("3 entries (3 complete)")
    rc, out, _ = run(capsys, "cache", "ls", "--json", "--cache-dir", str(cache))
    rows = [json.loads(l) for l in out.splitlines()]
    on_disk = {e.key: sum(p.stat().st_size for p in e.dir.rglob("*") if p.is_file())
               for e in EmbeddingCache(cache).entries()}
    assert {r["key"]: r["size_bytes"] for r in rows} == on_disk
    assert all(r["size_bytes"] > LIMIT * 192 * 4 for r in rows)  # at least the float32 features


def test_verify_detects_corruption_and_partial_entries(copy_cache, capsys):
    cache = copy_cache()
    entries = EmbeddingCache(cache).entries()
    rc, out, _ = run(capsys, "cache", "verify", "--cache-dir", str(cache))
    assert rc == 0 and sum(l.endswith("  ok") for l in out.splitlines()) == 3
    bad = entries[0]
    f = bad.dir / "labels.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.write_bytes(bytes(data))
    partial = EmbeddingCache(cache).entry("x", "y", "train")  # an interrupted extraction: two shards
    partial.write_shard(0, np.ones((4, 3), np.float32), np.zeros(4, int), start=0)
    partial.write_shard(1, np.ones((4, 3), np.float32), np.zeros(4, int), start=4)
    rc, out, _ = run(capsys, "cache", "verify", "--cache-dir", str(cache))
    assert rc == 1
    assert f"{bad.key[:12]}  CORRUPT: labels.npy checksum mismatch" in out
    assert "partial: 2 intact shard(s)" in out and "1 corrupt, 1 partial" in out
    assert bad.exists()  # verify alone never deletes
    sf = partial.shard_paths(1)[0]
    sf.write_bytes(sf.read_bytes()[:-4] + b"\x00\x00\x00\x01")
    rc, out, _ = run(capsys, "cache", "verify", "--delete-corrupt", "--cache-dir", str(cache))
    assert rc == 1 and "removed (the next run re-extracts it)" in out and "shard 1" in out
    assert not bad.exists() and partial.shards_on_disk() == [0]
    rc, out, _ = run(capsys, "cache", "verify", "--cache-dir", str(cache))
    assert rc == 0


def test_rm_by_key_task_partial_and_all(copy_cache, capsys):
    cache = copy_cache()
    entries = EmbeddingCache(cache).entries()
    partial = EmbeddingCache(cache).entry("x", "y", "val")
    partial.write_shard(0, np.ones((2, 3), np.float32), np.zeros(2, int), start=0)
    rc, out, _ = run(capsys, "cache", "rm", "--partial", "--dry-run", "--cache-dir", str(cache))
    assert rc == 0 and "would remove" in out and partial.dir.exists()
    rc, out, _ = run(capsys, "cache", "rm", "--partial", "--cache-dir", str(cache))
    assert rc == 0 and not partial.dir.exists() and all(e.exists() for e in entries)
    rc, out, _ = run(capsys, "cache", "rm", entries[0].key[:8], "--cache-dir", str(cache))
    assert rc == 0 and "removed 1 entries" in out and not entries[0].dir.exists()
    rc, out, _ = run(capsys, "cache", "rm", "--task", "some_other_task", "--cache-dir", str(cache))
    assert rc == 0 and "removed 0 entries" in out
    rc, out, _ = run(capsys, "cache", "rm", "--task", "prism_demo", "--adapter", "DemoViT-Tiny", "--cache-dir", str(cache))
    assert rc == 0 and "removed 2 entries" in out
    assert EmbeddingCache(cache).entries() == []
    assert not any((cache / "embeddings" / ".trash").glob("*"))
    rc, out, err = run(capsys, "cache", "rm", "abcd", "--cache-dir", str(cache))
    assert rc == 2 and "no entry" in err
