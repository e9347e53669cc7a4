#!/usr/bin/env bash
# Download, here, the wheels the GPU machine's image lacks (py3.12, manylinux x86_64); git ignores both folders.
#   bash scripts/build_device_wheelhouse.sh          .whl/: what our packages need, and py-spy
#   bash scripts/build_device_wheelhouse.sh aiperf   .whl-aiperf/: aiperf and its needs, less what the image has
#                                                    (scripts/aiperf_crosscheck.sh installs it apart, --no-deps)
set -euo pipefail
cd "$(dirname "$0")/.."
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
download() {  # download DEST PIP-ARGS...
    local dest=$1; shift
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
        -d "$dest" "$@"
}

if [[ "${1:-}" != aiperf ]]; then
    # A fresh folder each time: a wheel left from an older download (two versions of one package) makes the
    # device's pip refuse the whole install.
    rm -rf .whl.tmp && mkdir -p .whl.tmp
    # importlib-metadata 10 needs lazy-importer, which the image lacks; 9.x needs only zipp, which it has.
    for p in pydantic pydantic-core pydantic-settings python-dotenv annotated-types typing-inspection \
             typing-extensions msgspec pyzmq fastapi starlette uvicorn opentelemetry-api 'importlib-metadata<10' zipp \
             psutil anyio h11 click sniffio idna compressed-tensors loguru py-spy httptools uvloop; do
        download .whl.tmp --no-deps "$p"
    done
    rm -rf .whl && mv .whl.tmp .whl
    du -sh .whl
    exit 0
fi

# The image's packages (the device notes' list, 2026-11-17): the image's own versions serve aiperf.
IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson
ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"
# Never imported by `aiperf profile` (its plots, dashboard, Kubernetes operator, sweeps and datasets; checked
# by blocking their imports in a CPU run of aiperf_crosscheck.sh).
UNUSED="plotly dash dash-bootstrap-components kaleido choreographer flask sqlalchemy alembic optuna kubernetes-asyncio
kopf soundfile datasets textual"
rm -rf .whl-aiperf .whl-aiperf.tmp
download .whl-aiperf.tmp aiperf
mkdir -p .whl-aiperf
declare -A SKIP
for name in $IMAGE $UNUSED; do SKIP[$name]=1; done
for wheel in .whl-aiperf.tmp/*.whl; do
    name=$(basename "$wheel"); name=${name%%-[0-9]*}; name=$(tr 'A-Z_.' 'a-z--' <<<"$name")
    [[ -n "${SKIP[$name]:-}" ]] || mv "$wheel" .whl-aiperf/
done
rm -rf .whl-aiperf.tmp
grep -qx '/.whl-aiperf/' .git/info/exclude 2>/dev/null || echo '/.whl-aiperf/' >>.git/info/exclude
size=$(du -sm .whl-aiperf | cut -f1)
echo "$(ls .whl-aiperf | wc -l) wheels, ${size} MB in .whl-aiperf"
if ((size >= 60)); then echo ".whl-aiperf is over 60 MB: too big to carry beside the tree" >&2; exit 1; fi
