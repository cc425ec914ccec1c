"""Render a report, given as a list of blocks, to Markdown and to self-contained HTML.

Blocks: ("h", level, text) | ("p", text) | ("table", headers, rows) | ("img", name, caption)
| ("raw", html, markdown): markup written by its own module (analysis/samples.py), used as is.
Text may use `backticks` for code. Images are PNG bytes passed by name; Markdown links them
as files in plots/, HTML embeds them as base64 data URIs, so the page needs no network.
"""
from __future__ import annotations

import base64
import html
import re

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#f3f3f3}td.t,th:first-child{text-align:left}
code{background:#f3f3f3;padding:0 .2em;border-radius:3px}
.verdict{font-size:1.1em;background:#eef6ee;border-left:4px solid #4a4;padding:.8em 1em}
figure{margin:1.5em 0}figcaption{font-size:.9em;color:#555}img{max-width:100%}
"""


def _md_cell(x) -> str:
    return str(x).replace("|", "\\|")


def to_markdown(blocks) -> str:
    out = []
    for b in blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + b[2])
        elif b[0] == "p":
            out.append(b[1])
        elif b[0] == "table":
            heads, rows = b[1], b[2]
            out.append("| " + " | ".join(_md_cell(h) for h in heads) + " |")
            out.append("|" + "---|" * len(heads))
            out += ["| " + " | ".join(_md_cell(x) for x in r) + " |" for r in rows]
        elif b[0] == "img":
            out.append(f"![{b[2]}](plots/{b[1]}.png)")
        elif b[0] == "raw":
            out.append(b[2])
        out.append("")
    return "\n".join(out)


def _inline(text: str) -> str:
    """Escape, then turn `code` and **bold** into tags."""
    s = html.escape(str(text))
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)


NUMERIC = re.compile(r"^[-+]?[\d.]+[×%]?$|^—$")


def _td(x) -> str:
    """A table cell: numbers right-aligned, text left-aligned."""
    cls = "" if NUMERIC.match(str(x)) else ' class="t"'
    return f"<td{cls}>{_inline(x)}</td>"


def to_html(blocks, images: dict[str, bytes], title: str) -> str:
    body = []
    for b in blocks:
        if b[0] == "h":
            body.append(f"<h{b[1]}>{_inline(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            cls = ' class="verdict"' if len(b) > 2 and b[2] == "verdict" else ""
            body.append(f"<p{cls}>{_inline(b[1])}</p>")
        elif b[0] == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(_td(x) for x in r) + "</tr>" for r in b[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif b[0] == "img":
            data = base64.b64encode(images[b[1]]).decode("ascii")
            body.append(f'<figure id="{b[1]}"><img alt="{html.escape(b[2])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{_inline(b[2])}</figcaption></figure>")
        elif b[0] == "raw":
            body.append(b[1])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
