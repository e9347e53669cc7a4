"""Builds the model for a config: architecture from the model registry, weights from the checkpoint."""

from __future__ import annotations

import torch
from torch import nn

from infercore.config import InfercoreConfig
from infercore.layers import LayerNorm, RMSNorm
from infercore.layers.fused_moe.expert_parallel import building_with_expert_parallel
from infercore.layers.pipeline_parallel import get_pp_state
from infercore.layers.tensor_parallel import get_tp_state
from infercore.models.contract import ModelSpec
from infercore.models.hf_config import get_hf_config, resolve_model_path
from infercore.models.weight_files import iterate_weights
from infercore.plugins import get_plugin_manager
from infercore.quantization import QuantizationConfig, QuantizationMethod, building_with, layout_of
from infercore.quantization.selection import resolve_quantization

DUMMY_WEIGHT_RANGE = 0.05


def model_class(architecture: str) -> type[nn.Module]:
    """The registered class for a HF architecture name, or an error listing the supported ones."""
    registry = get_plugin_manager().registry("model")
    if architecture not in registry:
        raise ValueError(
            f"model architecture {architecture!r} is not supported; supported architectures: "
            f"{', '.join(registry.names()) or 'none'}. To add one, write a plugin whose register_models hook "
            f"calls register({architecture!r}, 'your_package.module:YourModelClass')."
        )
    return registry.load(architecture)


def init_dummy_weights(model: nn.Module, seed: int) -> None:
    """Random weights, the same for a seed on one kind of device: norm scales 1 and norm biases 0,
    quantization scales their layout's ``dummy_value``, packed integer codes random bits, the rest uniform.

    Values are drawn where the parameters live (a 30B-parameter model fills in seconds on a GPU, where
    drawing on the host took minutes), so a GPU's weights differ from a CPU's for the same seed.
    """
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for module in model.modules():
            for name, param in module.named_parameters(recurse=False):
                if isinstance(module, (RMSNorm, LayerNorm)):
                    param.fill_(1.0 if name == "weight" else 0.0)
                elif layout_of(param).dummy_value is not None:
                    param.fill_(layout_of(param).dummy_value)
                else:
                    if param.device not in generators:
                        generators[param.device] = torch.Generator(param.device).manual_seed(seed)
                    if not param.dtype.is_floating_point:  # packed codes (INT4): random bits
                        param.copy_(torch.randint(-2**31, 2**31, param.shape, generator=generators[param.device],
                                                  device=param.device, dtype=torch.int64))
                        continue
                    values = torch.rand(param.shape, generator=generators[param.device], device=param.device)
                    param.copy_((values * 2 - 1) * DUMMY_WEIGHT_RANGE)


def load_model(config: InfercoreConfig, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The model of ``config.model`` on ``device`` in ``dtype``, in eval mode, weights loaded
    (or random with ``load_format="dummy"``)."""
    hf_config = get_hf_config(config.model, config.load.download_dir)
    architectures = getattr(hf_config, "architectures", None) or []
    if not architectures:
        raise ValueError(f"the config of {config.model.model!r} names no architecture (config.json lacks "
                         "'architectures'); add it, e.g. [\"LlamaForCausalLM\"]")
    cls = model_class(architectures[0])
    if get_pp_state().size > 1 and not getattr(cls, "supports_pipeline_parallel", False):
        raise ValueError(f"{cls.__name__} cannot be split into pipeline stages (it does not declare "
                         "supports_pipeline_parallel); serve it with --pipeline-parallel-size 1")
    tp = get_tp_state()
    spec = ModelSpec(hf_config=hf_config, dtype=dtype, device=device, tp_rank=tp.rank, tp_size=tp.size)
    with building_with_expert_parallel(config.parallel.enable_expert_parallel):
        model = build_model(cls, spec, resolve_quantization(config.model.quantization, hf_config))
    if config.load.load_format == "dummy":
        init_dummy_weights(model, config.model.seed)
    else:
        folder = resolve_model_path(config.model, config.load.download_dir)
        # Lazy slices (each rank reads only its shard) go only to models that declare they narrow them
        # first; every other model gets the plain CPU tensors the CausalLM contract promises.
        lazy = tp.size > 1 and getattr(cls, "loads_checkpoint_slices", False)
        check_loaded(model, model.load_weights(iterate_weights(folder, config.load.load_format, lazy=lazy)))
    process_weights_after_loading(model)
    return model.eval()


def build_model(cls: type[nn.Module], spec: ModelSpec, quantization: QuantizationConfig | None = None) -> nn.Module:
    """Build ``cls`` on ``spec.device`` with floating-point parameters created in ``spec.dtype`` (the
    loader owns the dtype: a model never casts itself, and quantized tensors keep theirs); its layers
    take their weights' methods from ``quantization`` (None: unquantized)."""
    previous = torch.get_default_dtype()
    if spec.dtype.is_floating_point:
        torch.set_default_dtype(spec.dtype)
    try:
        with torch.device(spec.device), building_with(quantization):
            from_spec = getattr(cls, "from_spec", None)
            model = from_spec(spec) if from_spec is not None else cls(spec.hf_config, spec.dtype)
            if quantization is not None:
                keep_ignored_layers_unquantized(model, quantization)
            return model
    finally:
        torch.set_default_dtype(previous)


def keep_ignored_layers_unquantized(model: nn.Module, quantization: QuantizationConfig) -> None:
    """Give the linear layers the checkpoint leaves unquantized (by module name) the unquantized method."""
    from infercore.layers.linear import LinearBase
    from infercore.quantization.unquantized import UnquantizedLinearMethod

    for name, module in model.named_modules():
        if isinstance(module, LinearBase) and quantization.is_ignored(name):
            module.use_method(UnquantizedLinearMethod())


def process_weights_after_loading(model: nn.Module) -> None:
    """Let every layer's quantization method turn its loaded parameters into what its kernels want."""
    with torch.no_grad():
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, QuantizationMethod):
                method.process_weights_after_loading(module)


def check_loaded(model: nn.Module, loaded: object) -> None:
    """Raise naming the parameters ``load_weights`` did not fill, when it says which it filled."""
    if loaded is None:
        return
    if not isinstance(loaded, (set, frozenset, list, tuple)):
        raise TypeError(f"{type(model).__name__}.load_weights returned {type(loaded).__name__}; return the set "
                        "of parameter names it filled (or None)")
    missing = sorted(set(dict(model.named_parameters())) - set(loaded))
    if missing:
        raise ValueError(f"the checkpoint did not fill {len(missing)} parameter(s) of {type(model).__name__}: "
                         f"{', '.join(missing[:10])}{' …' if len(missing) > 10 else ''}; the checkpoint is "
                         "incomplete, for another config, or load_weights maps its names wrongly")
