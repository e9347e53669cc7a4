"""`/v1/chat/completions` for Gemma 3 with an image data URI (the openai SDK): the reply is the offline engine's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from multimodal.mm_images import data_uri, random_image
from server.conftest import ServerPool, ServerProcess  # tests/ is on sys.path: its conftest has no package

from infercore import LLM, SamplingParams


@pytest.fixture(scope="module")
def gemma3_server(gemma3_vl_folder: Path) -> Iterator[ServerProcess]:
    pool = ServerPool()
    yield pool.start(gemma3_vl_folder, gemma3_vl_folder.parent, ["--dtype", "float32", "--max-model-len", "128"])
    pool.stop_all()


def test_gemma3_chat_completion_with_an_image(gemma3_server: ServerProcess, gemma3_vl_folder: Path) -> None:
    client = openai.OpenAI(base_url=gemma3_server.url + "/v1", api_key="none")
    image = random_image(40, 30, seed=3)
    parts = [{"type": "image_url", "image_url": {"url": data_uri(image)}}, {"type": "text", "text": "what is this"}]
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": parts}],
                                           max_tokens=8, temperature=0)
    assert reply.usage.prompt_tokens > 16 and reply.choices[0].message.content is not None
    llm = LLM(str(gemma3_vl_folder), dtype="float32", max_model_len=128, enforce_eager=True)
    offline = llm.chat([{"role": "user", "content": parts}], SamplingParams(max_tokens=8, temperature=0),
                       use_tqdm=False)[0]
    assert offline.outputs[0].text == reply.choices[0].message.content
    assert len(offline.prompt_token_ids) == reply.usage.prompt_tokens
