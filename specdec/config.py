"""Frozen, validated configuration: SamplingParams, SpecConfig, EngineConfig."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError

K_MAX = 16
MAX_TREE_NODES = 63   # a tree's root and nodes fit one 64-bit ancestor mask (models/tree.py)
TREE_METHODS = ("draft", "eagle", "mtp", "ngram", "suffix")   # proposers that draft token trees (docs/trees.md)
AUTO_TREE_METHODS = ("draft", "eagle", "mtp")   # trees sized by the drafter's confidence (tree_size.py)


# the range torch.Generator.manual_seed accepts (a signed or unsigned 64-bit integer)
SEED_MIN, SEED_MAX = -(2 ** 63), 2 ** 64 - 1
COUPLINGS = ("standard", "invariant")
MAX_LOGPROBS = 20   # alternatives listed per token: OpenAI's top_logprobs limit
PENALTY_RANGE = 2.0  # |frequency_penalty|, |presence_penalty| at most this: OpenAI's and vLLM's range
LOGIT_BIAS_RANGE = 100.0   # a logit_bias value is clamped to +-this, as OpenAI and vLLM do

@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. temperature 0 means greedy."""
    temperature: float = 0.0
    top_k: int = 0          # 0 = off
    top_p: float = 1.0      # 1 = off
    seed: int | None = None
    max_new_tokens: int = 128
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    # how a sampled round is verified: "standard" rejection sampling (the highest acceptance)
    # or "invariant" (verify/coupling.py: the same text for a seed whatever the proposer, k
    # or batch; greedy requests are invariant either way)
    coupling: str = "standard"
    # None: no log-probabilities; n: each emitted token's, with the n most likely alternatives
    logprobs: int | None = None
    # logit processing before temperature (verify/processors.py; vLLM's definitions):
    # penalties count output tokens (frequency, presence) or prompt + output (repetition)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()   # (token id, bias); a dict is accepted too
    min_tokens: int = 0             # EOS and stop tokens are impossible before this many

    def __post_init__(self):
        if not isinstance(self.temperature, (int, float)) or self.temperature != self.temperature \
                or self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0, got {self.top_k}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens}")
        if self.seed is not None and (not isinstance(self.seed, int) or not SEED_MIN <= self.seed <= SEED_MAX):
            raise ConfigError(f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}], got {self.seed!r}")
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int)
                                          or not 0 <= self.logprobs <= MAX_LOGPROBS):
            raise ConfigError(f"logprobs must be None or an integer in 0..{MAX_LOGPROBS}, got {self.logprobs!r}")
        if self.coupling not in COUPLINGS:
            raise ConfigError(f"coupling must be one of {', '.join(COUPLINGS)}, got {self.coupling!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        self._check_processing()

    def _check_processing(self) -> None:
        def number(x) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")
        for name in ("frequency_penalty", "presence_penalty"):
            v = getattr(self, name)
            if not number(v) or not -PENALTY_RANGE <= v <= PENALTY_RANGE:
                raise ConfigError(f"{name} must be in [-{PENALTY_RANGE:g}, {PENALTY_RANGE:g}], got {v!r}")
        if not number(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ConfigError(f"repetition_penalty must be > 0, got {self.repetition_penalty!r}")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) \
                or not 0 <= self.min_tokens <= self.max_new_tokens:
            raise ConfigError(f"min_tokens must be an integer in 0..max_new_tokens ({self.max_new_tokens}), "
                              f"got {self.min_tokens!r}")
        items = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
        bias = []
        for t, v in items:
            if isinstance(t, str) and t.isdecimal():     # OpenAI's JSON keys: token ids as strings
                t = int(t)
            if isinstance(t, bool) or not isinstance(t, int) or t < 0 or not number(v):
                raise ConfigError(f"logit_bias maps token ids (integers >= 0) to numbers, got {t!r}: {v!r}")
            bias.append((t, max(-LOGIT_BIAS_RANGE, min(LOGIT_BIAS_RANGE, float(v)))))
        object.__setattr__(self, "logit_bias", tuple(sorted(bias)))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def coupled(self) -> bool:
        """Sampled with position-keyed noise (verified by argmax, like greedy)."""
        return self.coupling == "invariant" and not self.greedy

    @property
    def verification(self) -> str:
        """The rule its drafts are verified by, which sets their acceptance: "greedy", or the
        coupling of a sampled request ("standard", "invariant")."""
        return "greedy" if self.greedy else self.coupling


@dataclass(frozen=True)
class KTable:
    """k by batch size: rows (lo, hi, k), batch sizes lo..hi inclusive, in order, the first
    from 1. A batch size in a gap between rows, or past the last, takes the k of the row
    before it: vLLM's rule for `num_speculative_tokens_per_batch_size` (PR #32374)."""
    rows: tuple[tuple[int, int, int], ...]

    def __post_init__(self):
        rows = tuple(tuple(r) for r in self.rows)
        object.__setattr__(self, "rows", rows)
        if not rows:
            raise ConfigError("a k table needs at least one row")
        prev_hi = 0
        for r in rows:
            if len(r) != 3 or not all(isinstance(x, int) and not isinstance(x, bool) for x in r):
                raise ConfigError(f"a k table row is (lo, hi, k) in integers, got {r!r}")
            lo, hi, k = r
            if not prev_hi < lo <= hi:
                raise ConfigError(f"k table rows must be ascending, non-overlapping batch ranges "
                                  f"lo <= hi from 1; got {lo}-{hi} after a row ending at {prev_hi}")
            if not 0 <= k <= K_MAX:
                raise ConfigError(f"k table row {lo}-{hi}: k must be in 0..{K_MAX}, got {k}")
            prev_hi = hi
        if rows[0][0] != 1:
            raise ConfigError(f"a k table's first row must start at batch size 1, got {rows[0][0]}")

    def k_for(self, batch: int) -> int:
        """The k for `batch` running rows."""
        k = self.rows[0][2]
        for lo, _, kk in self.rows:
            if lo > batch:
                break
            k = kk
        return k

    @property
    def max_k(self) -> int:
        return max(r[2] for r in self.rows)

    def to_vllm(self) -> dict[str, int]:
        """vLLM's `num_speculative_tokens_per_batch_size`: {"lo-hi": k}."""
        return {f"{lo}-{hi}": k for lo, hi, k in self.rows}

    @classmethod
    def from_vllm(cls, table) -> "KTable":
        """Read vLLM's {"lo-hi": k} mapping (a key "n" is the range n-n)."""
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"num_speculative_tokens_per_batch_size must be a non-empty mapping "
                              f'like {{"1-16": 3}}, got {table!r}')
        rows = []
        for key, k in table.items():
            lo, sep, hi = str(key).partition("-")
            try:
                lo_i, hi_i = int(lo), int(hi if sep else lo)
            except ValueError:
                raise ConfigError(f'k table key {key!r} is not a batch range "lo-hi"') from None
            rows.append((lo_i, hi_i, k))
        return cls(tuple(sorted(rows)))

    @classmethod
    def read(cls, path) -> "KTable":
        """A JSON file holding vLLM's whole `speculative_config` or only its
        `num_speculative_tokens_per_batch_size` mapping."""
        import json
        try:
            data = json.loads(open(path, encoding="utf-8").read())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"k table {path}: cannot read it as JSON ({e})") from e
        if isinstance(data, dict) and "num_speculative_tokens_per_batch_size" in data:
            data = data["num_speculative_tokens_per_batch_size"]
        return cls.from_vllm(data)


