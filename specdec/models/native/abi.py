"""The C boundary of the compiled decoder: the ctypes mirrors of model.h's structs, every
exported function's argument and return types, and the check that the mirrors match the C
layout (run once at load, so a field added on one side only fails there, with its name).

    lib = ctypes.CDLL(path); declare(lib)      # raises LayoutError on a mismatch
"""
from __future__ import annotations

import ctypes

P = ctypes.c_void_p                     # any data pointer (tensors' data_ptr(), or None)
PP = ctypes.POINTER(ctypes.c_void_p)    # an array of per-layer pointers
_int, _f32, _size = ctypes.c_int, ctypes.c_float, ctypes.c_size_t


class Model(ctypes.Structure):
    """model.h's Model: the shapes and the packed weights' pointers."""
    _fields_ = [(n, _int) for n in ("hidden", "heads", "kv_heads", "head_dim", "inter",
                                    "vocab", "layers", "rope_len")] + \
               [("eps", _f32)] + \
               [(n, P) for n in ("embed", "norm", "head", "rope_cos", "rope_sin")] + \
               [(n, PP) for n in ("in_norm", "qkv", "qkv_bias", "o", "post_norm", "gate_up", "down")] + \
               [(n, PP) for n in ("qkv_s", "o_s", "gate_up_s", "down_s")] + [("head_s", P)] + \
               [("int4", _int)]


class Cache(ctypes.Structure):
    """model.h's Cache: per-layer K and V pointers, (rows, Hkv, max_len, D) each."""
    _fields_ = [("k", PP), ("v", PP), ("rows", _int), ("max_len", _int)]


class Call(ctypes.Structure):
    """model.h's Call: one forward's inputs and outputs (pointers are None where unused)."""
    _fields_ = [("B", _int), ("T", _int), ("tokens", P), ("embeds", P), ("pos", P), ("slots", P),
                ("anc", P), ("tree_base", P), ("row0", _int), ("layers", _int), ("want_logits", _int),
                ("out", P), ("argmax", P), ("scratch", P), ("threads", _int)]


_M, _C, _A = ctypes.POINTER(Model), ctypes.POINTER(Cache), ctypes.POINTER(Call)

# name -> (return type, argument types), as decoder.c and its headers declare them
SIGNATURES = {
    "sd_forward": (_int, [_M, _C, _A]),
    "sd_layout": (_int, [P, _int]),
    "sd_scratch_floats": (_size, [_M, _int, _int, _int]),
    "sd_draft_argmax": (_int, [_M, _C, _int, P, P, _int, _int, P, P, P, _int]),
    "sd_draft_sample": (_int, [_M, _C, _int, _int, P, P, _int, _int, P, P, P, P, P, P, _int]),
    "sd_head_draft": (_int, [_M, _C, _int, _int, P, P, P, P, _int, P, P, P, _f32, P, P, P, _int, P,
                             P, P, P, P, _int]),
    "sd_verify_sample": (None, [P, _int, _int, _int, P, P, P, P, P, P, P, P, P, _int]),
    "sd_stream": (_f32, [P, _size, _int]),
    "sd_packed_floats": (_size, [_int, _int]),
    "sd_packed_groups": (_size, [_int, _int]),
    "sd_pack": (None, [P, _int, _int, P]),
    "sd_pack_i8": (None, [P, _int, _int, P]),
    "sd_pack_i4": (None, [P, P, _int, _int, P, P]),
    "sd_linear": (None, [P, _int, _int, P, _int, P, _int]),
    "sd_linear_i8": (None, [P, _int, _int, P, P, _int, P, _int]),
    "sd_linear_i4": (None, [P, _int, _int, P, P, _int, P, _int]),
}


class LayoutError(RuntimeError):
    """The ctypes mirrors disagree with the compiled structs."""


def python_layout() -> list[int]:
    """What model.h's layout_of writes, computed from the ctypes mirrors."""
    out = []
    for struct in (Model, Cache, Call):
        out.append(ctypes.sizeof(struct))
        out += [getattr(struct, name).offset for name, _ in struct._fields_]
    return out


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Set every export's restype and argtypes, then check the struct layouts; -> lib."""
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    want = python_layout()
    got = (ctypes.c_int64 * (len(want) + 8))()
    n = lib.sd_layout(got, len(got))
    got = list(got[:n])
    if got != want:
        names = [f"{s.__name__}.{f}" for s in (Model, Cache, Call) for f in ["sizeof"] + [n for n, _ in s._fields_]]
        diff = [f"{name}: C {c}, ctypes {p}" for name, c, p in zip(names, got, want) if c != p]
        raise LayoutError("the compiled decoder's structs differ from models/native/abi.py: "
                          + ("; ".join(diff) or f"{n} fields in C, {len(want)} in ctypes"))
    return lib
