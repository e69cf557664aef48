"""The CUDA driver's virtual memory calls through ctypes, for the GPU probes
(handle_probe.py, remap_probe.py): libcuda, the structures its calls take,
and a result check."""
import ctypes

cu = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_uint64


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Flags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Loc), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", Flags)]


class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", ctypes.c_int)]


def ck(r, what):
    if r != 0:
        raise RuntimeError("%s: CUresult %d" % (what, r))
