"""Built-in plugin: the data source types, registered through ``register_sources``."""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl

#: source.type -> (lazy class reference, one-line description, kind: images or features)
BUILTIN_SOURCES: dict[str, tuple[str, str, str]] = {
    "imagefolder": ("prism_plugin.data.folder:ImageFolderSource",
                    "class-per-folder images under root/<split>/ (or root/ with layout: flat)", "images"),
    "demo": ("prism_plugin.data.folder:DemoSource", "procedural synthetic H&E-like tiles (offline demo)", "images"),
    "hema_demo": ("prism_plugin.data.hema_demo:HemaDemoSource",
                  "procedural SYNTHETIC white-blood-cell crops, 5 classes, 4 fictitious acquisition domains "
                  "(offline hematology demo)", "images"),
    "records": ("prism_plugin.data.records:RecordsSource", "CSV/TSV, JSON or JSON-lines records with path and label",
                "images"),
    "h5": ("prism_plugin.data.arrays:H5Source", "HDF5 image and label arrays", "images"),
    "npz": ("prism_plugin.data.arrays:NpzSource", "NumPy .npz image and label arrays", "images"),
    "hf": ("prism_plugin.data.hf:HFSource", "a Hugging Face dataset (local folder or pinned hub revision)", "images"),
    "camelyon17": ("prism_plugin.data.camelyon17:Camelyon17Source", "Camelyon17-WILDS patches by hospital", "images"),
    "precomputed": ("prism_plugin.data.precomputed:PrecomputedSource",
                    "embeddings on disk: root/<embeddings_key>/{split}_features.npy + _labels.npy, or {split}.parquet",
                    "features"),
}


@hookimpl
def register_sources(register) -> None:
    for name, (ref, description, kind) in BUILTIN_SOURCES.items():
        register(name, ref, description=description, kind=kind)
