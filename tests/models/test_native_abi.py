"""The C boundary (models/native/abi.py): every export has its argument types, and the ctypes
mirrors of model.h's structs are checked against the compiled layout at load."""
from __future__ import annotations

import ctypes

import pytest

from specdec.models.native import abi, load


@pytest.fixture(scope="module")
def lib():
    lib = load()
    if lib is None:
        pytest.skip("no native decoder on this machine")
    return lib


def test_every_export_declares_its_argument_types(lib):
    for name in abi.SIGNATURES:
        assert getattr(lib, name).argtypes is not None, name


def test_the_mirrors_match_the_compiled_structs(lib):
    want = abi.python_layout()
    got = (ctypes.c_int64 * len(want))()
    assert lib.sd_layout(got, len(want)) == len(want)
    assert list(got) == want


def test_a_mirror_out_of_step_with_the_c_struct_fails_at_load(lib, monkeypatch):
    class Call(ctypes.Structure):             # a field the C struct does not have, up front
        _fields_ = [("extra", ctypes.c_int)] + abi.Call._fields_
    monkeypatch.setattr(abi, "Call", Call)
    with pytest.raises(abi.LayoutError, match="Call"):
        abi.declare(lib)
