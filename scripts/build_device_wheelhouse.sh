#!/usr/bin/env bash
# Download, here, the wheels the GPU machine's image lacks into .whl/ (git ignores it; the device run carries it).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
# importlib-metadata 10 needs lazy-importer, which the image lacks; 9.x needs only zipp, which it has.
rm -f .whl/importlib_metadata-1[0-9].*.whl
for p in pydantic pydantic-core pydantic-settings python-dotenv annotated-types typing-inspection \
         typing-extensions msgspec pyzmq fastapi starlette uvicorn opentelemetry-api 'importlib-metadata<10' zipp psutil \
         anyio h11 click sniffio idna compressed-tensors loguru; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$p"
done
du -sh .whl
