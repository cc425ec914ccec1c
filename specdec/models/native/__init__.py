"""The compiled decoder: a whole cached forward in one C call (see decoder.c)."""
from .build import load
from .forward import NativeForward, supported

__all__ = ["NativeForward", "load", "supported"]
