"""Built-in model architectures and the loader that builds them from a HF model folder."""

from infercore.models.dtype import resolve_dtype
from infercore.models.hf_config import get_hf_config, resolve_model_path
from infercore.models.loader import load_model, model_class

__all__ = ["get_hf_config", "load_model", "model_class", "resolve_dtype", "resolve_model_path"]
