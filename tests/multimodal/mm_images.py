"""Noise images for the multimodal tests."""

from __future__ import annotations

import base64
import io

import numpy as np


def random_image(width: int, height: int, seed: int):
    """A noise RGB image of ``width`` x ``height``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((height, width, 3)) * 255).astype("uint8"))


def data_uri(image, fmt: str = "PNG") -> str:
    """``image`` as a base64 data: URI."""
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()
