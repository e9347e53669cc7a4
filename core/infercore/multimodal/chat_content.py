"""Chat messages with image content parts → messages the chat template renders and the images in order.

Two forms are made: ``structured`` keeps list contents, with each image part as ``{"type": "image"}`` (what
the chat templates of vision-language checkpoints iterate over), and ``flat`` joins the parts into text with
the model's placeholder text where each image stood (for templates that read string contents only).
:func:`pick_rendering` keeps the structured rendering when it holds one placeholder per image.

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
    flat, items, _ = chat_forms(messages, placeholder)
    return flat, items


def chat_forms(messages: list[dict[str, Any]],
               placeholder: str | None) -> tuple[list[dict[str, Any]], list[Any], list[dict[str, Any]]]:
    """``(flat, items, structured)``: see the module docstring."""
    out: list[dict[str, Any]] = []
    structured: list[dict[str, Any]] = []
    items: list[Any] = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            structured.append(message)
            continue
        texts: list[str] = []
        parts: list[dict[str, Any]] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
                parts.append({"type": "text", "text": part["text"]})
            elif kind in IMAGE_PART_TYPES:
                if placeholder is None:
                    raise MediaError(f"messages[{i}] has an {kind!r} content part but this model takes no images; "
                                     "send text parts only")
                items.append(_image_item(part, kind, i))
                texts.append(placeholder)
                parts.append({"type": "image"})
            else:
                raise MediaError(f"messages[{i}] has a {str(kind)[:40]!r} content part; this server takes text and "
                                 "image_url parts")
        out.append({**message, "content": "\n".join(texts)})
        structured.append({**message, "content": parts})
    return out, items, structured


def pick_rendering(structured: str | None, render_flat: Any, placeholder: str, num_images: int) -> str:
    """The structured rendering when it holds exactly one ``placeholder`` per image, else ``render_flat()``."""
    if structured is not None and structured.count(placeholder) == num_images:
        return structured
    return render_flat()


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
