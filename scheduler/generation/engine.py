"""The generation engine of one deployed language model: continuous batching over decode steps.

Between steps the engine admits waiting sequences while the batch has room (prefilled together, left-padded, each
first token chosen and delivered; or, for a model compiled with a chunk program, prefilled a chunk per round into
their cache blocks, `ChunkedPrefill`, joining once their prompt is done); then one decode step runs over every
running sequence at once, each row's token is chosen by that sequence's sampler and delivered, and a sequence
leaves the batch the step it finishes or is cancelled, freeing its cache. The KV caches stay in the engine between
steps: in block pools the step writes in place (`PagedCache`, for a model compiled with a paged step), or as one
left-padded batch the step returns grown (`KVBatch`, models compiled before). The pools and the logits stay in the
memory space of the runtime that runs the paged programs (memory_space.py): on a CUDA worker the pools are device
arrays the step and the chunk write in place, and the tokens are chosen on the device (choosers.py). A paged
sequence reserves its blocks as it joins (`BlockPool`'s policy); while too few are free it waits, first in line,
and is never failed for it. Waiting sequences are ordered by priority, then arrival, and may have a deadline for
joining (waiting.py). After each round the running constrained sequences' next grammar masks are computed on a
thread of their own while the next step runs (mask_prefetch.py).

`run_once()` does one round of that synchronously ("burst" mode for tests); `start()` runs rounds on a thread
that sleeps while nothing is running or waiting, and while a round ran nothing and let nobody join: then only a
change can let someone join (a submit, a cancel, the engine's closing, or the next waiting deadline, which its
sleep is timed to), so it sleeps until one instead of repeating that round.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from luminal.lora_adapter import LoraAdapter, check_adapter
from luminal.lora_bank import LoraBank
from luminal.nn.models.generation import positions_of
from luminal.scheduler.generation.block_pool import PoolTooSmall, blocks_for
from luminal.scheduler.generation.choosers import choose_each, chooser_for
from luminal.scheduler.generation.chunked_prefill import PREFILL_CHUNK, ChunkedPrefill
from luminal.scheduler.generation.kv_batch import KVBatch
from luminal.scheduler.generation.language_model import LanguageModel
from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.mask_prefetch import MaskPrefetch
from luminal.scheduler.generation.memory_space import DeviceMemory, HostMemory, memory_for
from luminal.scheduler.generation.paged_cache import PagedCache
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence
from luminal.scheduler.generation.stream import Account, Delta, EventSink, Failed, TokenStream
from luminal.scheduler.generation.waiting import MAX_WAITING, WaitingLine
from luminal.scheduler.generation.waiting import EngineBusy as EngineBusy  # submit raises it: import it from here
from luminal.scheduler.work import DEFAULT_PRIORITY

log = logging.getLogger(__name__)
# Padded prompt tokens one prefill takes: newcomers are prefilled together, but a round of prefill delays every
# running sequence's next token, so it is bounded.
MAX_PREFILL_TOKENS = 4096
# Bytes of KV pool a paged engine allocates unless told its block count: at most what max_batch sequences of
# max_positions need.
DEFAULT_CACHE_BYTES = 1 << 30


class PromptTooLong(ValueError):
    """The prompt plus the tokens asked for do not fit the model's positions (a 400)."""


class UnknownAdapter(ValueError):
    """The sequence names a LoRA adapter the model does not hold (a 404 at the API)."""


def check_length(prompt: list[int], max_tokens: int, max_positions: int) -> int:
    """The positions the sequence needs (prompt plus max_tokens); PromptTooLong when that is none or too many."""
    total = len(prompt) + max_tokens
    if not prompt:
        raise PromptTooLong("the prompt is empty: it must hold at least one token")
    if total > max_positions:
        raise PromptTooLong(
            f"this model's maximum context length is {max_positions} tokens; the prompt has "
            f"{len(prompt)} and max_tokens asks for {max_tokens} more ({total})"
        )
    return total


