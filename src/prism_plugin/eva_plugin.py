"""Built-in plugin ``eva``: eva (kaiko-eva) users' embeddings, through the same hooks a third party uses.

* the feature source ``eva`` (``source: {type: eva, root: DIR}``; :mod:`prism_plugin.data.eva`), registered
  in the sources registry with kind ``features``, so ``--model precomputed`` reads it;
* the subcommand ``prism-run eva DIR`` (:mod:`prism_plugin.commands.eva`): an eva embeddings folder to a
  PRISM report in one command.

The backbone family ``eva:<registry name>`` is an adapter (``prism_plugin.model_adapters.eva_registry``). Reading
an embeddings folder needs torch only; building eva backbones needs the ``eva`` extra (kaiko-eva[vision]).
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl


@hookimpl
def register_sources(register) -> None:
    register("eva", "prism_plugin.data.eva:EvaEmbeddingsSource", kind="features",
             description="embeddings eva's writer wrote: root/manifest.csv (origin,embeddings,target,split) + "
                         "one .pt file per sample")


@hookimpl
def register_commands(register) -> None:
    register("eva", "prism_plugin.commands.eva",
             help="a PRISM report from an eva embeddings folder (manifest.csv + .pt files), no re-extraction")
