"""The `luminal` command: `serve` runs the embedded platform; `deploy` uploads a model and waits for its compile;
`login`, `models`, `deployments`, `keys`, `admin`, `predict`, `complete`, `chat`, `usage`, `compile` and
`compile-worker` are registered from their own modules.

Client commands read the server and key from --url / --api-key, else $LUMINAL_URL / $LUMINAL_API_KEY, else the
config file `luminal login` writes (see cli/config.py). Errors print one line and exit with status 1.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from luminal.cli import adapters, admin, deployments, keys, llm, login, models, predict
from luminal.cli import compile as compile_command
from luminal.cli.client import ClientError
from luminal.cli.common import KeyOption, UrlOption, err, fail, out
from luminal.cli.compile_worker import compile_worker
from luminal.cli.config import connect
from luminal.cli.curl_example import curl_command
from luminal.cli.embedding import embedding_package_file, is_embedding_folder

__all__ = ["KeyOption", "UrlOption", "app", "err", "fail", "main", "out"]  # other command modules import these

app = typer.Typer(help="Luminal Cloud: serve the platform, deploy .lgraph models.", no_args_is_help=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    grpc_port: Annotated[
        int | None,
        typer.Option(help="also serve the Open Inference Protocol over gRPC here (0: off; default $LUMINAL_GRPC_PORT)"),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="platform state (default $LUMINAL_DATA_DIR or ~/.luminal)")
    ] = None,
) -> None:
    """Run the gateway, compile jobs and inference in one process. The first start creates a tenant and prints
    its API key once ($LUMINAL_BOOTSTRAP_KEY chooses the key instead)."""
    import uvicorn
    from pydantic import ValidationError

    from luminal.gateway.app import create_app
    from luminal.scheduler.collector import settle_serving_process
    from luminal.scheduler.openmp_spin import bound_openmp_spinning
    from luminal.store.settings import Settings

    try:
        given = {"data_dir": data_dir, "grpc_port": grpc_port}
        settings = Settings(grpc_host=host, **{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        fail(f"invalid LUMINAL_* setting: {e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}")

    bound_openmp_spinning()  # before any program loads: the thread workers load theirs as the platform starts

    def announce(platform) -> None:
        if platform.bootstrap_key and settings.bootstrap_key:
            out.print("Created the first tenant with the key from LUMINAL_BOOTSTRAP_KEY.")
        elif platform.bootstrap_key:
            out.print("Created the first tenant. Its API key, shown only this once:")
            out.print(platform.bootstrap_key, highlight=False, soft_wrap=True)
        grpc = f" and gRPC on {host}:{settings.grpc_port}" if settings.grpc_port else ""
        out.print(f"Serving on http://{host}:{port}{grpc} (data in {settings.data_dir})", highlight=False)
        settle_serving_process()

    uvicorn.run(create_app(settings, on_start=announce), host=host, port=port, log_level="warning")


def _default_name(path: Path) -> str:
    # Model names are path-safe (see gateway/schemas.py); a file name may not be.
    name = re.sub(r"[^A-Za-z0-9_.\-]", "-", path.stem).lstrip("-_.")
    return name[:128] or "model"


@app.command()
def deploy(
    file: Annotated[
        Path,
        typer.Argument(help="a .lgraph file, or a Hugging Face LLM, BERT encoder or sentence-transformers folder"),
    ],
    url: UrlOption = None,
    api_key: KeyOption = None,
    name: Annotated[str | None, typer.Option(help="model name (default: the file's name)")] = None,
    # The CPU unless asked, as Modal runs a function without `gpu=`: a GPU is a priced choice the user makes.
    gpu: Annotated[
        str, typer.Option(help="GPU type to compile for and run on: cpu, or one the platform has (h100, a100, l4...)")
    ] = "cpu",
    max_batch_size: Annotated[int, typer.Option(help="largest batch the scheduler forms")] = 8,
    max_delay_ms: Annotated[int, typer.Option(help="longest a request waits for its batch")] = 5,
    min_replicas: Annotated[int, typer.Option(help="workers kept warm")] = 0,
    max_replicas: Annotated[int, typer.Option(help="most workers")] = 1,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the compile")] = 600,
    prefill_chunk: Annotated[
        int, typer.Option(help="a language model's prompt tokens prefilled per round, between decode steps")
    ] = 256,
    max_waiting: Annotated[
        int, typer.Option(help="a language model's sequences allowed to wait for the batch (past it: 429)")
    ] = 256,
    quantize: Annotated[
        str | None,
        typer.Option(
            help="int8: a language model's weights as Q8_0 (int8 in blocks of 32, one scale each); "
            "w8a8: and each projection's input rows too (int8 x int8 GEMMs)"
        ),
    ] = None,
    pooling: Annotated[
        str | None, typer.Option(help="mean, cls or last: how an encoder folder's token states become one embedding")
    ] = None,
    normalize: Annotated[bool, typer.Option(help="an encoder folder's embeddings scaled to unit length")] = False,
    matryoshka: Annotated[
        bool, typer.Option(help="the embedding model was trained so that `dimensions` may cut its embeddings")
    ] = False,
    lora: Annotated[
        list[str] | None,
        typer.Option(help="NAME=ADAPTER_DIR: a PEFT LoRA adapter served as model NAME (repeatable)"),
    ] = None,
    lora_slots: Annotated[
        int | None, typer.Option(help="LoRA adapters served at once, plus one for the base [default: 9 with --lora]")
    ] = None,
    lora_rank: Annotated[
        int | None, typer.Option(help="the widest LoRA rank the deployment takes [default: 16 or the widest given]")
    ] = None,
) -> None:
    """Upload FILE (with a progress bar), deploy it, wait for the compile and print the endpoint."""
    folder = file if file.is_dir() else None
    if quantize is not None:
        from luminal.quantize import check_quantize

        try:
            check_quantize(quantize)
        except ValueError as e:
            fail(f"--quantize: {e}")
        if folder is None:
            fail("--quantize applies to a Hugging Face language-model folder, not to a graph file")
    try:
        lora_options = llm.LoraOptions.parse(lora or [], lora_slots, lora_rank)
    except ValueError as e:
        fail(str(e))
    if lora_options is not None and folder is None:
        fail("--lora applies to a Hugging Face language-model folder, not to a graph file")
    embedding = folder is not None and is_embedding_folder(folder)
    if embedding and quantize is not None:
        fail("--quantize applies to a language model, not to an embedding model's folder")
    if not embedding and (pooling is not None or normalize or matryoshka):
        fail("--pooling, --normalize and --matryoshka apply to a BERT or sentence-transformers folder")
    if folder is not None:  # built here, uploaded as one file: a language model's prefill and decode graphs, or
        # a sentence-transformers model's graph; each with its tokenizer
        name = name or _default_name(folder.with_name(folder.name + ".pkg"))  # "Llama-3.2-1B" keeps its dots
        if embedding:
            file = embedding_package_file(folder, max_batch_size, pooling, normalize, matryoshka)
        else:
            file = llm.llm_package_file(folder, max_batch_size, quantize, lora_options)
    if not file.is_file():
        fail(f"{file}: no such file")
    name = name or _default_name(file)
    try:
        client = connect(url, api_key)
        try:
            with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), console=err, transient=True) as progress:  # fmt: skip
                task = progress.add_task(f"uploading {file.name}", total=file.stat().st_size)
                version = client.upload_model(file, name, lambda n: progress.advance(task, n))
            spec = dict(model=name, version=version["version"], gpu_type=gpu, max_batch_size=max_batch_size)
            spec |= dict(max_queue_delay_ms=max_delay_ms, min_replicas=min_replicas, max_replicas=max_replicas)
            if folder is not None and not embedding:  # settings of the generation engine (language models only)
                spec |= dict(prefill_chunk=prefill_chunk, max_waiting=max_waiting)
            deployment = client.create_deployment(**spec)
            with err.status(f"compiling {name} version {version['version']}"):
                deployment = client.wait_for_compile(deployment["id"], timeout)
        finally:
            client.close()
    except ClientError as e:
        fail(str(e))
    if deployment["status"] == "failed":
        fail(f"the compile failed: {deployment['error']}")
    if deployment["status"] == "unschedulable":  # compiled, but it would answer every request 503
        fail(
            f"deployment {deployment['id']} is compiled for {deployment['target']} but cannot run: "
            f"{deployment['error']}. Remove it with `luminal deployments rm {deployment['id']}`, or deploy with a "
            "--gpu this platform has (cpu always)."
        )
    endpoint = client.url + deployment["endpoint"]
    out.print(f"Deployed {name} version {version['version']} (deployment {deployment['id']}).", highlight=False)
    if embedding:
        out.print(f"OpenAI-compatible API: {client.url}/openai/v1/embeddings (model {name!r})", highlight=False,
                  soft_wrap=True)  # fmt: skip
        return
    if folder is not None:
        out.print(f"OpenAI-compatible API: {client.url}/openai/v1 (model {name!r})", highlight=False, soft_wrap=True)
        out.print(f"Try: luminal complete {name} 'Hello' or luminal chat {name}", highlight=False, markup=False)
        return
    out.print(f"Endpoint: {endpoint}", highlight=False, soft_wrap=True)
    command = curl_command(endpoint, version["inputs"])
    if command is None:  # inputs too large to spell out as JSON on one line: each from a .npy file instead
        files = " ".join(f"--input {shlex.quote(t['name'] + '=' + t['name'] + '.npy')}" for t in version["inputs"])
        command = f"luminal predict {shlex.quote(name)} --version {version['version']} {files}  # a .npy file per input"
    # Printed as is (no markup, emoji codes or highlighting), so the line pastes into bash unchanged.
    out.print(command, highlight=False, soft_wrap=True, markup=False, emoji=False)


app.command()(login.login)
app.add_typer(models.app, name="models")
app.add_typer(deployments.app, name="deployments")
app.add_typer(adapters.app, name="adapters")
app.add_typer(keys.app, name="keys")
app.add_typer(admin.app, name="admin")
app.command()(predict.predict)
app.command()(llm.complete)
app.command()(llm.chat)
app.command(name="compile")(compile_command.compile_file)
app.command(name="compile-worker")(compile_worker)


def main() -> None:
    app()


from luminal.cli import traffic as _traffic  # noqa: E402, F401  (registers `luminal deployments traffic`, `rollback`)
from luminal.cli import usage as _usage  # noqa: E402, F401  (registers `luminal usage` on app)
