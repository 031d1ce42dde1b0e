"""Dataset sources: where a task's images (or embeddings) come from -- the public names in one place.

This module only re-exports; the code lives in modules named after what they hold:

* :mod:`prism_plugin.data.base` -- :class:`Source` (the class a source type subclasses; its
  contract is documented there), :class:`Pool`, :class:`ImageSplit`, :func:`check_options`;
* :mod:`prism_plugin.data.catalogue` -- source types by name through the plugin host's
  ``sources`` registry: :func:`source_class`, :func:`accepted_options`,
  :func:`check_source_spec`, :func:`open_source`;
* :mod:`prism_plugin.data.refs` -- :class:`ImageRef`, :class:`ArrayImageRef` (images read on demand);
* :mod:`prism_plugin.data.fingerprints` -- :func:`split_fingerprint`, :func:`files_fingerprint`;
* :mod:`prism_plugin.data.splits` -- the ``split:`` procedures and :func:`limit_indices`;
* :mod:`prism_plugin.data.labels` -- :func:`map_labels` (raw classes -> task labels);
* one module per source family: :mod:`~prism_plugin.data.folder` (``imagefolder``, ``demo``),
  :mod:`~prism_plugin.data.records` (``records``), :mod:`~prism_plugin.data.arrays` (``h5``,
  ``npz``), :mod:`~prism_plugin.data.hf` (``hf``), :mod:`~prism_plugin.data.camelyon17`;
* :mod:`prism_plugin.data.precomputed` -- :func:`read_embedding_split`, :func:`write_embedding_split`;
* :mod:`prism_plugin.hashing` -- :func:`file_digest` (the one file hasher).

Core modules import from those modules directly: importing this facade imports every built-in
source module, which the plugin host's lazy registry entries otherwise defer to first use.

Every source shares three steps, implemented once in :class:`Source`: **pools** (the raw items of
one source-level split, in the source's natural order), **labels** (raw classes mapped to the
task's class indices) and the **split procedure** (the task's optional ``split:`` key).
"""

from __future__ import annotations

from prism_plugin.data.arrays import H5Source, NpzSource
from prism_plugin.data.base import (COMMON_OPTIONS, DATA_ROOT_ENV, ImageSplit, NoAll, Pool, Source, check_options,
                                    data_hint, keyed_error, resolve_root)
from prism_plugin.data.catalogue import (FEATURES_ONLY, accepted_options, check_source_spec, is_source_type,
                                         open_source, source_class)
from prism_plugin.data.fingerprints import files_fingerprint, split_fingerprint
from prism_plugin.data.folder import IMAGE_SUFFIXES, DemoSource, ImageFolderSource
from prism_plugin.data.labels import map_labels
from prism_plugin.data.precomputed import read_embedding_split, write_embedding_split
from prism_plugin.data.records import RecordsSource, read_records
from prism_plugin.data.refs import ArrayImageRef, ImageRef
from prism_plugin.data.splits import (SPLIT_KEYS, SPLIT_PROCEDURES, check_split_spec, limit_indices,
                                      random_split_lengths, run_split_procedure)
from prism_plugin.hashing import file_digest  # the same 16-byte blake2b the old module defined

#: The public names of the module before the split (its ``__all__``, less ``SOURCE_TYPES`` -- now
#: the plugin host's ``sources`` registry -- and the private ``_limit_indices``, public now as
#: :func:`limit_indices`), plus ``file_digest``. Everything else imported above stays importable
#: from here but belongs to the module that defines it.
__all__ = [
    "ImageSplit", "ImageRef", "ArrayImageRef", "Pool", "Source", "ImageFolderSource", "DemoSource",
    "RecordsSource", "H5Source", "NpzSource", "open_source", "source_class",
    "check_source_spec", "check_split_spec", "run_split_procedure", "random_split_lengths", "map_labels",
    "split_fingerprint", "files_fingerprint", "read_embedding_split", "write_embedding_split", "limit_indices",
    "file_digest",
]
