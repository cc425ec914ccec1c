"""One coloured sample per regime for the report: what its acceptance looks like as text.

After the measurements, each regime's cell (workload, batch, temperature, k) decodes one
short request again, batch 1, on its workload's first prompt, with `engine.on_round`
recording each token's origin (engine/origins.py: accepted, recovered, bonus, plain). The
heavy-batching row decodes at batch 1 too: the text shows its acceptance, not its cost.
Nothing here is timed or feeds a figure of the report; the samples only illustrate the
regime table above them.
"""
from __future__ import annotations

from ..build import Models, make_engine
from ..config import EngineConfig, SamplingParams
from ..engine.origins import HTML_CSS, ORIGINS, RoundLog, html_tokens, legend_html

SAMPLE_TOKENS = 48      # a few dozen rounds: enough to see the regime, short enough to read
SAMPLE_SEED = 0         # sampled cells: one fixed seed, so a report is reproducible
# Markdown cannot colour: brackets around each token that is not an accepted draft (the common case)
MD_MARK = {"accepted": ("", ""), "recovered": ("[", "]"), "bonus": ("{", "}"), "plain": ("<", ">")}


def regime_samples(models: Models, prompts: dict[str, list[list[int]]], regimes: list[dict], spec_for_k,
                   device: str = "cpu") -> list[dict]:
    """[{"regime", "k", "workload", "temperature", "tokens", "pieces", "origins", "counts"}]
    for every regime row whose workload has a prompt."""
    out = []
    for row in regimes:
        cell = row["cell"]
        ps = prompts.get(cell["workload"]) or []
        if not ps:
            continue
        prompt = ps[0]
        max_len = min(models.target.config.max_position_embeddings, len(prompt) + SAMPLE_TOKENS + 8)
        engine = make_engine(models, spec_for_k(cell["k"]), EngineConfig(max_batch=1, max_model_len=max_len,
                                                                         device=device))
        log = RoundLog()
        engine.on_round = log
        params = SamplingParams(temperature=cell["temperature"], seed=SAMPLE_SEED,
                                max_new_tokens=min(SAMPLE_TOKENS, max_len - len(prompt)), ignore_eos=True)
        seq = engine.generate([prompt], params)[0]
        kept = [(t, o) for t, o, _, k in log.tokens(seq) if k]
        tokens = [t for t, _ in kept]
        counts = dict.fromkeys(ORIGINS, 0)
        for _, o in kept:
            counts[o] += 1
        out.append(dict(regime=row["regime"], workload=cell["workload"], k=cell["k"],
                        temperature=cell["temperature"], tokens=tokens, pieces=models.tokenizer.pieces(tokens),
                        origins=[o for _, o in kept], counts=counts))
    return out


def sample_blocks(samples: list[dict]) -> list:
    """Report blocks (render.py) for the samples: a heading, a legend and one raw-HTML block
    per regime, with a Markdown twin that marks recovered [x], bonus {x} and plain <x>."""
    if not samples:
        return []
    blocks = [("h", 2, "What the regimes look like"),
              ("p", f"One request per regime ({SAMPLE_TOKENS} new tokens at the regime's k and temperature, "
                    "batch 1, the workload's first prompt), each token coloured by origin: a draft token "
                    "the target accepted, the token recovered at a rejection, the bonus token after a round "
                    "that accepted every draft, and the target's own (the first token). In Markdown: "
                    "[recovered], {bonus}, <plain>, accepted unmarked.")]
    for s in samples:
        c = s["counts"]
        head = (f"**{s['regime']}**: `{s['workload']}`, k = {s['k']}, T = {s['temperature']:g}; "
                f"{c['accepted']} accepted, {c['recovered']} recovered, {c['bonus']} bonus, {c['plain']} plain")
        page = (f"<style>{HTML_CSS}</style>" if s is samples[0] else "") + (
            f"<p>{legend_html()}</p>" if s is samples[0] else "")
        page += f'<div class="sample" data-regime="{s["regime"]}">{html_tokens(s["pieces"], s["origins"])}</div>'
        md = "```\n" + "".join(MD_MARK[o][0] + p + MD_MARK[o][1] for p, o in zip(s["pieces"], s["origins"])) + "\n```"
        blocks += [("p", head), ("raw", page, md)]
    return blocks
