from infercore.plugin_api import hookimpl

INFERCORE_PLUGIN_API = 99


@hookimpl
def register_models(register):
    register("Never", "x:y")
