"""Chat messages with image content parts → messages the chat template renders as text (each image part
becomes the model's placeholder text where it stood) and the images in order.

Parts taken: ``{"type": "text", "text": ...}``, ``{"type": "image_url", "image_url": {"url": ...}}`` (or
the URL as a plain string), and, in-process (``LLM.chat``), ``{"type": "image_pil", "image_pil": image}``
or ``{"type": "image", "image": image}``.
"""

from __future__ import annotations

from typing import Any

from infercore.multimodal.media import MediaError

IMAGE_PART_TYPES = ("image_url", "image_pil", "image")


def split_image_parts(messages: list[dict[str, Any]], placeholder: str | None) -> tuple[list[dict[str, Any]], list[Any]]:
    """The messages with list contents flattened to text (parts joined by newlines, image parts as
    ``placeholder``) and the image items (URL strings or in-process images) in order. ``placeholder`` None:
    the model takes no images, and an image part is a :class:`MediaError`."""
    out: list[dict[str, Any]] = []
    items: list[Any] = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        texts: list[str] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind in IMAGE_PART_TYPES:
                if placeholder is None:
                    raise MediaError(f"messages[{i}] has an {kind!r} content part but this model takes no images; "
                                     "send text parts only")
                items.append(_image_item(part, kind, i))
                texts.append(placeholder)
            else:
                raise MediaError(f"messages[{i}] has a {str(kind)[:40]!r} content part; this server takes text and "
                                 "image_url parts")
        out.append({**message, "content": "\n".join(texts)})
    return out, items


def _image_item(part: dict[str, Any], kind: str, index: int) -> Any:
    value = part.get(kind)
    if kind == "image_url":
        value = value.get("url") if isinstance(value, dict) else value
        if not isinstance(value, str) or not value:
            raise MediaError(f"messages[{index}] has an image_url part without a url; send "
                             '{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}')
    elif value is None:
        raise MediaError(f"messages[{index}] has an {kind!r} part without its image")
    return value
