"""infercore's version and the plugin API version that plugins are checked against."""

__version__ = "0.1.0"

#: Major version of the plugin API. A plugin declares the major version it was built for
#: (``INFERCORE_PLUGIN_API = 1`` in its hook module); core refuses any other.
PLUGIN_API_VERSION = 1
