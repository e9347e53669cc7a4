"""infercore's version and the plugin API version that plugins are checked against."""

__version__ = "0.1.0"

#: Version of the plugin API, ``(major, minor)``. A plugin declares the oldest version it needs
#: (``INFERCORE_PLUGIN_API = (1, 0)`` in its hook module; a bare ``1`` means ``(1, 0)``). Core loads
#: it when the majors are equal and the plugin's minor is at most core's. A minor release only adds
#: (keyword arguments with defaults, optional methods, spec fields with defaults); a removal is
#: announced by a deprecation warning for one minor release and happens in the next major.
PLUGIN_API_VERSION: tuple[int, int] = (1, 19)


def parse_api_version(declared: object) -> tuple[int, int] | None:
    """``(major, minor)`` from a plugin's ``INFERCORE_PLUGIN_API`` (an int or a 2-tuple), or None
    when it is neither."""
    if isinstance(declared, int) and not isinstance(declared, bool):
        return (declared, 0)
    if (isinstance(declared, (tuple, list)) and len(declared) == 2
            and all(isinstance(p, int) and not isinstance(p, bool) for p in declared)):
        return (int(declared[0]), int(declared[1]))
    return None


def api_version_problem(declared: object) -> str | None:
    """Why a plugin declaring ``declared`` cannot load into this core (None when it can)."""
    version = parse_api_version(declared)
    ours = f"{PLUGIN_API_VERSION[0]}.{PLUGIN_API_VERSION[1]}"
    if version is None:
        return (f"declares plugin API version {declared!r}; set INFERCORE_PLUGIN_API = "
                f"{PLUGIN_API_VERSION!r} (the oldest (major, minor) it needs) in its hook module")
    major, minor = version
    if major != PLUGIN_API_VERSION[0]:
        return f"was built for plugin API version {major}.{minor}, but this infercore speaks version {ours}"
    if minor > PLUGIN_API_VERSION[1]:
        return (f"needs plugin API version {major}.{minor}, newer than this infercore's {ours}; upgrade "
                "infercore")
    return None
