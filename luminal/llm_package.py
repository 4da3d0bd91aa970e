"""The LLM package (`.lpkg`): what `luminal deploy HF_FOLDER` uploads for a decoder language model.

One zip bundle (`luminal.zip_bundle`) of:
  manifest.json          format, versions, model type, layers, batch and position limits, both signatures, digests
  prefill.json           the prefill graph (graph.json's format): prompt -> next logits and every layer's cache
  step.json              the decode-step graph: one token per row and the caches -> next logits, grown caches
  paged.json             optional: the paged decode step (KV block pools read through block tables and written
                         in place; `luminal.nn.models.paged_decoding`), which deployments compile instead of step
  chunk.json             optional, beside paged.json: the paged chunk graph (several prompt tokens per row), with
                         which deployments prefill a prompt a chunk at a time
  weights.safetensors    the weights, once: both graphs bind the same tensors
  config.json            the Hugging Face config (eos/bos ids, model type)
  tokenizer.json         the Hugging Face `tokenizers` tokenizer
  tokenizer_config.json  optional: chat template, special tokens
  chat_template.jinja    optional: the chat template as transformers 5 saves it, beside tokenizer_config.json
  generation_config.json optional: eos ids and default sampling parameters
  lora_adapters.safetensors optional: the LoRA adapters deployed with the model (luminal/lora_package.py); with
                         the manifest's "lora" layout, every graph has the per-row adapter inputs (luminal/nn/lora.py)

Both graphs are built with `padded=True` (attention_mask and position_ids inputs), so rows of different
lengths share a batch. Reading checks the file like a `.lgraph` and never executes anything from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from luminal.graph import Graph, GraphError
from luminal.graph_file import WEIGHTS, _bind, _safetensors_parts, read_safetensors
from luminal.graph_json import GraphFileError, decode_graph, dump_json, encode_graph, parse_json, signature
from luminal.lora_adapter import LoraAdapter
from luminal.lora_package import ENTRY as LORA_ENTRY
from luminal.lora_package import check_all, decode_adapters, encode_adapters, layout_for, lora_inputs, read_adapters
from luminal.nn.lora import LoraLayout, attach_lora
from luminal.nn.models.checkpoint import align_names, read_checkpoint, widen_to_float32
from luminal.nn.models.config import load_config
from luminal.nn.models.expert_checkpoint import stack_experts
from luminal.nn.models.generation import DecoderGraphs, decoder_graphs
from luminal.nn.models.loading import causal_lm, max_positions
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, paged_chunk_graph, paged_step_graph, pool_name
from luminal.nn.quantized import quantize_checkpoint
from luminal.quantize import QUANTIZATIONS, check_quantize
from luminal.zip_bundle import BundleFormat, bundle_format_name, read_bundle, write_bundle


class LLMPackageError(GraphFileError):
    """An LLM package is malformed, inconsistent or hostile (a GraphFileError, so uploads answer 400)."""


PREFILL, STEP, PAGED, CHUNK, CONFIG = "prefill.json", "step.json", "paged.json", "chunk.json", "config.json"
TOKENIZER, TOKENIZER_CONFIG, CHAT_TEMPLATE = "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"
GENERATION_CONFIG = "generation_config.json"
MiB, GiB = 1 << 20, 1 << 30
FORMAT = BundleFormat(
    name="luminal.llm",
    version=1,
    # graph.json of a 32-layer model is a few MiB; tokenizers with 256k-token vocabularies reach ~35 MiB.
    caps={
        PREFILL: 256 * MiB,
        STEP: 256 * MiB,
        PAGED: 256 * MiB,
        CHUNK: 256 * MiB,
        WEIGHTS: 64 * GiB,
        CONFIG: 1 * MiB,
        TOKENIZER: 64 * MiB,
        TOKENIZER_CONFIG: 16 * MiB,
        CHAT_TEMPLATE: 1 * MiB,
        GENERATION_CONFIG: 1 * MiB,
        LORA_ENTRY: 16 * GiB,
    },
    required=frozenset({PREFILL, STEP, WEIGHTS, CONFIG, TOKENIZER}),
    error=LLMPackageError,
    stored=frozenset({WEIGHTS}),
)
JSON_OBJECTS = (CONFIG, TOKENIZER_CONFIG, GENERATION_CONFIG)
# Positions a deployment serves by default: Llama 3 declares 131072, far beyond what a CPU deployment can cache.
DEFAULT_MAX_POSITIONS = 2048


@dataclass
class LLMPackage:
    graphs: DecoderGraphs
    config: dict[str, Any]
    tokenizer_json: str
    max_batch: int
    max_positions: int
    tokenizer_config: dict[str, Any] = field(default_factory=dict)
    chat_template: str | None = None  # chat_template.jinja; tokenizer_config's "chat_template" otherwise
    generation_config: dict[str, Any] = field(default_factory=dict)
    quantize: str | None = None  # "int8": Q8_0 projection weights; "w8a8": and Q8_0 inputs (luminal/quantize.py)
    paged: Graph | None = None  # the paged decode step (packages built before it have none)
    block_size: int | None = None  # positions per KV block of `paged`
    chunk: Graph | None = None  # the paged chunk graph (packages built before it have none)
    lora: LoraLayout | None = None  # the graphs' LoRA stacks (None: no adapters can be served)
    adapters: dict[str, LoraAdapter] = field(default_factory=dict)  # deployed with the model, by name


def build_package(
    folder: str | Path,
    max_batch: int = 16,
    positions: int | None = None,
    quantize: str | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    lora: dict[str, Path] | None = None,
    lora_slots: int | None = None,
    lora_rank: int | None = None,
) -> LLMPackage:
    """Build the prefill and decode graphs of a Hugging Face folder and bind its checkpoint to them; with
    quantize="int8" the projections' weights are quantised to Q8_0 here, so the package carries int8 weights
    ("w8a8": the same weights, and the graphs quantise each projection's input rows to Q8_0 as well).
    The paged step (KV blocks of `block_size` positions) and chunk graphs are built too, for every model
    (sliding windows included). `lora` (adapter name -> PEFT folder) or `lora_slots` builds every graph with
    per-row adapter stacks (`lora_slots` - 1 adapters at once, ranks up to `lora_rank`); an adapter that does not
    fit is refused with LoraRefused (a ValueError) naming why."""
    folder = Path(folder)
    check_quantize(quantize)
    if not (folder / TOKENIZER).exists():
        raise FileNotFoundError(f"{folder} has no {TOKENIZER}: a language model is served with its tokenizer")
    raw = load_config(folder / CONFIG)
    limit = positions or min(max_positions(raw), DEFAULT_MAX_POSITIONS)
    model = causal_lm(raw, quantize)
    adapters = read_adapters(lora or {})
    layout = layout_for(adapters, lora_slots, lora_rank) if adapters or lora_slots else None
    if layout is not None:
        attach_lora(model, layout)
    graphs = decoder_graphs(model, max_batch=max_batch, max_positions=limit, padded=True)
    weights = align_names(list(graphs.prefill.weights), stack_experts(widen_to_float32(read_checkpoint(folder))))
    if quantize is not None:
        weights = quantize_checkpoint(model, weights)
    graphs.bind(weights)
    paged = paged_step_graph(model, max_batch, limit, block_size).bind(weights)
    chunk = paged_chunk_graph(model, max_batch, limit, block_size).bind(weights)
    missing = graphs.prefill.unbound_weights()
    if missing:
        raise GraphError(f"{len(missing)} weight(s) not in the checkpoint, e.g. {missing[:5]}")
    if layout is not None:
        check_all(adapters, layout, paged, raw.get("_name_or_path", ""))
    optional = {n: parse_json((folder / n).read_bytes(), n) for n in JSON_OBJECTS[1:] if (folder / n).exists()}
    template = folder / CHAT_TEMPLATE
    return LLMPackage(
        graphs,
        raw,
        (folder / TOKENIZER).read_text(encoding="utf-8"),
        max_batch,
        limit,
        optional.get(TOKENIZER_CONFIG, {}),
        template.read_text(encoding="utf-8") if template.exists() else None,
        optional.get(GENERATION_CONFIG, {}),
        quantize,
        paged,
        block_size,
        chunk,
        layout,
        adapters,
    )


def save_package(package: LLMPackage, path: Any) -> None:
    """Write the package atomically (no file is left on any error)."""
    graphs = package.graphs
    if set(graphs.prefill.weights) != set(graphs.step.weights):
        raise GraphError("the prefill and step graphs must declare the same weights (they share one entry)")
    entries = {
        PREFILL: [dump_json(encode_graph(graphs.prefill))],
        STEP: [dump_json(encode_graph(graphs.step))],
        WEIGHTS: _safetensors_parts(graphs.prefill),
        **text_entries(package),
    }
    if package.chunk is not None and package.paged is None:
        raise GraphError("a chunk graph goes with a paged step (it writes the same block pools)")
    for name, graph in ((PAGED, package.paged), (CHUNK, package.chunk)):
        if graph is not None:
            entries[name] = [dump_json(encode_graph(graph))]
    if package.adapters:
        entries[LORA_ENTRY] = [encode_adapters(package.adapters)]
    write_bundle(FORMAT, path, entries, _manifest_fields(package))


def text_entries(package: LLMPackage) -> dict[str, list[bytes]]:
    """The entries beside the graphs and weights (config, tokenizer, template), as a bundle writer takes them;
    the compiled model carries them too."""
    entries = {CONFIG: [dump_json(package.config)], TOKENIZER: [package.tokenizer_json.encode()]}
    if package.tokenizer_config:
        entries[TOKENIZER_CONFIG] = [dump_json(package.tokenizer_config)]
    if package.chat_template is not None:
        entries[CHAT_TEMPLATE] = [package.chat_template.encode()]
    if package.generation_config:
        entries[GENERATION_CONFIG] = [dump_json(package.generation_config)]
    return entries


def _manifest_fields(package: LLMPackage) -> dict[str, Any]:
    from luminal import __version__

    return {
        "luminal_version": __version__,
        "model_type": package.config.get("model_type"),
        "layers": package.graphs.layers,
        "max_batch": package.max_batch,
        "max_positions": package.max_positions,
        "quantize": package.quantize,
        "block_size": package.block_size,
        "lora": package.lora.to_json() if package.lora else None,
        "signatures": _signatures(package.graphs.prefill, package.graphs.step, package.paged, package.chunk),
    }


def _signatures(prefill: Graph, step: Graph, paged: Graph | None, chunk: Graph | None) -> dict[str, Any]:
    found = {"prefill": signature(prefill), "step": signature(step)}
    optional = {"paged": paged, "chunk": chunk}
    return {**found, **{name: signature(g) for name, g in optional.items() if g is not None}}


def is_llm_package(path: Any) -> bool:
    """Whether the file at `path` says it is an LLM package (only its manifest is read)."""
    return bundle_format_name(path, LLMPackageError) == FORMAT.name


def load_package(source: Any) -> LLMPackage:
    """Read a package (a path or its bytes); any defect raises LLMPackageError naming it."""
    manifest, raw = read_bundle(FORMAT, source)
    layers, max_batch, limit = (manifest.get(k) for k in ("layers", "max_batch", "max_positions"))
    if not all(type(v) is int and v > 0 for v in (layers, max_batch, limit)):
        raise LLMPackageError("manifest: layers, max_batch and max_positions must be positive integers")
    quantize = manifest.get("quantize")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise LLMPackageError(f"manifest: quantize {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")
    prefill = decode_graph(parse_json(bytes(raw[PREFILL]), PREFILL))
    step = decode_graph(parse_json(bytes(raw[STEP]), STEP))
    paged, chunk = (decode_graph(parse_json(bytes(raw[n]), n)) if n in raw else None for n in (PAGED, CHUNK))
    if manifest.get("signatures") != _signatures(prefill, step, paged, chunk):
        raise LLMPackageError("the manifest's signatures disagree with the graphs")
    lora = _lora_layout(manifest.get("lora"))
    for graph in (prefill, step, paged, chunk):
        if graph is not None and lora is None and lora_inputs(graph):
            raise LLMPackageError('the graphs have LoRA inputs but the manifest no "lora" layout')
    _check_decoder(prefill, step, layers)
    block_size = manifest.get("block_size")
    if chunk is not None and paged is None:
        raise LLMPackageError(f"{CHUNK} goes with {PAGED} (it writes the same block pools)")
    for name, graph in ((PAGED, paged), (CHUNK, chunk)):
        if graph is not None:
            _check_paged(graph, layers, block_size, name)
    arrays = read_safetensors(raw[WEIGHTS])
    for graph in (prefill, step, paged, chunk):
        if graph is not None:
            _bind(graph, arrays)  # the same arrays: the weights are held once
    objects = {n: parse_json(bytes(raw[n]), n) for n in JSON_OBJECTS if n in raw}
    for name, value in objects.items():
        if not isinstance(value, dict):
            raise LLMPackageError(f"{name} must be a JSON object")
    try:
        tokenizer = bytes(raw[TOKENIZER]).decode("utf-8")
        template = bytes(raw[CHAT_TEMPLATE]).decode("utf-8") if CHAT_TEMPLATE in raw else None
    except UnicodeDecodeError as e:
        raise LLMPackageError(f"the tokenizer or chat template is not UTF-8: {e.reason}") from None
    try:
        adapters = decode_adapters(raw.get(LORA_ENTRY))
    except ValueError as e:
        raise LLMPackageError(str(e)) from None
    return LLMPackage(
        DecoderGraphs(prefill, step, layers, padded=True),
        objects[CONFIG],
        tokenizer,
        max_batch,
        limit,
        objects.get(TOKENIZER_CONFIG, {}),
        template,
        objects.get(GENERATION_CONFIG, {}),
        quantize,
        paged,
        block_size if paged is not None else None,
        chunk,
        lora,
        adapters,
    )


def _lora_layout(raw: Any) -> LoraLayout | None:
    if raw is None:
        return None
    try:
        return LoraLayout.from_json(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise LLMPackageError(f"manifest: lora {str(raw)[:80]!r} is not a LoRA layout: {e}") from None


def _check_paged(paged: Graph, layers: int, block_size: Any, name: str = PAGED) -> None:
    """A paged step's or chunk's inputs and outputs, every pool donated to itself, and its blocks of
    `block_size`."""
    pools = {pool_name(k, part) for k in range(layers) for part in ("key", "value")}
    inputs = {"input_ids", "position_ids", "block_table", "slots"} | pools
    if set(paged.inputs) - lora_inputs(paged) != inputs or set(paged.outputs) != {"logits"} | pools:
        raise LLMPackageError(
            f"{name} is not a {layers}-layer paged graph: inputs {sorted(paged.inputs)[:8]}, "
            f"outputs {sorted(paged.outputs)[:8]}"
        )
    if paged.donated != {p: p for p in pools}:
        raise LLMPackageError(f"{name} must donate each pool input to the pool output of its name")
    pool = paged.nodes[paged.inputs[pool_name(0, "key")]]
    if type(block_size) is not int or pool.shape[2] != block_size:
        raise LLMPackageError(f"manifest: block_size {block_size!r:.40} disagrees with {name}'s pools")


def _check_decoder(prefill: Graph, step: Graph, layers: int) -> None:
    """The inputs and outputs the decoding loop feeds and reads must all be there."""
    cache = {f"present.{k}.{part}" for k in range(layers) for part in ("key", "value")}
    wanted = {
        PREFILL: (prefill, {"input_ids", "attention_mask", "position_ids"}, {"logits"} | cache),
        STEP: (step, {"input_ids", "attention_mask", "position_ids"} | {c.replace("present", "past") for c in cache},
               {"logits"} | cache),
    }  # fmt: skip
    for name, (graph, inputs, outputs) in wanted.items():
        if set(graph.inputs) - lora_inputs(graph) != inputs or set(graph.outputs) != outputs:
            raise LLMPackageError(
                f"{name} is not a {layers}-layer decoder graph: inputs {sorted(graph.inputs)[:8]}, "
                f"outputs {sorted(graph.outputs)[:8]}"
            )


__all__ = ["FORMAT", "LLMPackage", "LLMPackageError", "build_package", "is_llm_package", "load_package", "save_package"]
