#!/usr/bin/env python3
"""Run ONNX Runtime once: load the library, ask its version and the C API level benchgen's
`ort` crate needs (24). A library that does not load or run on this CPU fails here, at
setup, instead of in `benchgen embed`. Usage: ort-check.py LIBRARY"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])


class OrtApiBase(ctypes.Structure):
    _fields_ = [
        ("GetApi", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)),
        ("GetVersionString", ctypes.CFUNCTYPE(ctypes.c_char_p)),
    ]


lib.OrtGetApiBase.restype = ctypes.POINTER(OrtApiBase)
base = lib.OrtGetApiBase().contents
version = base.GetVersionString().decode()
if not base.GetApi(24):
    sys.exit(f"ONNX Runtime {version} does not offer C API level 24")
print(version)
