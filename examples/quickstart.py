"""specdec from Python: generate, stream, read the acceptance statistics, handle bad input.

    python examples/quickstart.py          # the bundled target and draft, a few seconds on a CPU

tests/test_typing.py type-checks this file with mypy; tests/test_docs_examples.py runs it.
"""
from __future__ import annotations

from specdec import LLM, ConfigError, RequestOutput, SamplingParams, SpecStats

NEW_TOKENS = 16  # tokens generated per prompt


def main() -> None:
    llm = LLM()                                            # bundled pair, k chosen per round
    greedy = SamplingParams(max_new_tokens=NEW_TOKENS)
    sampled = SamplingParams(temperature=0.8, seed=7, max_new_tokens=NEW_TOKENS)
    outputs: list[RequestOutput] = llm.generate(["def parse(argv):", "import os\n"], [greedy, sampled])
    for out in outputs:
        stats: SpecStats = out.stats
        print(repr(out.text), out.finish_reason, f"{stats.mean_acceptance_length:.2f} tokens per round")

    for delta in llm.stream("class Stack:", greedy):       # text as rounds are accepted
        print(delta, end="", flush=True)
    print()

    ngram = LLM(speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})
    print(ngram.generate("x = [1, 2, 3]\ny = [1, 2,", greedy)[0].text)

    try:
        LLM(k=99)
    except ConfigError as e:                               # one line, as `specdec` prints it
        print(f"refused: {e}")


if __name__ == "__main__":
    main()
