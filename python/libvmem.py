"""libvmem from Python: put PyTorch or CuPy on libvmem in one call, and read or
change the device limit and the statistics at run time.

ctypes only, no build step.  The shared library is looked up, in order, in
$VMEM_LIBRARY, next to this file (where `pip install .` puts it), in the build directories of the source tree
this file sits in (build*/src/), then through the dynamic loader
(libvmem.so.0, libvmem.so).

    import libvmem
    libvmem.install_torch()          # before the first CUDA allocation; every
    ...                              # optimizer step also ends a libvmem step
    libvmem.set_limit(8 << 30)       # or "8G"
    print(libvmem.stats()["spilledBytes"])

Without PyTorch's optimizers (or with install_torch(step_hook=False)), call
libvmem.step_end() after each training step instead.

The allocator instances are per device and are created on first use from the
VMEM_* environment (VMEM_LIMIT, VMEM_HOST_LIMIT, VMEM_CONTROL_FILE,
VMEM_STATS_FILE, ...), see docs/embedding.md.
"""

import ctypes
import ctypes.util
import glob
import json
import os
import sys
import time

__all__ = [
    "VmemError", "library_path", "load", "install_torch", "install_cupy",
    "set_limit", "get_limit", "stats", "step_end", "step_naive", "trim", "parse_size",
    "install_step_hook", "remove_step_hook", "install_offload", "offload_stats",
    "strerror", "region", "pause", "resume", "tag_stats", "tag_id", "mempool", "version",
    "record_stream", "copy_async", "recompute", "recompute_stats",
]

VMEM_OK = 0
VMEM_PENDING = 1
VMEM_ERR_SIZE = -2
VMEM_LIMIT_FORCE = 1

_lib = None
_path = None


class VmemError(RuntimeError):
    """A libvmem call failed; .status holds the vmem_status_t."""

    def __init__(self, status, what):
        self.status = status
        super().__init__("%s: %s (status %d)" % (what, strerror(status), status))


def _candidates():
    env = os.environ.get("VMEM_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libvmem.so.0", "libvmem.so"):
        yield os.path.join(here, name)
    root = os.path.dirname(here)
    built = []
    for path in glob.glob(os.path.join(root, "build*", "src", "libvmem.so")):
        try:  # a build that links libvmem.so but has not built it (a dangling link): skipped
            built.append((os.path.getmtime(path), path))
        except OSError:
            continue
    for _, path in sorted(built, reverse=True):  # newest build first
        yield path
    found = ctypes.util.find_library("vmem")
    for name in ("libvmem.so.0", "libvmem.so", found):
        if name:
            yield name


