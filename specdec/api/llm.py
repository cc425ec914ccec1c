"""`LLM`: load a target (and a draft), then generate, in vLLM's shape.

    llm = LLM()                                                   # the bundled pair, k = "auto"
    out = llm.generate(["def f(x):"], SamplingParams(max_new_tokens=32))[0]
    print(out.text, out.stats.mean_acceptance_length)

Built on `build.load_models` and `build.make_engine`, exactly as `specdec generate` is, so
the same prompt and settings give the same tokens. One LLM serves one caller at a time.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence as Seq
from dataclasses import replace
from pathlib import Path
from typing import cast

from ..build import DEFAULT_K_MAX, default_pair, load_models, make_engine, spec_config
from ..config import EngineConfig, SamplingParams, SpecConfig
from ..engine.engine import Engine
from ..engine.sequence import Sequence
from ..errors import ConfigError
from ..models.chat_template import ChatTemplate, Message
from ..models.tokenizer import Tokenizer
from ..server.text import TextStream
from .inputs import Params, PromptInput, Prompts, encode, params_list, prompt_list
from .options import PathLike, check_k, speculation
from .outputs import RequestOutput

DEFAULT_MAX_BATCH = 8    # requests decoded together (`--max-batch`'s default)


class LLM:
    """A target model, an optional draft, and the engine that decodes with them.

    target, draft: checkpoint directories. With neither, the bundled target and draft; a
        named target gets a draft only when one is named (`specdec generate`'s rule).
    model: vLLM's name for `target` (give one or the other).
    method: the proposer (draft, parallel, ngram, suffix, layerskip, eagle, mtp, auto or none); default:
        draft when a draft is loaded, else none.
    head: eagle's feature head (default: the shipped head trained for the target, found by
        its weights hash: build.find_head).
    k: draft tokens per round: 0..16, "auto" (adaptive, the default) or "heuristic".
    tree: 0 (chains), or a token tree's node budget per round, of depth k (a fixed k;
        methods draft, ngram and suffix; docs/trees.md).
    speculative_config: vLLM's dict, {"method": "draft_model" | "ngram" | "suffix" | ...,
        "model": draft dir, "num_speculative_tokens": k, "prompt_lookup_min"/"_max": n}.
    Engine options: k_max, max_batch, max_model_len (default: the target's context),
        device ("cpu" or "cuda"), threads (torch threads), compile (the compiled decoder;
        None: where it builds), dtype and draft_dtype (the weights: "float32", "int8"
        or "int4" rounded at load, or None: as stored; the draft's default to the target's). Proposer options by name: ngram_min, ngram_max,
        layerskip_layers, suffix_depth, auto_arms, ...

    Bad input raises a SpecdecError subclass (ConfigError, CheckpointError, PromptError)
    whose message is the one line `specdec` prints.
    """

    def __init__(self, target: PathLike | None = None, draft: PathLike | None = None,
                 method: str | None = None, k: int | str = "auto", *,
                 model: PathLike | None = None, speculative_config: Mapping[str, object] | None = None,
                 k_max: int = DEFAULT_K_MAX, max_batch: int = DEFAULT_MAX_BATCH, max_model_len: int | None = None,
                 device: str = "cpu", threads: int | None = None, compile: bool | None = None,
                 dtype: str | None = None, draft_dtype: str | None = None, tree: int = 0,
                 head: PathLike | None = None, **proposer_options: object) -> None:
        if model is not None and target is not None:
            raise ConfigError("the target is given twice: target= and model=")
        want = speculation(draft, method, k, speculative_config, proposer_options)
        check_k(want.k, k_max)
        limits = EngineConfig(max_batch=max_batch, device=device, threads=threads,  # checked before loading
                              max_model_len=EngineConfig.max_model_len if max_model_len is None else max_model_len)
        target_dir, draft_dir = default_pair(target if target is not None else model, want.draft, want.method)
        self._models = load_models(target_dir, draft_dir, device=device, threads=threads, compile=compile,
                                   weights=dtype, draft_weights=draft_dtype, method=want.method,
                                   head=head if head is not None else want.head)
        self._spec = spec_config(want.method, want.k, k_max, self._models.draft is not None, want.options,
                                 tree=tree)
        context = self._models.target.config.max_position_embeddings
        self._engine = make_engine(self._models, self._spec,
                                   replace(limits, max_model_len=context if max_model_len is None else max_model_len))

    # ---- what was built ------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        """The target's tokenizer (`encode(text) -> ids`, `decode(ids) -> text`)."""
        return self._models.tokenizer

    @property
    def engine(self) -> Engine:
        """The engine underneath, for its engine-wide counters (`engine.metrics`)."""
        return self._engine

    @property
    def spec(self) -> SpecConfig:
        """The proposer and k in use, as resolved from the arguments."""
        return self._spec

    @property
    def target_path(self) -> Path | None:
        return self._models.target_path

    @property
    def draft_path(self) -> Path | None:
        return self._models.draft_path

    # ---- decoding ------------------------------------------------------------------------
    def generate(self, prompts: Prompts, sampling_params: Params = None) -> list[RequestOutput]:
        """Decode every prompt to completion, batched; return one output per prompt, in order.
        `sampling_params`: one SamplingParams for all, a list with one per prompt, or None
        (greedy, 128 new tokens)."""
        items = prompt_list(prompts)
        plist = params_list(sampling_params, len(items))
        requests = self._submit(items, plist)
        try:
            while self._engine.has_unfinished():
                self._engine.step()
        finally:
            self._abort([seq for seq, _ in requests])
        return [RequestOutput.of(seq, text, self.tokenizer) for seq, text in requests]

    def chat(self, messages: Seq[Message] | Seq[Seq[Message]], sampling_params: Params = None,
             chat_template: str | None = None, add_generation_prompt: bool = True) -> list[RequestOutput]:
        """vLLM's `chat`: one conversation (a list of {"role", "content"} messages) or a list of
        them, each rendered with the target's chat template (`chat_template`: a template's
        source instead; models/chat_template.py) and decoded as `generate` decodes prompts."""
        one = bool(messages) and isinstance(messages[0], (Mapping, tuple))
        convs = cast(list[Seq[Message]], [messages] if one else list(messages))
        template = ChatTemplate(self.tokenizer, chat_template)
        prompts = [{"prompt_token_ids": template.encode(c, add_generation_prompt)} for c in convs]
        return self.generate(prompts, sampling_params)

    def stream(self, prompt: PromptInput, sampling_params: SamplingParams | None = None) -> Iterator[str]:
        """Decode one prompt and yield its text as it grows: one delta per round that
        accepted tokens (partial UTF-8 held back). The deltas join to `generate`'s text.
        Bad input raises here, before the first delta."""
        params = params_list(sampling_params, 1)[0]
        [(seq, _)] = self._submit([prompt], [params])
        return self._deltas(seq)

    def _deltas(self, seq: Sequence) -> Iterator[str]:
        text = TextStream(self.tokenizer, stops=[])
        shown = 0
        try:
            while not seq.finished:
                self._engine.step()
                ids = seq.output_ids
                delta = text.push(ids[shown:])
                shown = len(ids)
                if delta:
                    yield delta
            rest = text.flush()
            if rest:
                yield rest
        finally:
            self._abort([seq])

    # ---- requests ------------------------------------------------------------------------
    def _submit(self, prompts: list[PromptInput], params: list[SamplingParams]
                ) -> list[tuple[Sequence, str | None]]:
        """Queue every request, or none: a bad prompt raises before any decoding. Requests
        left behind by an abandoned stream are dropped first. -> (request, prompt text)."""
        self._abort([*self._engine.waiting, *self._engine.running])
        encoded = [encode(p, self.tokenizer) for p in prompts]
        requests: list[tuple[Sequence, str | None]] = []
        try:
            for (text, ids), sp in zip(encoded, params):
                requests.append((self._engine.add_request(ids, sp), text))
        except BaseException:
            self._abort([seq for seq, _ in requests])
            raise
        return requests

    def _abort(self, seqs: list[Sequence]) -> None:
        """Stop the given requests if they are still queued or running; forget finished ones."""
        for seq in seqs:
            if not seq.finished:
                self._engine.abort(seq.id)
        self._engine.collect_finished()