class GenerationEngine:
    def __init__(
        self,
        model: LanguageModel,
        max_waiting: int = MAX_WAITING,
        on_end: Callable[[TokenStream], None] | None = None,
        cache_blocks: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        prefill_chunk: int = PREFILL_CHUNK,
    ):
        self.model = model
        # Called on the engine thread with each sequence that ran and ended (finished or cancelled): billing.
        self.on_end = on_end
        # Where the pools and logits live: the step's runtime's memory (the concatenating step's caches: the host).
        self.memory = HostMemory() if model.block_size is None else memory_for(model.step)
        self.batch: PagedCache | KVBatch = _cache(model, cache_blocks, self.memory)
        self.chooser = chooser_for(self.memory)
        self.masks = MaskPrefetch()  # the running constrained sequences' next masks, computed during the step
        # Newcomers' prompts prefilled `prefill_chunk` tokens a round, when the model has a chunk program.
        self.chunked = (
            None if model.chunk is None else ChunkedPrefill(model.chunk, self.batch, prefill_chunk, self.lora_feed)
        )
        self.running: list[TokenStream] = []  # row r of the batch is running[r]
        self.waiting = WaitingLine(max_waiting, clock)  # its clock times the waiting sequences' deadlines
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        # Counts the changes that can let a waiting sequence join (submits, cancels); `_stuck_at` is the count
        # when a round last ran nothing and let nobody join, so the thread sleeps until the count moves on.
        self._changes, self._stuck_at = 0, -1
        # Counters for metrics and benchmarks: decode steps run, and the rows they stepped (rows / steps is the
        # mean batch), prefills run.
        self.steps = self.rows_stepped = self.prefills = 0

    def submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        sink: EventSink | asyncio.AbstractEventLoop,
        account: Account | None = None,
        priority: int = DEFAULT_PRIORITY,
        timeout_s: float | None = None,
        waited_s: float = 0.0,
    ) -> TokenStream:
        """Queue a sequence at `priority` (1 most urgent .. 10) to join the batch within `timeout_s` seconds (None:
        no deadline) of its request's arrival, `waited_s` seconds ago; it ends with Expired if it cannot. Its events
        go to `sink` (an asyncio loop: to a `LoopSink` on it, which `async for` over the stream reads). Raises
        EngineBusy when too many already wait."""
        total = check_length(prompt, params.max_tokens, self.model.max_positions)
        try:
            self.batch.check_fits(total)
        except PoolTooSmall as e:
            raise PromptTooLong(f"{e}: ask for fewer tokens") from None
        codec = self.model.codec
        sequence = Sequence(prompt, params, codec.decode, codec.eos_token_ids, grammars=codec.grammars)
        stream = TokenStream(sequence, sink, account)
        stream.on_cancel = self._changed
        with self._wake:  # the slot resolved under the lock a removal takes: it cannot be freed in between
            stream.lora_slot = self._lora_slot(params.lora)
            self.waiting.add(stream, priority, timeout_s, waited_s)
            self._changes += 1
            self._wake.notify()
        return stream

    def _lora_slot(self, name: str | None) -> int:
        bank = self.model.lora
        if name is None:
            return 0
        if bank is None or name not in bank.slots:
            held = sorted(bank.slots) if bank else []
            raise UnknownAdapter(f"LoRA adapter {name!r:.80} is not loaded (this model holds {held})")
        return bank.slots[name]

    def add_adapter(self, name: str, adapter: LoraAdapter) -> None:
        """Serve LoRA adapter `name` from now on (LoraRefused when it does not fit the model's stacks, ValueError
        when no slot is free). It is written into a slot no row reads, so the running batch goes on."""
        bank = self._bank()
        check_adapter(adapter, bank.layout, bank.shapes, base="")
        with self._wake:
            bank.install(name, adapter)

    def remove_adapter(self, name: str) -> None:
        """Refuse adapter `name` to new sequences now (KeyError when not loaded); its slot is cleared for reuse
        once the sequences already using it have ended (they finish with it)."""
        with self._wake:
            self._bank().retire(name)
            self._changes += 1
            self._wake.notify()

    def _bank(self) -> LoraBank:
        if self.model.lora is None:
            raise ValueError("this model was built without LoRA stacks (deploy it with --lora or --lora-slots)")
        return self.model.lora

    def release_retired(self) -> None:
        """Free the retired adapters' slots that no running, prefilling or waiting sequence reads."""
        bank = self.model.lora
        if bank is None or not bank.retiring:
            return
        with self._wake:
            held = {s.lora_slot for s in (*self.running, *self.prefilling, *self.waiting)}
            for slot in bank.retiring - held:
                bank.release(slot)

    def lora_feed(self, streams: list[TokenStream]) -> dict[str, np.ndarray]:
        """The LoRA inputs of a run whose rows are `streams` (none for a model built without LoRA)."""
        bank = self.model.lora
        return {} if bank is None else bank.feed([s.lora_slot for s in streams])

    def _changed(self) -> None:
        """Something that may let a waiting sequence join happened (a cancel): wake the thread."""
        with self._wake:
            self._changes += 1
            self._wake.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="generation", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.masks.close()
        for stream in [*self.running, *self.prefilling, *self.waiting.drain()]:
            stream.put(Failed("the model was unloaded"))

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._has_work():
                    self._wake.wait(self.waiting.until_deadline())
                if self._closed:
                    return
                changes, before = self._changes, (self.prompt_runs, len(self.waiting))
            self.run_once()
            if not self.running and not self.prefilling and (self.prompt_runs, len(self.waiting)) == before:
                self._stuck_at = changes  # nothing ran and nobody left the line: wait for a change

    def _has_work(self) -> bool:
        """Whether a round could do anything: run or prefill a sequence, or let a waiting one join or expire
        (always, unless the last round could not and nothing changed since). Called holding `_wake`."""
        if self.running or self.prefilling:
            return True
        return bool(self.waiting) and (self._changes != self._stuck_at or self.waiting.until_deadline() == 0)

    @property
    def prefilling(self) -> list[TokenStream]:
        """The sequences whose prompts are being prefilled in chunks: out of the waiting queue, not yet running."""
        return [p.stream for p in self.chunked.queue] if self.chunked else []

    @property
    def busy(self) -> bool:
        """Whether any sequence is running, prefilling or waiting: a round has work."""
        return bool(self.running or self.waiting or self.prefilling)

    @property
    def prompt_runs(self) -> int:
        """Program runs that read prompts: one-go prefills and chunks."""
        return self.prefills + (self.chunked.chunks if self.chunked else 0)

    def run_once(self) -> None:
        """Admit what fits (or prefill one round of chunks), then one decode step over everything running."""
        self._drop_cancelled()
        self.release_retired()
        if self.chunked is None:
            self._admit()
        else:
            self._prefill_chunks()
        if self.running:
            self._step()
        self.masks.start([s.sequence.constraint for s in self.running if s.sequence.constraint is not None])

    def _prefill_chunks(self) -> None:
        """Newcomers start prefilling; one round of chunks; those whose prompt is done choose their first token
        and join the running batch."""
        for stream in self._take_waiting():
            self.chunked.add(stream)
        finished = self.chunked.round()
        try:
            choices = choose_each(self.chooser, [(stream.sequence, logits, r) for stream, logits, r in finished])
        except Exception as e:  # these sequences fail; the running batch goes on
            log.exception("choosing first tokens failed")
            for stream, _, _ in finished:
                self.batch.release(id(stream))
                stream.put(Failed(f"choosing the first token failed: {type(e).__name__}: {e}"))
            return
        for (stream, _, _), choice in zip(finished, choices):
            if self._deliver(stream, *choice):
                self.batch.release(id(stream))
                self._ended(stream)
            else:
                self.batch.join(id(stream), len(stream.sequence.prompt))
                self.running.append(stream)

    def _admit(self) -> None:
        """Prefill the waiting sequences that fit, together: their prompts left-padded into one batch."""
        arrivals = self._take_waiting()
        if not arrivals:
            return
        width = max(len(s.sequence.prompt) for s in arrivals)
        mask = np.zeros((len(arrivals), width), np.int64)
        ids = np.zeros_like(mask)
        for r, stream in enumerate(arrivals):
            prompt = stream.sequence.prompt
            ids[r, width - len(prompt) :], mask[r, width - len(prompt) :] = prompt, 1
        feed = {"input_ids": ids, "attention_mask": mask, "position_ids": positions_of(mask)}
        feed.update(self.lora_feed(arrivals))
        started, began = time.time(), time.perf_counter()
        try:
            out = self.model.prefill.run(feed)
            choices = self.chooser.choose([s.sequence for s in arrivals], out["logits"])
        except Exception as e:  # these sequences fail; the running batch goes on
            log.exception("prefill failed")
            for stream in arrivals:
                self.batch.release(id(stream))
                stream.put(Failed(f"prefill failed: {type(e).__name__}: {e}"))
            return
        share = (time.perf_counter() - began) / len(arrivals)
        self.prefills += 1
        joining = []
        for r, (stream, choice) in enumerate(zip(arrivals, choices)):
            stream.started_at, stream.compute_s = started, stream.compute_s + share
            if self._deliver(stream, *choice):
                self.batch.release(id(stream))
                self._ended(stream)
            else:
                joining.append(r)
        if joining:
            owners = [id(arrivals[r]) for r in joining]
            self.batch.admit({k: v[joining] for k, v in out.items() if k != "logits"}, mask[joining], owners)
            self.running.extend(arrivals[r] for r in joining)

    def _take_waiting(self) -> list[TokenStream]:
        """The waiting sequences that join now, in order: as many as the batch has rows for (those prefilling in
        chunks hold theirs), their padded prompts within MAX_PREFILL_TOKENS unless prefilled in chunks (one long
        prompt is taken alone), each holding its cache blocks (the first that cannot get them waits, and so does
        everyone behind it), expired ones ended and cancelled ones dropped first,
        every round (even with no room), so none waits past its deadline."""
        taken: list[TokenStream] = []
        rows = len(self.running) + len(self.prefilling)
        with self._wake:
            self.waiting.sweep()
            while self.waiting and rows + len(taken) < self.model.max_batch:
                stream = self.waiting.first()
                width = max([len(stream.sequence.prompt)] + [len(s.sequence.prompt) for s in taken])
                if taken and self.chunked is None and width * (len(taken) + 1) > MAX_PREFILL_TOKENS:
                    break
                prompt, params = stream.sequence.prompt, stream.sequence.params
                namespace = self.model.lora.cache_namespace(stream.lora_slot) if self.model.lora else b""
                if not self.batch.reserve(id(stream), len(prompt) + params.max_tokens, prompt, namespace):
                    break
                taken.append(self.waiting.pop_first())
        return taken

    def _step(self) -> None:
        tokens = np.array([s.sequence.tokens[-1] for s in self.running], np.int64)
        began = time.perf_counter()
        try:
            out = self.memory.run(self.model.step, {**self.batch.step_feed(tokens), **self.lora_feed(self.running)})
            choices = self.chooser.choose([s.sequence for s in self.running], out["logits"])
        except Exception as e:  # every running sequence fails and the cache starts over
            log.exception("decode step failed")
            for stream in self.running:
                stream.put(Failed(f"decode step failed: {type(e).__name__}: {e}"))
            self.batch.remove(list(range(len(self.running))))
            self.running = []
            return
        share = (time.perf_counter() - began) / len(self.running)
        for stream in self.running:
            stream.compute_s += share
        self.batch.advance(out)
        self.steps += 1
        self.rows_stepped += len(self.running)
        done = [r for r, (stream, choice) in enumerate(zip(self.running, choices)) if self._deliver(stream, *choice)]
        self._remove(done)

    def _deliver(self, stream: TokenStream, token: int, logprob: TokenLogprob | None) -> bool:
        """Hand the sequence's chosen token and its text to the stream; True when the sequence is done."""
        seq = stream.sequence
        text = seq.add(token)
        stream.put(Delta(text, token, seq.finish_reason, logprob))
        return seq.finished

    def _drop_cancelled(self) -> None:
        self._remove([r for r, stream in enumerate(self.running) if stream.cancelled])
        for stream in self.chunked.drop_cancelled() if self.chunked else ():
            self._ended(stream)

    def _remove(self, rows: list[int]) -> None:
        if rows:
            self.batch.remove(rows)
            gone = set(rows)
            for r in rows:
                self._ended(self.running[r])
            self.running = [s for r, s in enumerate(self.running) if r not in gone]

    def _ended(self, stream: TokenStream) -> None:
        if self.on_end is not None:
            try:
                self.on_end(stream)
            except Exception:  # billing must not stop everyone's tokens; the ledger logs what it lost
                log.exception("recording the end of a sequence failed")


def _cache(model: LanguageModel, blocks: int | None, memory: HostMemory | DeviceMemory) -> PagedCache | KVBatch:
    """The engine's caches: block pools in `memory` for a paged step (`blocks` of them, or as many as
    DEFAULT_CACHE_BYTES holds, at most what max_batch full-length sequences need), else one growing batch."""
    if model.block_size is None:
        return KVBatch(model.layers)
    graph = model.step.program.graph
    pool = graph.nodes[graph.inputs["pool.0.key"]]
    _, kv_heads, size, dim = pool.shape
    if blocks is None:
        per_block = 2 * model.layers * kv_heads * size * dim * pool.dtype.itemsize
        longest = blocks_for(model.max_positions, size)
        blocks = min(model.max_batch * longest, max(DEFAULT_CACHE_BYTES // per_block, longest))
    return PagedCache(model.layers, (blocks, kv_heads, size, dim), pool.dtype.np, memory)