def _declare(lib):
    c = ctypes
    vp, sz, st, i = c.c_void_p, c.c_size_t, c.c_int, c.c_int
    sigs = {
        "vmem_strerror": (c.c_char_p, [st]),
        "vmem_version": (c.c_char_p, []),
        "vmem_parse_size": (st, [c.c_char_p, c.POINTER(sz)]),
        "vmem_instance_ex": (st, [i, c.POINTER(vp)]),
        "vmem_instance_peek": (vp, [i]),
        "vmem_instances_step_end": (st, []),
        "vmem_step_end": (st, [vp]),
        "vmem_step_naive": (st, [vp]),
        "vmem_step_exclude": (st, [vp, c.c_double]),
        "vmem_instances_step_exclude": (st, [c.c_double]),
        "vmem_set_limit_ex": (st, [vp, sz, c.c_uint, c.POINTER(sz)]),
        "vmem_get_limit": (st, [vp, c.POINTER(sz)]),
        "vmem_trim": (st, [vp, c.POINTER(sz)]),
        "vmem_stats_json": (st, [vp, c.c_char_p, sz, c.POINTER(sz)]),
        "vmem_alloc_stream": (vp, [vp, sz, vp]),
        "vmem_free_stream": (st, [vp, vp, vp]),
        "vmem_last_status": (st, []),
        "vmem_torch_malloc": (vp, [sz, i, vp]),
        "vmem_torch_free": (None, [vp, sz, i, vp]),
        "vmem_cupy_malloc": (vp, [vp, sz, i]),
        "vmem_cupy_free": (None, [vp, vp, i]),
        "vmem_set_tag": (st, [vp, c.c_uint, c.POINTER(c.c_uint)]),
        "vmem_pause": (st, [vp, c.c_uint, c.c_uint]),
        "vmem_resume_ex": (st, [vp, c.c_uint, c.c_uint]),
        "vmem_get_tag_stats": (st, [vp, c.c_uint, c.c_void_p]),
        "vmem_torch_graph_release": (sz, [i]),
        "vmem_host_reserve": (st, [vp, sz, c.POINTER(sz)]),
        "vmem_torch_graph_held": (sz, [i, c.POINTER(sz)]),
        "vmem_record_stream": (st, [vp, vp, vp]),
        "vmem_copy_async": (st, [vp, vp, vp, sz, vp]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def load():
    """Loads libvmem once and returns the ctypes.CDLL.  Raises OSError with
    every place tried if it cannot be found."""
    global _lib, _path
    if _lib is not None:
        return _lib
    tried = []
    for cand in _candidates():
        if os.sep in cand and not os.path.exists(cand):
            tried.append(cand + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(cand)
            _declare(lib)
        except (OSError, AttributeError) as e:
            tried.append("%s (%s)" % (cand, e))
            continue
        _lib = lib
        _path = _resolve(lib, cand)
        return _lib
    raise OSError("libvmem.so not found; set VMEM_LIBRARY.  Tried: " + "; ".join(tried))


def _resolve(lib, cand):
    """The file the loader opened, so that PyTorch dlopens the same copy."""
    if os.sep in cand:
        return os.path.abspath(cand)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libvmem.so"):
                    return parts[5]
    except OSError:
        pass
    return cand


def library_path():
    """Path of the loaded libvmem.so (loads it if needed)."""
    load()
    return _path


def version():
    """The version of the loaded libvmem.so ("0.1.0")."""
    return load().vmem_version().decode()


def strerror(status):
    try:
        return load().vmem_strerror(status).decode()
    except OSError:
        return "status %d" % status


def parse_size(value):
    """An int, or a string such as "8G", "512M", "1073741824" -> bytes."""
    if isinstance(value, bool):
        raise TypeError("size must be an int or a string")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("size must not be negative")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    out = ctypes.c_size_t()
    st = load().vmem_parse_size(str(value).encode(), ctypes.byref(out))
    if st != VMEM_OK:
        raise ValueError("not a size: %r" % (value,))
    return out.value


def _instance(device):
    lib = load()
    v = ctypes.c_void_p()
    st = lib.vmem_instance_ex(int(device), ctypes.byref(v))
    if st != VMEM_OK:
        raise VmemError(st, "libvmem instance for device %d" % device)
    return v


def set_limit(nbytes, device=0, force=False):
    """Sets the device limit of device's instance (created if needed).
    Returns (status, held): status is VMEM_OK, or VMEM_PENDING when live data
    still holds more than the new limit (the shrink completes as blocks are
    freed); held is what the device arena holds after the call.  Raises
    VmemError for a limit above the start cap (unless force) and on error."""
    held = ctypes.c_size_t()
    st = load().vmem_set_limit_ex(_instance(device), parse_size(nbytes),
                                  VMEM_LIMIT_FORCE if force else 0, ctypes.byref(held))
    if st not in (VMEM_OK, VMEM_PENDING):
        raise VmemError(st, "set_limit(%s)" % (nbytes,))
    if _offload is not None:  # a cut pushes the offload's hooks at once
        _offload.limit_set(device)
    return st, held.value


def get_limit(device=0):
    """The device limit in force (the target of a pending shrink)."""
    out = ctypes.c_size_t()
    st = load().vmem_get_limit(_instance(device), ctypes.byref(out))
    if st != VMEM_OK:
        raise VmemError(st, "get_limit")
    return out.value


def stats(device=0):
    """The statistics of device's instance as a dict (vmem_stats_json keys:
    AntMan's deviceMemUsedMax, ..., and libvmem's limit, deviceHeld,
    spills, spilledBytes, ...)."""
    lib = load()
    v = _instance(device)
    need = ctypes.c_size_t()
    size = 2048
    while True:
        buf = ctypes.create_string_buffer(size)
        st = lib.vmem_stats_json(v, buf, size, ctypes.byref(need))
        if st == VMEM_OK:
            return json.loads(buf.value.decode())
        if st != VMEM_ERR_SIZE or need.value + 1 <= size:
            raise VmemError(st, "stats")
        size = need.value + 1


_warned_double = False
_in_hook = False
_gc_seconds = 0.0       # Python's garbage collections since the last step end
_gc_began = None        # perf_counter() at the start of the collection running
_gc_hooked = False


def _gc_callback(phase, info):
    global _gc_seconds, _gc_began
    if phase == "start":
        _gc_began = time.perf_counter()
    elif _gc_began is not None:
        _gc_seconds += time.perf_counter() - _gc_began
        _gc_began = None


def _gc_seconds_taken():
    """The seconds Python's garbage collector ran since the last call (0
    at the first, which starts the count: gc.callbacks)."""
    global _gc_seconds, _gc_hooked
    if not _gc_hooked:
        import gc
        gc.callbacks.append(_gc_callback)
        _gc_hooked = True
    seconds, _gc_seconds = _gc_seconds, 0.0
    return seconds


def step_end(device=None):
    """Marks the end of a training step (vmem_step_end): applies control-file
    changes, records the step's time and memory, writes the statistics file.
    device None: every instance created so far.  While the optimizer hook of
    install_step_hook() marks the steps, a call from elsewhere is ignored
    (with one warning): two step ends per training step would split every
    step in two for the statistics and the placement planner.  The time
    Python's garbage collector ran since the last step end is reported with
    it (vmem_step_exclude): the planner's rule trials leave it out."""
    global _warned_double
    if _step_hook is not None and not _in_hook:
        if not _warned_double:
            _warned_double = True
            import warnings
            warnings.warn("libvmem.step_end() ignored: the optimizer step hook of install_torch() "
                          "already ends each step (use install_torch(step_hook=False) or "
                          "remove_step_hook() to mark steps yourself)", RuntimeWarning, stacklevel=2)
        return
    lib = load()
    # A collection's pause is not the step's own work: left out where the
    # placement planner times its rules (vmem_step_exclude).
    paused = _gc_seconds_taken()
    if device is None:
        if paused > 0:
            lib.vmem_instances_step_exclude(paused)
        st = lib.vmem_instances_step_end()
    else:
        v = _instance(device)
        if paused > 0:
            lib.vmem_step_exclude(v, paused)
        st = lib.vmem_step_end(v)
    if st != VMEM_OK:
        raise VmemError(st, "step_end")
    if _offload is not None:
        _offload.step_end(device)


def step_naive(device=0):
    """vmem_step_naive: the rest of the step in progress goes by naive
    placement (no plan); the planner still records it.  The offload calls it
    in the first step under a cut, whose plan would come from a step without
    the cut."""
    st = load().vmem_step_naive(_instance(device if device is not None else 0))
    if st != VMEM_OK:
        raise VmemError(st, "step_naive")


def _stream_handle(stream):
    """A raw stream handle from a torch.cuda.Stream, a CuPy stream or an int."""
    for attr in ("cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if h is not None:
            return int(h)
    return int(stream or 0)


def record_stream(tensor_or_ptr, stream, device=None):
    """vmem_record_stream: the work queued on `stream` so far uses the
    block (PyTorch's Tensor.record_stream, a no-op through the pluggable
    allocator).  Freed before that work is done, the block is reused only
    after it; the free does not wait.  tensor_or_ptr: a CUDA tensor, or an
    address of a block of device's instance (device None: the tensor's, or
    0).  stream: a torch.cuda.Stream, a CuPy stream or a raw handle.  Raises
    VmemError (a block not handed out by libvmem, a stream capturing a CUDA
    graph, a block of a tag).  docs/embedding.md, "Streams"."""
    ptr = tensor_or_ptr
    if hasattr(tensor_or_ptr, "data_ptr"):
        ptr = tensor_or_ptr.data_ptr()
        if device is None and getattr(tensor_or_ptr, "device", None) is not None:
            device = tensor_or_ptr.device.index
    st = load().vmem_record_stream(_instance(device or 0), ctypes.c_void_p(int(ptr)),
                                   ctypes.c_void_p(_stream_handle(stream)))
    if st != VMEM_OK:
        raise VmemError(st, "record_stream")


def copy_async(dst, src, nbytes, stream=None, device=0):
    """vmem_copy_async: queues a copy of nbytes from address src to dst on
    `stream` (a torch.cuda.Stream, a CuPy stream or a raw handle; None: the
    legacy default stream) made by a small kernel instead of a copy engine,
    for copies to pinned host memory while libvmem maps memory (a copy
    engine's copy to host makes each mapping wait about 1 ms;
    docs/placement.md, "Copies out by the SMs").  Raises VmemError where it
    cannot run (then copy with a copy engine)."""
    st = load().vmem_copy_async(_instance(device), ctypes.c_void_p(int(dst)),
                                ctypes.c_void_p(int(src)), ctypes.c_size_t(int(nbytes)),
                                ctypes.c_void_p(_stream_handle(stream)))
    if st != VMEM_OK:
        raise VmemError(st, "copy_async")


def trim(device=0):
    """Gives every empty region back to the device and host; returns bytes."""
    out = ctypes.c_size_t()
    st = load().vmem_trim(_instance(device), ctypes.byref(out))
    if st != VMEM_OK:
        raise VmemError(st, "trim")
    return out.value


# --------------------------------------------------------------------------
# Frameworks
# --------------------------------------------------------------------------

_step_hook = None
_offload = None
_step_ends = 0          # step ends made by the hook (read by the GradScaler wrapper)
_scaler_orig = None     # (GradScaler class, its own step) while wrapped


def _hook_step_end(opt, args, kwargs):
    global _in_hook, _step_ends
    _step_ends += 1
    _in_hook = True
    try:
        step_end()
    finally:
        _in_hook = False


def _wrap_grad_scaler():
    """torch.amp.GradScaler.step skips optimizer.step() when the gradients
    hold inf or NaN (mixed precision, mostly in the first steps while the
    scale settles); the optimizer hook then does not run and two iterations
    would make one libvmem step.  The wrapper ends the step itself when the
    scaler's step ran no optimizer step.  Undone by remove_step_hook()."""
    global _scaler_orig
    if _scaler_orig is not None:
        return
    try:
        from torch.amp import GradScaler
    except ImportError:  # PyTorch before 2.3: torch.cuda.amp only
        try:
            from torch.cuda.amp import GradScaler
        except ImportError:
            return
    orig = GradScaler.__dict__.get("step")
    if orig is None:
        return

    def step(self, optimizer, *args, **kwargs):
        before = _step_ends
        out = orig(self, optimizer, *args, **kwargs)
        if _step_hook is not None and _step_ends == before:
            _hook_step_end(optimizer, args, kwargs)  # skipped: inf/NaN gradients
        return out
    step.__doc__ = orig.__doc__
    step.__wrapped__ = orig
    GradScaler.step = step
    _scaler_orig = (GradScaler, orig)


def install_step_hook():
    """Marks a step end (step_end() on every instance) after every
    torch.optim optimizer step, through PyTorch's global optimizer post-step
    hook, so that the placement planner sees each training step without a
    call in the training loop.  An iteration whose torch.amp.GradScaler
    skipped the optimizer step (inf or NaN gradients) ends a step too: the
    scaler's step is wrapped.  Idempotent; returns the hook handle
    (remove_step_hook() turns both off).  A loop with several optimizers, or with
    several optimizer steps per iteration, should call step_end() itself
    once per iteration instead (docs/embedding.md)."""
    global _step_hook
    if _step_hook is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        _step_hook = register_optimizer_step_post_hook(_hook_step_end)
        _wrap_grad_scaler()
    return _step_hook


def remove_step_hook():
    """Removes the hook install_step_hook() installed (no-op if none), and
    the GradScaler wrapper with it."""
    global _step_hook, _scaler_orig
    if _step_hook is not None:
        _step_hook.remove()
        _step_hook = None
    if _scaler_orig is not None:
        cls, orig = _scaler_orig
        cls.step = orig
        _scaler_orig = None


def install_torch(step_hook=True, offload=None, recompute=None):
    """Makes libvmem PyTorch's CUDA allocator (CUDAPluggableAllocator +
    change_current_allocator).  Must run before the first CUDA allocation of
    the process; raises RuntimeError otherwise.  Returns the allocator.
    step_hook (default True): also install_step_hook(), so every optimizer
    step ends a libvmem step (placement, statistics, control changes).
    offload (default: $VMEM_TORCH_OFFLOAD, on unless "0"): install the saved
    tensor hooks of libvmem_offload, which copy autograd's saved tensors to
    pinned host memory and back on copy streams while the kernels run, only
    while a step does not fit under the limit (docs/placement.md, "Overlap";
    offload_stats()); the hooks are pushed only while they may act
    ($VMEM_TORCH_OFFLOAD_HOOKS=always: all the time).  Installed on the
    calling thread: run the forward pass and end the steps there.

    With the pluggable allocator, torch.cuda.memory_allocated() and the other
    caching-allocator statistics are not available: use libvmem.stats().
    Tensor.record_stream() does nothing under it: see docs/embedding.md.

    recompute (default: $VMEM_TORCH_RECOMPUTE, on unless "0"): recompute()
    the first model trained after this call, found at its first forward pass
    in training mode with gradients on (a global module hook, removed once
    it found a model with repeated blocks, or after 64 modules trained or
    4096 module calls without one).  Its blocks recompute only while the
    job is cut, and only those whose forward passes, checked while uncut,
    left their modules' state alone (libvmem_recompute._Purity).
    recompute(model) names the model instead."""
    import torch
    from torch.cuda import memory as tmem
    alloc = tmem.CUDAPluggableAllocator(library_path(), "vmem_torch_malloc",
                                        "vmem_torch_free")
    try:
        tmem.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("libvmem.install_torch() must run before PyTorch's first CUDA "
                           "allocation: " + str(e)) from e
    if step_hook:
        install_step_hook()
    if offload is None:
        offload = _env_flag("VMEM_TORCH_OFFLOAD", True)
    if offload:
        install_offload()
    if recompute is None:
        recompute = _env_flag("VMEM_TORCH_RECOMPUTE", True)
    if recompute:
        _recompute_first_model()
    return alloc


_find_hook = None


_FIND_MODULES = 64    # modules trained without repeated blocks before the search stops
_FIND_CALLS = 4096    # module calls of any kind (inference too) before it stops


def _drop_find_hook():
    global _find_hook
    if _find_hook is not None:
        _find_hook.remove()
        _find_hook = None


def _recompute_first_model():
    """install_torch(recompute=True): a global forward pre-hook that calls
    recompute() on the first module run in training mode with gradients on
    that has repeated blocks (the outermost: its pre-hook runs before its
    children's), then removes itself; also after _FIND_MODULES modules
    trained without such blocks, or _FIND_CALLS module calls (a job that
    only infers pays for the hook that long).  The blocks so found are
    recomputed only once checked (require_safe)."""
    global _find_hook
    if _find_hook is not None:
        return
    import torch
    import libvmem_recompute as rc

    looked = set()
    calls = [0]
    asked = os.environ.get("VMEM_TORCH_RECOMPUTE", "").strip() != ""

    def pre(module, args):
        if _find_hook is None:
            return None
        calls[0] += 1
        if calls[0] > _FIND_CALLS:
            _drop_find_hook()
            return None
        if not module.training or not torch.is_grad_enabled() or id(module) in looked:
            return None
        looked.add(id(module))
        if not rc.find_blocks(torch, module):
            if len(looked) >= _FIND_MODULES:
                _drop_find_hook()
                if asked:
                    import warnings
                    warnings.warn("libvmem: VMEM_TORCH_RECOMPUTE found no model with repeated "
                                  "blocks in the first %d modules trained; call "
                                  "libvmem.recompute(model) with blocks=" % _FIND_MODULES,
                                  RuntimeWarning)
            return None
        _drop_find_hook()
        mine = set(id(m) for m in module.modules())
        if any(id(b) in mine for r in rc._rc for b in r.blocks):
            return None  # recompute() was called on it already
        recompute(module, _found=True)
        return None
    _find_hook = torch.nn.modules.module.register_module_forward_pre_hook(pre)


def _env_flag(name, default):
    val = os.environ.get(name)
    if val is None or val == "":
        return default
    val = val.strip().lower()
    if val in ("1", "true", "yes", "on"):
        return True
    if val in ("0", "false", "no", "off"):
        return False
    raise ValueError("%s: not a boolean: %r" % (name, val))


def install_offload(min_bytes=1 << 20):
    """Installs the overlapped offload of saved tensors (libvmem_offload)
    without the allocator (install_torch does it by default).  Idempotent."""
    global _offload
    import sys
    import torch
    import libvmem_offload as off
    off.install(sys.modules[__name__], torch, min_bytes=min_bytes)
    _offload = off
    return off


def offload_stats():
    """The saved tensor offload's counters (libvmem_offload.stats()):
    budget, offloaded_bytes, prefetched_bytes, late_fetch_bytes (copied back
    when backward needed them, not ahead), last_step, ...; {"installed":
    False} without it."""
    if _offload is None:
        return {"installed": False}
    return _offload.stats()


def recompute(model, blocks=None, policy=None, _found=False):
    """While the limit is below what the last uncut step needed, recompute
    the activations of model's repeated blocks in the backward pass
    (torch.utils.checkpoint) instead of keeping them or moving them through
    the host link (libvmem_recompute).  blocks: the modules to consider
    (default: found in model, and each checked while uncut: one whose
    forward changes its modules' state or runs hooks is never recomputed);
    policy: "auto" (enough blocks to cover the cut; default, or
    $VMEM_TORCH_RECOMPUTE_POLICY) or "all".  Stops install_torch's search
    for a model (this one is named).  Returns the
    libvmem_recompute.Recompute; its remove() unwraps the blocks.
    docs/placement.md, "Recomputation"."""
    import torch
    import libvmem_recompute as rc
    if not _found:
        _drop_find_hook()
    if policy is None:
        policy = os.environ.get("VMEM_TORCH_RECOMPUTE_POLICY", "").strip().lower() or "auto"
    return rc.install(sys.modules[__name__], torch, model, blocks=blocks, policy=policy,
                      require_safe=_found)


def recompute_stats():
    """libvmem_recompute's counters ({"installed": False} without recompute())."""
    import libvmem_recompute as rc
    return rc.stats()


def install_cupy(stream_aware=False):
    """Makes libvmem CuPy's allocator (cupy.cuda.set_allocator), replacing
    CuPy's memory pool.  Returns the allocator.

    stream_aware False (default): CFunctionAllocator over vmem_cupy_malloc /
    vmem_cupy_free, no Python in the allocation path; CuPy passes no stream,
    so every block counts as used on the legacy default stream, which is
    right for programs that use one CuPy stream at a time.  True: a Python
    allocator that passes cupy.cuda.get_current_stream() to libvmem, for
    programs that allocate on several streams (a few microseconds slower per
    allocation)."""
    import cupy
    lib = load()
    if not stream_aware:
        malloc = ctypes.cast(lib.vmem_cupy_malloc, ctypes.c_void_p).value
        free = ctypes.cast(lib.vmem_cupy_free, ctypes.c_void_p).value
        alloc = cupy.cuda.memory.CFunctionAllocator(0, malloc, free, lib)
        cupy.cuda.set_allocator(alloc.malloc)
        return alloc

    streams = {}

    def py_malloc(size, device_id):
        if size == 0:
            return 0
        stream = cupy.cuda.get_current_stream().ptr
        p = lib.vmem_alloc_stream(_instance(device_id), size, stream)
        if not p:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0)
        streams[p] = stream
        return p

    def py_free(ptr, device_id):
        stream = streams.pop(ptr, None)
        lib.vmem_free_stream(_instance(device_id), ptr, stream)

    alloc = cupy.cuda.memory.PythonFunctionAllocator(py_malloc, py_free)
    cupy.cuda.set_allocator(alloc.malloc)
    return alloc


# --------------------------------------------------------------------------
# Tags, pause and resume (docs/tags.md)
# --------------------------------------------------------------------------

VMEM_PAUSE_KEEP = 1
VMEM_PAUSE_DISCARD = 2
VMEM_RESUME_SPILL = 1
_TAG_STATES = ("active", "paused-keep", "paused-discard")
_tags = {}


class _TagStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("tag", ctypes.c_uint), ("state", ctypes.c_int),
                ("blocks", ctypes.c_size_t), ("in_use", ctypes.c_size_t),
                ("requested", ctypes.c_size_t), ("device_held", ctypes.c_size_t),
                ("host_held", ctypes.c_size_t), ("host_in_use", ctypes.c_size_t),
                ("reserved", ctypes.c_size_t), ("peak_device_held", ctypes.c_size_t),
                ("allocs", ctypes.c_uint64), ("frees", ctypes.c_uint64),
                ("pauses", ctypes.c_uint64), ("resumes", ctypes.c_uint64),
                ("bytes_to_host", ctypes.c_uint64), ("bytes_to_device", ctypes.c_uint64),
                ("last_pause_seconds", ctypes.c_double),
                ("last_resume_seconds", ctypes.c_double)]


def tag_id(name):
    """The tag number of a name: an int is itself (0 is the default tag);
    a string gets the next free number (1, 2, ...) on first use, the same
    one afterwards (per process)."""
    if isinstance(name, bool):
        raise TypeError("a tag is a name or an int")
    if isinstance(name, int):
        if name < 0 or name >= 1 << 32:
            raise ValueError("tag out of range: %d" % name)
        return name
    name = str(name)
    if name not in _tags:
        used = set(_tags.values())
        n = 1
        while n in used:
            n += 1
        _tags[name] = n
    return _tags[name]


class region:
    """with libvmem.region("kv_cache"): ... -- allocations made by this
    thread through libvmem (PyTorch with install_torch, CuPy with
    install_cupy, or a MemPool from mempool()) go to that tag's own memory.
    The previous tag comes back on exit.  Nests."""

    def __init__(self, name, device=0):
        self.tag = tag_id(name)
        self.device = device
        self._prev = []

    def __enter__(self):
        prev = ctypes.c_uint()
        st = load().vmem_set_tag(_instance(self.device), self.tag, ctypes.byref(prev))
        if st != VMEM_OK:
            raise VmemError(st, "region(%r)" % (self.tag,))
        self._prev.append(prev.value)
        return self

    def __exit__(self, *exc):
        load().vmem_set_tag(_instance(self.device), self._prev.pop(), None)
        return False


def _empty_torch_cache():
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def pause(name, keep=True, device=0, empty_cache=True):
    """Pauses a tag: its device memory goes back to the GPU (another process
    can allocate it), every pointer stays valid for after resume().  keep
    True: contents copied to host memory; False: dropped.  No kernel may use
    the tag's tensors until resume() (with VMEM_PAUSE_GUARD=1 in the
    environment, a kept tensor touched meanwhile faults instead of being
    read from host memory: a debugging aid).  empty_cache: first synchronise and
    let PyTorch (if loaded) return the blocks it caches, so that they are
    not copied.  Raises VmemError (VMEM_ERR_UNSUPPORTED on the cuda
    backend)."""
    if empty_cache:
        _empty_torch_cache()
    st = load().vmem_pause(_instance(device), tag_id(name),
                           VMEM_PAUSE_KEEP if keep else VMEM_PAUSE_DISCARD)
    if st != VMEM_OK:
        raise VmemError(st, "pause(%r)" % (name,))


def resume(name, spill=False, device=0):
    """Resumes a paused tag at the same addresses (contents back if it was
    paused with keep).  If it does not fit under the limit: VmemError
    (VMEM_ERR_NOMEM) and it stays paused, or with spill=True what does not
    fit lies in host memory until later step ends move it back."""
    st = load().vmem_resume_ex(_instance(device), tag_id(name),
                               VMEM_RESUME_SPILL if spill else 0)
    if st != VMEM_OK:
        raise VmemError(st, "resume(%r)" % (name,))


def tag_stats(name, device=0):
    """One tag's memory as a dict: state, blocks, in_use, device_held,
    host_held, host_in_use, reserved, pauses, resumes, ..."""
    s = _TagStats()
    s.size = ctypes.sizeof(s)
    st = load().vmem_get_tag_stats(_instance(device), tag_id(name), ctypes.byref(s))
    if st != VMEM_OK:
        raise VmemError(st, "tag_stats(%r)" % (name,))
    out = {f: getattr(s, f) for f, _ in _TagStats._fields_ if f not in ("size", "version")}
    out["state"] = _TAG_STATES[s.state]
    return out


def reserve_host(nbytes, device=0):
    """Keeps nbytes of host memory ready for keep pauses (vmm backend), so
    that the pause maps it instead of pinning new host memory; 0 gives it
    back.  Returns the bytes kept.  See vmem_host_reserve in vmem.h."""
    kept = ctypes.c_size_t()
    st = load().vmem_host_reserve(_instance(device), nbytes, ctypes.byref(kept))
    if st != VMEM_OK:
        raise VmemError(st, "reserve_host(%d)" % nbytes)
    return kept.value


def graph_memory(device=0):
    """Bytes held for CUDA graphs captured with install_torch(): (held,
    freed).  PyTorch frees a graph's temporaries during capture; libvmem
    keeps them for the graph (its replays write there), see docs/tags.md."""
    freed = ctypes.c_size_t()
    held = load().vmem_torch_graph_held(device, ctypes.byref(freed))
    return held, freed.value


def release_graph_memory(device=0):
    """Gives back the graph blocks PyTorch freed: call it once the CUDA
    graphs captured so far are destroyed.  Returns the bytes."""
    return load().vmem_torch_graph_release(device)


_pools = {}


def mempool(name, device=0):
    """A torch.cuda.MemPool over libvmem for one tag, beside PyTorch's own
    allocator (as vLLM plugs its allocator in).  Use it with both contexts:

        pool = libvmem.mempool("weights")
        with libvmem.region("weights"), torch.cuda.use_mem_pool(pool):
            w = torch.empty(...)

    One pool per tag: PyTorch caches freed blocks inside a pool, so a pool
    shared by two tags would hand one tag's memory to the other."""
    import torch
    from torch.cuda import memory as tmem
    key = (tag_id(name), device)
    if key not in _pools:
        alloc = tmem.CUDAPluggableAllocator(library_path(), "vmem_torch_malloc",
                                            "vmem_torch_free")
        _pools[key] = torch.cuda.MemPool(alloc._allocator)
    return _pools[key]
