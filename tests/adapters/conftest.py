"""Fixtures of the adapter tests: the eight PRISM adapter classes, decoded PNG tiles, the shared papers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .adapters_support import SHARED


@pytest.fixture(scope="session")
def paper_text() -> str:
    papers = sorted((SHARED / "papers").glob("000_*.txt")) if (SHARED / "papers").is_dir() else []
    if not papers:
        pytest.skip(f"PRISM paper text not found under {SHARED}/papers (set PRISM_SHARED)")
    return papers[0].read_text()


@pytest.fixture(scope="session")
def protocol_text() -> str:
    path = SHARED / "PROTOCOL.md"
    if not path.is_file():
        pytest.skip(f"{path} not found (set PRISM_SHARED)")
    return path.read_text()


@pytest.fixture(scope="session")
def preprocessing_csv():
    path = SHARED / "reference" / "camelyon17" / "preprocessing_table.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found (set PRISM_SHARED)")
    import pandas as pd

    return pd.read_csv(path)


@pytest.fixture(scope="session")
def tiles(tmp_path_factory) -> list[Path]:
    """Six real PNG files of different sizes (non-square), decoded by the pipeline like a dataset."""
    from PIL import Image, ImageFilter

    folder = tmp_path_factory.mktemp("tiles")
    rng = np.random.default_rng(7)
    paths = []
    for i, (w, h) in enumerate([(300, 260), (256, 256), (224, 240), (96, 96), (500, 460), (230, 230)]):
        arr = rng.integers(0, 256, size=(h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
        im = Image.fromarray(arr).resize((w, h), Image.BILINEAR).filter(ImageFilter.GaussianBlur(1.5))
        path = folder / f"tile_{i}.png"
        im.save(path)
        paths.append(path)
    return paths


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory) -> Path:
    """A two-class image-folder task of 32-px PNGs (colour differs by class), one fraction, one seed."""
    from PIL import Image

    root = tmp_path_factory.mktemp("tiny-task")
    rng = np.random.default_rng(11)
    sizes = {"train": 10, "val": 6, "test": 8}
    for split, n in sizes.items():
        for label, base in (("a", (200, 120, 170)), ("b", (120, 80, 170))):
            folder = root / "data" / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                arr = np.clip(np.array(base) + rng.normal(0, 25, size=(32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(arr).save(folder / f"{i}.png")
    task = root / "tiny_adapters_task.yaml"
    task.write_text(
        "task: tiny_adapters_task\n"
        "dataset: Tiny-Adapters\n"
        "class_names: [a, b]\n"
        f"source: {{type: imagefolder, root: {root / 'data'}}}\n"
        "label_fractions: [1.0]\n"
        "seeds: [42]\n"
        "probe: {kind: logistic, C: 1.0, max_iter: 1000}\n"
        "splits:\n"
        "  train: {name: train, size: 20}\n"
        "  val: {name: val, size: 12}\n"
        "  test: {name: test, size: 16}\n"
    )
    return task
