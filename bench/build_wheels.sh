#!/usr/bin/env bash
# The wheels the GPU machine lacks, into .whl/ (git-ignored; named in the device call's `carry`).
# That machine has Python 3.12 with torch, CuPy (cupy-cuda13x), numpy, ml_dtypes, safetensors, pytest and
# hypothesis, and no network. What it lacks, at this project's venv's versions:
# - the compile path: egglog and what it imports when it loads (cloudpickle, black and black's own imports,
#   graphviz, opentelemetry-api, platformdirs), egglog stripped of its debug information (49 -> 6 MB);
# - the platform (`luminal serve`, `luminal deploy`) and the Triton HTTP client its end-to-end test calls it with.
# About 36 MB: the device call carries at most 64 MiB with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}
COMPILER=(egglog cloudpickle black click mypy-extensions packaging pathspec pytokens graphviz opentelemetry-api
    platformdirs typing-extensions)
PLATFORM=(fastapi starlette pydantic pydantic-core pydantic-settings python-dotenv typing-inspection annotated-types
    annotated-doc anyio idna sniffio uvicorn h11 httptools uvloop sqlalchemy greenlet alembic mako markupsafe httpx
    httpcore certifi typer rich markdown-it-py mdurl pygments shellingham prometheus-client orjson jinja2 tokenizers
    redis hiredis)
CLIENT=(tritonclient geventhttpclient gevent zope.event zope.interface brotli python-rapidjson urllib3)
# name==version for each, as the venv has it (the same versions the tests here ran with)
PINS=$($VENV_PY -c '
import sys
from importlib.metadata import version
for name in sys.argv[1:]:
    print(f"{name}=={version(name)}")
' "${COMPILER[@]}" "${PLATFORM[@]}" "${CLIENT[@]}")
mapfile -t PINS <<<"$PINS"
rm -rf .whl
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl "${PINS[@]}"
python3 bench/strip_wheel.py .whl/egglog-*.whl
ls .whl
du -sh .whl
