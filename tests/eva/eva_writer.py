"""Embeddings folders written by eva's own writer (kaiko-eva), through a real Lightning ``predict``.

:func:`write_eva_embeddings` runs ``eva.core.callbacks.writers.embeddings.ClassificationEmbeddingsWriter`` as
``eva predict`` does (a Lightning Trainer, eva's ``InferenceModule`` around a backbone, one dataloader per split,
the writer's own write process): what it leaves is what an eva user has, not an imitation of it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_eva_embeddings(out: Path, *, sizes=(("train", 40), ("val", 20), ("test", 30)), n_classes: int = 2,
                         dim_in: int = 8, dim: int = 16, seed: int = 0, shared_names: bool = False,
                         split_map: bool = True) -> Path:
    """eva's writer's output for synthetic inputs (class-shifted Gaussians through a seeded linear backbone);
    ``shared_names``: every two consecutive samples share a file name (a multi-embedding file)."""
    import lightning.pytorch as pl
    import torch
    from eva.core.callbacks.writers.embeddings import ClassificationEmbeddingsWriter
    from eva.core.models.modules import InferenceModule

    rng = np.random.default_rng(seed)

    class Split(torch.utils.data.Dataset):
        def __init__(self, name: str, n: int):
            self.name = name
            self.y = np.arange(n) % n_classes
            self.x = (rng.normal(size=(n, dim_in)) + 1.5 * self.y[:, None]).astype(np.float32)

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return torch.from_numpy(self.x[i]), torch.tensor(int(self.y[i]))

        def filename(self, i):
            j = i // 2 if shared_names else i
            return f"{self.name}/sample_{j:04d}.png"

    torch.manual_seed(seed)
    backbone = torch.nn.Linear(dim_in, dim)
    loaders = [torch.utils.data.DataLoader(Split(name, n), batch_size=8, shuffle=False) for name, n in sizes]
    writer = ClassificationEmbeddingsWriter(
        output_dir=str(out), dataloader_idx_map={i: name for i, (name, _) in enumerate(sizes)} if split_map else None)
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=[writer], enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False)
    trainer.predict(InferenceModule(backbone=backbone), dataloaders=loaders, return_predictions=False)
    return Path(out)
