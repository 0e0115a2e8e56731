"""Deprecated location of :mod:`geosteer.recipe` (the recipe moved to the package's top level); every name
is re-exported from there. Import ``geosteer.recipe`` instead."""

import warnings

from geosteer.recipe import (  # noqa: F401 - the old names, re-exported
    FORMAT,
    RECIPE,
    VERSION,
    InterventionSpec,
    load_recipe,
    parse_layers,
    parse_settings,
    register_builder,
    registered_keys,
    save_recipe,
)

warnings.warn("geosteer.integrations.recipe moved to geosteer.recipe; import it from there",
              DeprecationWarning, stacklevel=2)
