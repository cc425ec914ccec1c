"""Build llama.cpp's programs from the llama-cpp-python sdist, convert checkpoints, run them.

Everything lives in a cache folder outside the repository (never committed):

    ~/.cache/specdec/llamacpp/               (or $SPECDEC_LLAMACPP_CACHE)
        llama_cpp_python-<v>.tar.gz          the PyPI source distribution
        src/llama_cpp_python-<v>/vendor/llama.cpp
        build-<v>/bin/llama-*                the programs
        gguf/<name>-<hash>.f32.gguf          converted checkpoints

    python benchmarks/llamacpp.py build [--jobs 2]      # ~10 min on 2 cores, niced
    python benchmarks/llamacpp.py convert models/target

`ensure_built()` never raises for an impossible build: it returns (None, reason) so the
benchmark can skip the llama.cpp rows with a clear message.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

VERSION = os.environ.get("SPECDEC_LLAMACPP_VERSION", "0.3.36")
CACHE = Path(os.environ.get("SPECDEC_LLAMACPP_CACHE", Path.home() / ".cache" / "specdec" / "llamacpp"))
TARGETS = ("llama-speculative", "llama-speculative-simple", "llama-completion", "llama-lookup",
           "llama-tokenize", "llama-bench", "llama-quantize")
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_EXAMPLES=ON",
               "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
               "-DBUILD_SHARED_LIBS=OFF")
# The vendored converter does not recognise our tokenizer's hash; its pre-tokenizer is
# ByteLevel with GPT-2's regex, which is llama.cpp's "gpt-2". Tokenization is checked after.
_CONVERT_SHIM = """
import runpy, sys
sys.path.insert(0, {src!r}); sys.path.insert(1, {src!r} + '/gguf-py')
from conversion import base
_orig = base.TextModel.get_vocab_base_pre
def _pre(self, tokenizer):
    try:
        return _orig(self, tokenizer)
    except NotImplementedError:
        return 'gpt-2'
base.TextModel.get_vocab_base_pre = _pre
_orig_sp = base.TextModel._create_vocab_sentencepiece
def _sp(self):  # sentencepiece may be absent; our tokenizers are never sentencepiece
    if not (self.dir_model / 'tokenizer.model').is_file():
        raise FileNotFoundError('no tokenizer.model')
    return _orig_sp(self)
