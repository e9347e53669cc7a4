"""`/v1/chat/completions` with images through the openai SDK: a data URI answers like the offline engine;
bad images (not an image, 0 bytes, huge dimensions, too many, a file outside the allowed folder) get a 400
that says why, and the server keeps serving."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from mm_images import data_uri, random_image
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("allowed_media")
    random_image(24, 24, seed=9).save(folder / "ok.png")
    return folder


@pytest.fixture(scope="module")
def vision_server(llava_clip_folder: Path, media_dir: Path) -> Iterator[ServerProcess]:
    pool = ServerPool()
    server = pool.start(llava_clip_folder, llava_clip_folder.parent,
                        ["--dtype", "float32", "--limit-mm-per-prompt", '{"image": 2}',
                         "--allowed-local-media-path", str(media_dir), "--max-image-pixels", "1000000"])
    yield server
    pool.stop_all()


def _ask(client: openai.OpenAI, urls: list[str], text: str = "what is this") -> openai.types.chat.ChatCompletion:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls] + [{"type": "text", "text": text}]
    return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": parts}],
                                          max_tokens=8, temperature=0)


def _b64(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _huge_png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (2000, 1000)).save(buf, format="PNG")  # 2 Mpx, over the server's 1 Mpx limit
    return buf.getvalue()


def test_image_chat_and_bad_images(vision_server: ServerProcess, llava_clip_folder: Path, media_dir: Path) -> None:
    client = openai.OpenAI(base_url=vision_server.url + "/v1", api_key="none")
    image = random_image(40, 30, seed=3)
    reply = _ask(client, [data_uri(image)])
    assert reply.choices[0].message.content is not None and reply.usage.prompt_tokens > 16

    from infercore import LLM, SamplingParams

    bad = {
        "not an image": (_b64(b"this is text, not a picture"), "not an image"),
        "empty": (_b64(b""), "0 bytes"),
        "huge": (_b64(_huge_png()), "2000x1000"),
        "outside folder": ((media_dir.parent / "elsewhere.png").as_uri(), "outside the allowed media folder"),
        "bad scheme": ("ftp://example/x.png", "scheme"),
        "remote off": ("https://example.invalid/x.png", "--enable-remote-media"),
    }
    for name, (url, reason) in bad.items():
        with pytest.raises(openai.BadRequestError) as err:
            _ask(client, [url])
        assert reason in str(err.value), f"{name}: {err.value}"
    with pytest.raises(openai.BadRequestError) as err:
        _ask(client, [data_uri(image)] * 3)
    assert "over the limit of 2 per prompt" in str(err.value)
    allowed = _ask(client, [(media_dir / "ok.png").as_uri()])
    assert allowed.choices[0].finish_reason in ("length", "stop")
    # Still serving, and the same as the offline engine for the same image.
    again = _ask(client, [data_uri(image)])
    assert again.choices[0].message.content == reply.choices[0].message.content
    llm = LLM(str(llava_clip_folder), dtype="float32", max_model_len=256, enforce_eager=True)
    offline = llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(image)}},
                                                     {"type": "text", "text": "what is this"}]}],
                       SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)[0]
    assert offline.outputs[0].text == reply.choices[0].message.content
