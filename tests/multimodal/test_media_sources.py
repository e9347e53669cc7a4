"""Media sources and limits without a server: data URIs, allowed local files, and http(s) fetched from a
loopback server only when enabled, within the byte limit."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest
from mm_images import data_uri, random_image

from infercore.multimodal.media import MediaError, MediaLimits, load_image_url


@pytest.fixture
def image_server(tmp_path: Path):
    random_image(20, 10, seed=1).save(tmp_path / "small.png")
    random_image(300, 300, seed=2).save(tmp_path / "large.png")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()
    server.server_close()


def test_remote_images_are_fetched_only_when_enabled_and_within_limits(image_server):
    base, folder = image_server
    with pytest.raises(MediaError, match="--enable-remote-media"):
        load_image_url(f"{base}/small.png", MediaLimits())
    remote = MediaLimits(enable_remote=True, fetch_timeout=5, max_bytes=100_000)
    assert load_image_url(f"{base}/small.png", remote).size == (20, 10)
    with pytest.raises(MediaError, match="over the limit of 100000 bytes"):
        load_image_url(f"{base}/large.png", remote)
    with pytest.raises(MediaError, match="HTTP 404"):
        load_image_url(f"{base}/missing.png", remote)


def test_local_files_and_data_uris(tmp_path: Path):
    allowed = tmp_path / "media"
    allowed.mkdir()
    random_image(8, 8, seed=3).save(allowed / "a.png")
    (tmp_path / "secret.png").write_bytes((allowed / "a.png").read_bytes())
    limits = MediaLimits(allowed_local_path=str(allowed))
    assert load_image_url((allowed / "a.png").as_uri(), limits).size == (8, 8)
    for escape in [(tmp_path / "secret.png").as_uri(), (allowed / ".." / "secret.png").as_uri()]:
        with pytest.raises(MediaError, match="outside the allowed media folder"):
            load_image_url(escape, limits)
    with pytest.raises(MediaError, match="reads no local files"):
        load_image_url((allowed / "a.png").as_uri(), MediaLimits())
    assert load_image_url(data_uri(random_image(5, 7, seed=4), "JPEG"), MediaLimits()).size == (5, 7)
    with pytest.raises(MediaError, match="not base64"):
        load_image_url("data:image/png,rawbytes", MediaLimits())
