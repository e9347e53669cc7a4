"""The front end's multimodal step: a prompt's images → processed tensors (through the model's processor,
cached by content hash) → the prompt with each placeholder expanded and one
:class:`~infercore.wire.multimodal.MultiModalFeature` per image.

Blocking work (decoding, resizing, hashing): the server runs it off the event loop; ``LLM`` runs it inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from infercore.models.multimodal import MultiModalProcessor, ProcessedImage, content_hash, is_multimodal
from infercore.multimodal.media import MediaError, MediaLimits, as_image
from infercore.multimodal.processor_cache import ProcessorCache
from infercore.wire.multimodal import MultiModalFeature, WireTensor

if TYPE_CHECKING:
    from PIL import Image

    from infercore.config import InfercoreConfig


def multimodal_processor_class(architecture: str) -> type[MultiModalProcessor] | None:
    """The processor a model registration names (``multimodal_processor="pkg.mod:Class"`` metadata; ``None``
    there: a text-only model, known without importing it), else its class's ``multimodal_processor``; None for a
    text-only model."""
    from infercore.plugins import get_plugin_manager
    from infercore.plugins.registry import import_target

    registry = get_plugin_manager().registry("model")
    if architecture not in registry:
        return None
    metadata = registry.get(architecture).metadata
    if "multimodal_processor" in metadata:
        target = metadata["multimodal_processor"]
        return import_target(str(target)) if target else None
    cls = registry.load(architecture)
    return cls.multimodal_processor if is_multimodal(cls) else None


class MultiModalInputs:
    """Processes the images of prompts for one served model (see the module docstring)."""

    def __init__(self, processor: MultiModalProcessor, limits: MediaLimits, max_images: int,
                 cache_bytes: int) -> None:
        self.processor = processor
        self.limits = limits
        self.max_images = max_images
        self.cache = ProcessorCache(cache_bytes)

    @property
    def placeholder_text(self) -> str:
        return self.processor.placeholder_text

    def check_count(self, count: int, param: str = "messages") -> None:
        if count > self.max_images:
            raise MediaError(f"the prompt has {count} images, over the limit of {self.max_images} per prompt "
                             "(--limit-mm-per-prompt); send fewer images", param)

    def process(self, token_ids: list[int], images: Sequence[Image.Image],
                param: str = "multi_modal_data") -> tuple[list[int], list[MultiModalFeature]]:
        """The prompt with its placeholders expanded, and its images' features in prompt order."""
        self.check_count(len(images), param)
        processed: list[tuple[str, ProcessedImage]] = []
        settings = self.processor.settings_key()
        for image in images:
            key = content_hash(image, settings)
            item = self.cache.get(key)
            if item is None:
                item = self.processor.process_image(image)
                self.cache.put(key, item)
            processed.append((key, item))
        try:
            ids, offsets = self.processor.expand_prompt(token_ids, [item for _, item in processed])
        except ValueError as exc:
            raise MediaError(str(exc), param) from None
        features = [MultiModalFeature("image", key, offset, item.num_tokens,
                                      {name: WireTensor.from_numpy(a) for name, a in item.data.items()})
                    for (key, item), offset in zip(processed, offsets, strict=True)]
        return ids, features

    def load_and_process(self, token_ids: list[int], urls: Sequence[Any],
                         param: str = "messages") -> tuple[list[int], list[MultiModalFeature]]:
        """:meth:`process` of images given as URLs (a chat request's image parts), loaded within the limits."""
        self.check_count(len(urls), param)
        images = [as_image(url, self.limits, f"image {i}") for i, url in enumerate(urls)]
        return self.process(token_ids, images, param)

    def images_of(self, data: Any, param: str = "multi_modal_data") -> list[Image.Image]:
        """``multi_modal_data`` of ``LLM.generate``: ``{"image": image or list}`` → decoded RGB images."""
        if not isinstance(data, dict):
            raise MediaError('multi_modal_data must be a dict such as {"image": [PIL image, ...]}', param)
        unknown = sorted(set(data) - {"image"})
        if unknown:
            raise MediaError(f"multi_modal_data has {', '.join(map(repr, unknown))}; this model takes 'image' only",
                             param)
        items = data.get("image")
        items = [] if items is None else list(items) if isinstance(items, (list, tuple)) else [items]
        self.check_count(len(items), param)
        return [as_image(item, self.limits, f"image {i}") for i, item in enumerate(items)]


def make_multimodal_inputs(config: InfercoreConfig, tokenizer: Any) -> MultiModalInputs | None:
    """The front end's :class:`MultiModalInputs` for the served model (None when it takes no images)."""
    from infercore.models.model_folder import config_architecture, resolve_model_path

    # The architecture from config.json alone: a text model's front end never loads transformers' config code
    # (and torch under it).
    architecture = config_architecture(config.model, config.load.download_dir)
    cls = multimodal_processor_class(architecture) if architecture else None
    if cls is None:
        return None
    from infercore.models.hf_config import get_hf_config

    try:
        hf_config = get_hf_config(config.model, config.load.download_dir)
    except (OSError, ValueError):
        return None
    mm = config.multimodal
    path = str(resolve_model_path(config.model, config.load.download_dir))
    return MultiModalInputs(cls(hf_config, path, tokenizer), MediaLimits.from_config(mm), mm.limit("image"),
                            mm.mm_processor_cache_mb * 1024 * 1024)