@dataclass(frozen=True)
class SpecConfig:
    """Which proposer guesses tokens and how many per round.

    k: an int in 0..K_MAX (0 = plain decoding), "auto" (adaptive policy from a measured
       cost model), "heuristic" (Hugging Face's +2/-1 schedule) or a KTable (k by batch size).
    options: proposer-specific settings (e.g. ngram's min_n/max_n), by name.
    tree: 0 (a chain of k drafts), a node budget (2..MAX_TREE_NODES) for a token tree of depth
       k (proposers that build trees: TREE_METHODS; docs/trees.md), or "auto" (a draft model's or
       feature head's trees, sized each round by the target's measured costs: proposers/tree_size.py).
    """
    method: str = "draft"
    k: int | str | KTable = 4
    k_max: int = 8
    options: tuple[tuple[str, object], ...] = field(default_factory=tuple)
    tree: int | str = 0

    def __post_init__(self):
        if isinstance(self.k, KTable):
            if self.k.max_k > self.k_max:
                object.__setattr__(self, "k_max", self.k.max_k)
        elif isinstance(self.k, str):
            if self.k not in ("auto", "heuristic"):
                raise ConfigError(f"k must be an integer in 0..{K_MAX}, 'auto' or 'heuristic', got {self.k!r}")
        elif not isinstance(self.k, int) or not 0 <= self.k <= K_MAX:
            raise ConfigError(f"k must be an integer in 0..{K_MAX} or 'auto', got {self.k!r}")
        if not isinstance(self.k_max, int) or not 1 <= self.k_max <= K_MAX:
            raise ConfigError(f"k_max must be in 1..{K_MAX}, got {self.k_max}")
        if isinstance(self.k, int) and self.k > self.k_max:
            object.__setattr__(self, "k_max", self.k)
        if isinstance(self.options, dict):
            object.__setattr__(self, "options", tuple(sorted(self.options.items())))
        if self.tree != "auto" and (not isinstance(self.tree, int) or isinstance(self.tree, bool)
                                    or not (self.tree == 0 or 2 <= self.tree <= MAX_TREE_NODES)):
            raise ConfigError(f"tree must be 0 (a chain), a node budget in 2..{MAX_TREE_NODES} or 'auto', "
                              f"got {self.tree!r}")
        if self.tree and self.method not in TREE_METHODS:
            raise ConfigError(f"a token tree needs method {', '.join(TREE_METHODS[:-1])} or {TREE_METHODS[-1]}, "
                              f"got {self.method!r}")
        if self.tree == "auto" and self.method not in AUTO_TREE_METHODS:
            raise ConfigError(f"tree 'auto' sizes a drafter's trees by its confidence (method "
                              f"{', '.join(AUTO_TREE_METHODS)}), got method {self.method!r}")
        if self.tree and not isinstance(self.k, int):
            raise ConfigError(f"a token tree needs a fixed k (its depth), got k={self.k!r}")

    @property
    def opts(self) -> dict:
        return dict(self.options)


@dataclass(frozen=True)
class EngineConfig:
    """Engine-wide limits. max_model_len caps prompt + new tokens per request."""
    max_batch: int = 8
    max_model_len: int = 1024
    device: str = "cpu"
    threads: int | None = None

    def __post_init__(self):
        if not isinstance(self.max_batch, int) or self.max_batch < 1:
            raise ConfigError(f"max_batch must be >= 1, got {self.max_batch}")
        if not isinstance(self.max_model_len, int) or self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be cpu or cuda, got {self.device!r}")