base.TextModel._create_vocab_sentencepiece = _sp
sys.argv = ['convert_hf_to_gguf.py'] + {args!r}
runpy.run_path({src!r} + '/convert_hf_to_gguf.py', run_name='__main__')
"""


# llama.cpp's logger is a leaked singleton whose worker thread may not drain before exit
# (upstream issue 22142): on a busy machine the final statistics lines, which carry the
# timings, are then lost. This patch drains it at exit; it changes nothing else.
_LOG_ANCHOR = "        log->set_colors(tty_can_use_colors());\n    });\n\n    return log;"
_LOG_PATCH = ("        log->set_colors(tty_can_use_colors());\n"
              "        std::atexit([] { common_log_pause(common_log_main()); });  // specdec: flush at exit\n"
              "    });\n\n    return log;")
STAMP = ".specdec-logflush"


def patch_log_flush(src: Path) -> bool:
    """Apply the flush-at-exit patch to common/log.cpp (idempotent); False if it does not apply."""
    f = src / "common" / "log.cpp"
    text = f.read_text()
    if "specdec: flush at exit" in text:
        return True
    if _LOG_ANCHOR not in text:
        return False
    f.write_text(text.replace(_LOG_ANCHOR, _LOG_PATCH, 1))
    return True


def src_dir(version: str = VERSION) -> Path:
    return CACHE / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def bin_dir(version: str = VERSION) -> Path:
    return CACHE / f"build-{version}" / "bin"


def built(version: str = VERSION) -> bool:
    return (bin_dir(version).parent / STAMP).exists() and all((bin_dir(version) / t).is_file() for t in TARGETS)


def fetch(version: str = VERSION) -> Path:
    """Download the sdist with pip and extract it; return the vendored llama.cpp folder."""
    if src_dir(version).is_dir():
        return src_dir(version)
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = CACHE / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={version}", "-d", str(CACHE)], check=True,
                       stdout=subprocess.DEVNULL)
    with tarfile.open(sdist) as tf:
        tf.extractall(CACHE / "src", filter="data")
    return src_dir(version)


def build(version: str = VERSION, jobs: int = 2, nice: int = 19, log=print) -> Path:
    """Configure and build TARGETS at low priority; return the bin folder."""
    src, out = fetch(version), CACHE / f"build-{version}"
    if not patch_log_flush(src):
        log("warning: could not patch llama.cpp's logger; timings may be lost on a busy machine")
    pre = ["nice", "-n", str(nice)] if nice else []
    gen = ["-G", "Ninja"] if subprocess.run(["which", "ninja"], capture_output=True).returncode == 0 else []
    logf = CACHE / "build.log"
    t0 = time.time()
    with open(logf, "a") as fh:
        subprocess.run(pre + ["cmake", "-S", str(src), "-B", str(out), *gen, *CMAKE_FLAGS],
                       check=True, stdout=fh, stderr=subprocess.STDOUT)
        subprocess.run(pre + ["cmake", "--build", str(out), f"-j{jobs}", "--target", *TARGETS],
                       check=True, stdout=fh, stderr=subprocess.STDOUT)
    (out / STAMP).write_text("log flush patch applied\n")
    log(f"llama.cpp built in {time.time() - t0:.0f} s: {bin_dir(version)} (log {logf})")
    return bin_dir(version)


def ensure_built(version: str = VERSION, allow_build: bool = True, jobs: int = 2):
    """(bin_dir, None) when the programs exist (building them if allowed), else (None, reason)."""
    if built(version):
        return bin_dir(version), None
    if not allow_build:
        return None, f"llama.cpp programs not built in {bin_dir(version)} (run: python benchmarks/llamacpp.py build)"
    try:
        return build(version, jobs=jobs), None
    except (subprocess.CalledProcessError, OSError, tarfile.TarError) as e:
        return None, f"llama.cpp build impossible here ({e}); see {CACHE / 'build.log'}"


def _fingerprint(hf_dir: Path) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        p = hf_dir / name
        if p.exists():
            st = p.stat()
            h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def convert(hf_dir: str | Path, version: str = VERSION, outtype: str = "f32") -> Path:
    """Convert an HF Llama checkpoint to GGUF `outtype` (f32; q8_0: llama.cpp's 8-bit blocks
    of 32 with one fp16 scale each; q4_0: 4-bit blocks of 32, made from the f32 file by
    llama-quantize --pure, so that every matrix is Q4_0 as every linear of ours is int4),
    cached by the files' size and mtime."""
    hf_dir = Path(hf_dir).resolve()
    stem = f"{hf_dir.name}-{hashlib.sha256(str(hf_dir).encode()).hexdigest()[:6]}"  # one per folder
    out = CACHE / "gguf" / f"{stem}-{_fingerprint(hf_dir)}.{outtype}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    if outtype == "q4_0":
        bins, why = ensure_built(version, allow_build=False)
        if bins is None:
            raise RuntimeError(why)
        f32, tmp = convert(hf_dir, version, "f32"), out.with_suffix(".tmp")
        r = subprocess.run([str(bins / "llama-quantize"), "--pure", str(f32), str(tmp), "Q4_0"],
                           capture_output=True, text=True)
        if r.returncode != 0 or not tmp.exists():
            raise RuntimeError(f"llama-quantize of {f32} failed:\n{(r.stdout + r.stderr)[-3000:]}")
        tmp.replace(out)
        return out
    src = str(fetch(version))
    tmp = out.with_suffix(".tmp")
    code = _CONVERT_SHIM.format(src=src, args=[str(hf_dir), "--outtype", outtype, "--outfile", str(tmp)])
    env = {**os.environ, "PYTHONPATH": src, "NO_LOCAL_GGUF": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not tmp.exists():
        raise RuntimeError(f"GGUF conversion of {hf_dir} failed:\n{r.stderr[-3000:]}")
    tmp.replace(out)
    for stale in out.parent.glob(f"{stem}-*.{outtype}.gguf"):  # older snapshots of the same folder
        if stale != out:
            stale.unlink(missing_ok=True)
    return out


def tokenize(bins: Path, gguf: Path, text: str) -> list[int]:
    """llama.cpp's token ids for `text` (BOS added as the model's metadata says)."""
    r = subprocess.run([str(bins / "llama-tokenize"), "-m", str(gguf), "--ids", "--log-disable",
                        "--no-escape", "--stdin"], input=text, capture_output=True, text=True, check=True)
    m = re.search(r"\[([\d,\s]*)\]\s*$", r.stdout)
    if not m:
        raise RuntimeError(f"cannot parse llama-tokenize output: {r.stdout[-300:]!r}")
    return [int(x) for x in m.group(1).replace(",", " ").split()]


_NUM = r"([0-9.]+)"


def parse_timing(stdout: str, stderr: str, n: int) -> tuple[int, float | None, float | None]:
    """(new tokens, seconds of prompt + decode, acceptance or None) from a program's logs."""
    log = stdout + stderr
    enc = re.search(rf"encoded\s+\d+ tokens in\s+{_NUM} seconds", log)
    dec = re.search(rf"decoded\s+(\d+) tokens in\s+{_NUM} seconds", log)
    if dec:  # llama-speculative / llama-lookup
        drafted = re.search(r"n_drafted\s*=\s*(\d+)", log)
        acc = re.search(r"n_accept\s*=\s*(\d+)", log)
        a = int(acc.group(1)) / int(drafted.group(1)) if acc and drafted and int(drafted.group(1)) else None
        return int(dec.group(1)), float(dec.group(2)) + (float(enc.group(1)) if enc else 0.0), a
    pe = re.search(rf"prompt eval time =\s*{_NUM} ms", log)
    ev = re.search(rf"\beval time =\s*{_NUM} ms /\s*(\d+) runs", log)
    if pe and ev:  # llama-completion (llama_perf_context_print); the first token comes from the prompt pass
        return int(ev.group(2)) + 1, (float(pe.group(1)) + float(ev.group(1))) / 1000, None
    return n, None, None


def generated_text(stdout: str, prompt_text: str, display_prompt: bool) -> str:
    """The continuation printed by a program (which may echo the prompt first)."""
    out = stdout
    if display_prompt:
        i = out.find(prompt_text)
        out = out[i + len(prompt_text):] if i >= 0 else out
    return out[:-2] if out.endswith("\n\n") else out


class LlamaCppRunner:
    """One llama.cpp program as a benchmark row; `decode` maps our token ids to text."""
    group = "llama.cpp"

    def __init__(self, name, program, bins: Path, gguf: Path, decode, setting="", threads=2,
                 draft_gguf: Path | None = None, extra=(), strip_bos: bool = True):
        self.name, self.program, self.bins, self.gguf, self.decode = name, program, bins, gguf, decode
        self.strip_bos = strip_bos       # the prompt starts with a BOS that llama.cpp adds itself
        self.setting, self.threads, self.draft_gguf, self.extra = setting, threads, draft_gguf, list(extra)

    def command(self, prompt_text: str, greedy: bool, seed: int, n: int) -> list[str]:
        t = str(self.threads)
        cmd = [str(self.bins / self.program), "-m", str(self.gguf), "-p", prompt_text, "--no-escape",
               "-n", str(n), "-t", t, "-tb", t, "-c", "2048", "--ignore-eos", "--seed", str(seed),
               "--top-k", "0", "--top-p", "1", "--min-p", "0", "--temp", "0" if greedy else "1"]
        if self.program == "llama-completion":
            cmd += ["-no-cnv", "--no-display-prompt"]
        if self.draft_gguf is not None:
            cmd += ["-md", str(self.draft_gguf), "-td", t]
        return cmd + self.extra

    def run(self, prompt_ids, greedy: bool, seed: int, n: int) -> dict:
        text = self.decode(list(prompt_ids)[1:] if self.strip_bos else list(prompt_ids))
        for attempt in range(1, 4):  # the programs' async logger rarely loses its last lines at exit
            r = subprocess.run(self.command(text, greedy, seed, n), capture_output=True)
            out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
            if r.returncode != 0:
                raise RuntimeError(f"{self.program} failed ({r.returncode}): {err[-800:]}")
            n_new, secs, acc = parse_timing(out, err, n)
            if secs is not None:
                return {"n_new": n_new, "seconds": secs, "tokens": None, "acceptance": acc, "attempts": attempt,
                        "text": generated_text(out, text, self.program != "llama-completion")}
        raise RuntimeError(f"{self.program}: no timing found in its log (3 attempts): {err[-800:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--version", default=VERSION)
    c = sub.add_parser("convert")
    c.add_argument("dirs", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        path, why = ensure_built(args.version, jobs=args.jobs)
        print(path or f"SKIP: {why}")
        return 0 if path else 1
    for d in args.dirs:
        print(convert(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
