"""The trace as one self-contained HTML page (inline CSS and script, no network).

The text is coloured by origin (engine/origins.py); every round's detail is rendered here,
hidden, and a click on a token shows its round. The script's only other job is a hook for
tests: opening the page at `#click=N` clicks output token N once it loads.
"""
from __future__ import annotations

import html

from ..engine.origins import HTML_CSS, html_tokens, legend_html, round_origins

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}th,td{border:1px solid #ccc;padding:.2em .5em;
text-align:right}th{background:#f3f3f3}td.t{text-align:left;font-family:ui-monospace,Menlo,monospace}
.prompt{color:#777}.tok{cursor:pointer;border-radius:2px}.tok.selected{outline:2px solid #333}
.round{border-left:4px solid #888;padding:.2em 1em;margin:1em 0;background:#fafafa}
.no{color:#c62828;font-weight:bold}.yes{color:#1b7f3b}.skip{color:#999}
"""

SCRIPT = """
function showRound(r, el) {
  document.querySelectorAll('section.round').forEach(s => { s.hidden = s.id !== 'round-' + r; });
  document.querySelectorAll('.tok.selected').forEach(t => t.classList.remove('selected'));
  if (el) el.classList.add('selected');
  document.body.dataset.shown = r;
}
document.getElementById('text').addEventListener('click', e => {
  const t = e.target.closest('.tok');
  if (t) showRound(t.dataset.round, t);
});
const hook = location.hash.match(/^#click=(\\d+)$/);
if (hook) document.querySelectorAll('#text .tok')[Number(hook[1])].click();
"""


def _e(x) -> str:
    return html.escape(str(x))


def _code(text: str) -> str:
    return f"<code>{_e(repr(text))}</code>"


def _num(x, fmt="{:.4f}") -> str:
    return "—" if x is None else fmt.format(x)


def _draft_rows(r: dict) -> str:
    rows = []
    for j, d in enumerate(r["drafts"]):
        if not d["reached"]:
            verdict = '<span class="skip">not reached</span>'
        else:
            verdict = '<span class="yes">accept</span>' if d["accept"] else '<span class="no">reject</span>'
        ratio = None if d["q"] in (None, 0) else d["p"] / d["q"]
        rows.append(f"<tr><td>{j + 1}</td><td class=t>{_code(d['text'])}</td><td>{_num(d['q'])}</td>"
                    f"<td>{_num(d['p'])}</td><td>{_num(ratio, '{:.3f}')}</td><td>{_num(d['u'])}</td>"
                    f"<td class=t>{_code(d['target_argmax_text'])}</td><td class=t>{verdict}</td></tr>")
    return ("<table><thead><tr><th>j</th><th>draft token x</th><th>q(x)</th><th>p(x)</th><th>p/q</th>"
            "<th>u</th><th>target argmax</th><th>decision</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table>")


def _round_section(r: dict) -> str:
    n, a, nx, t = r["num_draft"], r["accepted"], r["next"], r["time"]
    kind = round_origins(n, a)[-1]
    rule = ("accept x when u·q(x) < p(x), i.e. with probability min(1, p/q)" if nx["u"] is not None
            else "greedy: accept x when it is the target's argmax")
    top = "".join(f"<tr><td class=t>{_code(text)}</td><td>{pr:.4f}</td></tr>" for _, pr, text in nx["top"])
    cut = "" if r["kept"] == len(r["emitted"]) else f" ({len(r['emitted']) - r['kept']} cut by a stop or the length)"
    return (f'<section class="round" id="round-{r["index"]}" hidden><h3>Round {r["index"]}: k = {r["k"]}, '
            f"accepted {a} of {n}</h3><p>Rule: {rule}.</p>" + (_draft_rows(r) if n else "<p>No drafts: a plain step.</p>")
            + f'<p>Then the <span class="tok {kind}">{kind}</span> token {_code(nx["text"])} at position {a + 1}, '
            f"from {_e(nx['source'])} (its probability there {nx['prob']:.4f}; u = {_num(nx['u'])}){cut}. "
            f"Top entries of that distribution:</p><table><thead><tr><th>token</th><th>probability</th></tr>"
            f"</thead><tbody>{top}</tbody></table><p>Target forward over {t['positions']} positions: "
            f"{t['target_forward_s'] * 1e3:.3f} ms; a plain step (1 position): {t['plain_forward_s'] * 1e3:.3f} ms "
            f"(×{t['ratio']:.2f}; medians of 3). The whole round as traced (with these timings and the "
            f"recording): {t['round_s'] * 1e3:.3f} ms.</p></section>")


def _summary_table(rounds: list[dict]) -> str:
    rows = "".join(f"<tr><td>{r['index']}</td><td>{r['k']}</td><td>{r['accepted']}/{r['num_draft']}</td>"
                   f"<td>{len(r['emitted'])}</td><td>{r['time']['round_s'] * 1e3:.2f}</td>"
                   f"<td>{r['time']['target_forward_s'] * 1e3:.2f}</td><td>{r['time']['plain_forward_s'] * 1e3:.2f}</td>"
                   f"<td>{r['time']['ratio']:.2f}</td></tr>" for r in rounds)
    return ("<table><thead><tr><th>round</th><th>k</th><th>accepted</th><th>tokens</th><th>round ms</th>"
            "<th>target forward ms</th><th>plain step ms</th><th>ratio</th></tr></thead><tbody>"
            + rows + "</tbody></table>")


def render(record: dict) -> str:
    """The page for a trace record (with texts: commands/trace.add_text)."""
    pieces, origins, rounds, kept = [record["first_text"]], ["plain"], [0], [True]
    for r in record["rounds"]:
        os_ = round_origins(r["num_draft"], r["accepted"])
        pieces += r["emitted_text"]
        origins += os_
        rounds += [r["index"]] * len(os_)
        kept += [j < r["kept"] for j in range(len(os_))]
    s = record["stats"]
    sampling = ("greedy" if record["seed"] is None
                else f"temperature {record['temperature']:g}, top-k {record['top_k']}, top-p {record['top_p']:g}, "
                     f"seed {record['seed']}")
    prefill = ('<section class="round" id="round-0" hidden><h3>The prefill</h3><p>The target reads the prompt '
               "in one forward and picks the first token itself: no draft is involved.</p></section>")
    body = (f"<h1>specdec trace</h1><p>Target <code>{_e(record['target'])}</code>, method {_e(record['method'])} "
            f"(draft <code>{_e(record['draft'])}</code>), k = {_e(record['k'])}, {sampling}. "
            f"{len(record['rounds'])} rounds, {len(record['output_ids'])} tokens; {s['accepted_tokens']} of "
            f"{s['draft_tokens']} drafts accepted, {s['recovered_tokens']} recovered, {s['bonus_tokens']} bonus.</p>"
            f"<p>Legend: {legend_html()} (struck through: cut by a stop or the length). "
            "Click a token to see its round.</p>"
            f'<div class="sample" id="text"><span class="prompt">{_e(record["prompt_text"])}</span>'
            f"{html_tokens(pieces, origins, rounds, kept)}</div>"
            + prefill + "".join(_round_section(r) for r in record["rounds"])
            + "<h2>Every round</h2>" + _summary_table(record["rounds"]))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>specdec trace</title>"
            f"<style>{CSS}{HTML_CSS}</style></head>\n<body>\n{body}\n<script>{SCRIPT}</script>\n</body></html>\n")
