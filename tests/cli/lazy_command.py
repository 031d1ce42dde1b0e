"""A command module registered lazily (``register("lazy-hello", "tests.cli.lazy_command")``) by the tests."""

from __future__ import annotations


def add_parser(subparsers):
    p = subparsers.add_parser("lazy-hello")  # no help= here: `prism-run --help` lists the registered one
    p.add_argument("--times", type=int, default=1)
    return p


def run(args) -> int:
    print("lazy hello " * args.times)
    return 0
