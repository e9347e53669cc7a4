"""Loading an image a request names: a ``data:`` URI, a ``file://`` path under ``--allowed-local-media-path``,
or (opt-in, ``--enable-remote-media``) an http(s) URL fetched within a size and time bound. Every refusal is
a :class:`MediaError` (a ValueError: the server answers 400) that says why."""

from __future__ import annotations

import base64
import binascii
import io
import os
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PIL import Image

    from infercore.multimodal_config import MultiModalConfig


class MediaError(ValueError):
    """An image a request sent or named can't be used; the message says why and what to send instead."""

    def __init__(self, message: str, param: str | None = "messages") -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class MediaLimits:
    """Where images may come from and how big they may be (from :class:`MultiModalConfig`)."""

    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 50_000_000
    allowed_local_path: str | None = None
    enable_remote: bool = False
    fetch_timeout: float = 10.0

    @classmethod
    def from_config(cls, config: MultiModalConfig) -> MediaLimits:
        return cls(config.max_media_bytes, config.max_image_pixels, config.allowed_local_media_path,
                   config.enable_remote_media, config.media_fetch_timeout)


def decode_image(data: bytes, limits: MediaLimits, where: str = "the image") -> Image.Image:
    """An RGB image from encoded bytes, refused when empty, too large, not an image, or too many pixels
    (checked from the header, before the pixels are decoded)."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise MediaError(f"{where} is empty (0 bytes); send an encoded PNG, JPEG, WebP or GIF image")
    if len(data) > limits.max_bytes:
        raise MediaError(f"{where} is {len(data)} bytes, over the limit of {limits.max_bytes} (--max-media-bytes); "
                         "send a smaller image")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise MediaError(f"{where} is not an image format this server reads; send a PNG, JPEG, WebP or GIF "
                         "image") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise MediaError(f"{where} could not be read as an image ({exc}); send a valid image") from None
    width, height = image.size
    if width <= 0 or height <= 0 or width * height > limits.max_pixels:
        raise MediaError(f"{where} is {width}x{height} pixels, over the limit of {limits.max_pixels} pixels "
                         "(--max-image-pixels); send a smaller image")
    try:
        image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise MediaError(f"{where} could not be decoded ({exc}); send a valid image") from None
    return image.convert("RGB")


def load_image_url(url: str, limits: MediaLimits, where: str = "the image") -> Image.Image:
    """The image at ``url``: ``data:image/...;base64,...``, ``file://`` (under the allowed folder only) or
    http(s) (only with remote media enabled)."""
    if not isinstance(url, str) or not url:
        raise MediaError(f"{where} has no URL; send image_url.url as a data: URI")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return decode_image(_data_uri_bytes(url, limits, where), limits, where)
    if scheme == "file":
        return decode_image(_local_file_bytes(url, limits, where), limits, where)
    if scheme in ("http", "https"):
        return decode_image(_fetch(url, limits, where), limits, where)
    raise MediaError(f"{where} has a URL of scheme {scheme[:16]!r}; send a data: URI (or a file:// path under "
                     "--allowed-local-media-path, or http(s) with --enable-remote-media)")


def _data_uri_bytes(url: str, limits: MediaLimits, where: str) -> bytes:
    header, sep, payload = url.partition(",")
    if not sep:
        raise MediaError(f"{where} is a data: URI without a ',' before its data; send data:image/png;base64,...")
    if not header.endswith(";base64"):
        raise MediaError(f"{where} is a data: URI that is not base64; send data:image/png;base64,...")
    if len(payload) > limits.max_bytes * 4 // 3 + 4:
        raise MediaError(f"{where} is over the limit of {limits.max_bytes} bytes (--max-media-bytes); send a "
                         "smaller image")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"{where} is a data: URI whose base64 data does not decode; send valid base64") from None


def _local_file_bytes(url: str, limits: MediaLimits, where: str) -> bytes:
    allowed = limits.allowed_local_path
    if not allowed:
        raise MediaError(f"{where} names a local file, but this server reads no local files (start it with "
                         "--allowed-local-media-path FOLDER to allow a folder); send a data: URI")
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise MediaError(f"{where} names a file on host {parsed.netloc[:64]!r}; file:// URLs must be local")
    path = os.path.realpath(urllib.parse.unquote(parsed.path))
    root = os.path.realpath(allowed)
    if os.path.commonpath([path, root]) != root:
        raise MediaError(f"{where} names a file outside the allowed media folder (--allowed-local-media-path); "
                         "name a file inside it or send a data: URI")
    try:
        size = os.path.getsize(path)
        if size > limits.max_bytes:
            raise MediaError(f"{where} is {size} bytes, over the limit of {limits.max_bytes} (--max-media-bytes)")
        with open(path, "rb") as f:
            return f.read(limits.max_bytes + 1)
    except OSError:
        raise MediaError(f"{where} names a file that can't be read; check the path") from None


def _fetch(url: str, limits: MediaLimits, where: str) -> bytes:
    if not limits.enable_remote:
        raise MediaError(f"{where} is an http(s) URL, but this server fetches no remote media (start it with "
                         "--enable-remote-media to allow it); send a data: URI")
    import httpx

    chunks: list[bytes] = []
    total = 0
    deadline = time.monotonic() + limits.fetch_timeout  # for the whole body, not only each read
    try:
        with httpx.stream("GET", url, timeout=limits.fetch_timeout, follow_redirects=True) as response:
            if response.status_code != 200:
                raise MediaError(f"fetching {where} answered HTTP {response.status_code}; check the URL")
            for chunk in response.iter_bytes():
                total += len(chunk)
                if total > limits.max_bytes:
                    raise MediaError(f"{where} is over the limit of {limits.max_bytes} bytes (--max-media-bytes)")
                if time.monotonic() > deadline:
                    raise MediaError(f"fetching {where} took over {limits.fetch_timeout:g} s (--media-fetch-timeout); "
                                     "send a data: URI")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise MediaError(f"fetching {where} failed ({type(exc).__name__}) within {limits.fetch_timeout:g} s "
                         "(--media-fetch-timeout); check the URL or send a data: URI") from None
    return b"".join(chunks)


def as_image(item: Any, limits: MediaLimits, where: str) -> Image.Image:
    """An image given in-process (``LLM.generate``): a PIL image, encoded bytes, or a URL string."""
    from PIL import Image

    if isinstance(item, Image.Image):
        width, height = item.size
        if width * height > limits.max_pixels or width <= 0 or height <= 0:
            raise MediaError(f"{where} is {width}x{height} pixels, over the limit of {limits.max_pixels} "
                             "(--max-image-pixels)", "multi_modal_data")
        return item.convert("RGB")
    if isinstance(item, (bytes, bytearray)):
        return decode_image(bytes(item), limits, where)
    if isinstance(item, str):
        return load_image_url(item, limits, where)
    raise MediaError(f"{where} is a {type(item).__name__}; pass a PIL image, encoded bytes or a data: URI",
                     "multi_modal_data")
