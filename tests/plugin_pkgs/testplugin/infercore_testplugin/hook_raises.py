from infercore.plugin_api import hookimpl

INFERCORE_PLUGIN_API = 1


@hookimpl
def register_models(register):
    raise RuntimeError("hook failed on purpose")
