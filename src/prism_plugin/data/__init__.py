"""Dataset sources of two kinds, both in the plugin host's ``sources`` registry (``register_sources``).

* image sources (:class:`~prism_plugin.data.base.Source`, :mod:`~prism_plugin.data.folder`,
  :mod:`~prism_plugin.data.records`, :mod:`~prism_plugin.data.arrays`, :mod:`~prism_plugin.data.hf`,
  ...) yield images that an adapter embeds: pools -> labels -> ``split:`` procedure -> ``--limit``;
* feature sources (:class:`~prism_plugin.data.features.FeatureSource`,
  :mod:`~prism_plugin.data.precomputed`) yield embedding vectors, read by ``--model precomputed``.

:mod:`~prism_plugin.data.catalogue` looks types up by name; :mod:`~prism_plugin.data.splits` holds the
split procedures, :mod:`~prism_plugin.data.labels` the label mapping, :mod:`~prism_plugin.data.fingerprints`
the fingerprints.
"""
