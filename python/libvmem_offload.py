"""Overlapped offload of autograd's saved tensors while a job is cut (issue 11).

When libvmem's limit is below what a training step needs, the allocator alone
can only choose which blocks lie in host memory, where kernels then read them
through the link at every use (docs/placement.md).  PyTorch's autograd says
more than the allocator sees: a saved tensor is *packed* when the forward
pass saves it for backward and *unpacked* right before the backward node that
reads it.  This module hooks both (torch.autograd.graph's default saved
tensor hooks) and, only while the last step did not fit under the limit:

  * pack: copies the saved tensor to pinned host memory on a copy stream
    (after an event on the compute stream: its producer has run) and drops
    the device tensor once the copy is done, so its memory goes back to
    libvmem for the rest of the forward pass;
  * unpack: returns a device copy made ahead of time on a second copy stream
    (the compute stream waits on its event), or makes it then; a tensor
    whose device memory is still held (its copy out was in flight at the
    last look) is handed back as it is, with no copy;
  * skip: a tensor whose copy out had not even finished when backward
    reached it (typically the last ones saved before the loss) gave no
    memory back at the step's peak and cost the link twice: the next steps
    do not offload it (same candidate number and size), until the limit
    changes or the cut ends;
  * prefetch: at every unpack, copies back the next offloaded tensors in
    reverse pack order (the order backward reads them in) while libvmem's
    device memory in use leaves room for them under the limit.

While a step fits, the hooks are not even pushed (HookSwitch): PyTorch
calls a Python hook for every saved tensor, about 10 us each, whatever the
hook does.  They are pushed at a step end that learned a budget, or when
libvmem.set_limit() cuts the limit below the last step's demand.

The copies run while kernels run.  Which tensors: the first ones the
forward pass saves (their backward comes last, which leaves the most time to
bring them back), of at least min_bytes, that own their whole storage, until
the budget is reached (per forward pass: with gradient accumulation a step
runs several, each with its own budget and its own fetch ahead).  The budget
is learned at each step end from
libvmem's statistics (the device and host bytes in use at the step's peak
against the limit), so a job that fits offloads nothing and a cut job
offloads about what the cut takes away.

Contract: the tensors autograd saved come back as copies at other addresses
(autograd owns them; tensors the program holds keep theirs).  A saved
tensor's value is the one it had when it was saved (stream order), as
autograd requires.  Autograd checks that a saved tensor was not modified in
place before its backward only when no saved tensor hooks are installed;
the hooks installed here make that check in its place (hook_unpack) and
raise autograd's error, so a job that would fail without the offload fails
with it, not with wrong gradients.  Nothing is offloaded while a CUDA graph is being
captured.  Steps are delimited by libvmem's step ends (install_torch's
optimizer hook, or libvmem.step_end()).  docs/placement.md, "Overlap".
"""

import copy
import ctypes
import mmap
import statistics
import threading
import time
import weakref

__all__ = ["Budget", "Offload", "install", "uninstall", "stats"]

MiB = 1 << 20


class Budget:
    """How many bytes of saved tensors to offload per step, learned from the
    last steps (no torch needed: tested on its own).

    At each step end: demand = device bytes in use at the step's maximum +
    host bytes in use at the step's maximum (blocks libvmem put on host
    because they did not fit; an upper bound, the two maxima need not
    coincide).  target = limit - margin_frac of the limit (the copies in
    flight are in the measured maximum already).  A step that did not fit
    (host bytes, or demand above the limit) raises the budget by demand -
    target (at least step_min; host bytes of a step whose limit was raised
    within it, or since the last step end, do not count); a step whose
    maximum lies between the target and the limit keeps it; a step that fits
    with more than slack_frac of the limit to spare lowers it by half of the
    room, so the budget
    follows the limit both ways.  The budget, bytes per forward pass (a
    step of gradient accumulation runs several), never exceeds what the
    last step's largest pass could offload (its eligible saved tensors).  window_out, the
    bytes of copies out in flight, is limit x window_frac and window_in, the
    bytes fetched ahead, limit x window_in_frac (None: window_frac), each
    between 64 MiB and window_max (window_in: window_in_max, if set)."""

    def __init__(self, window_max=512 * MiB, window_frac=1 / 32, margin_frac=0.03,
                 slack_frac=0.02, step_min=64 * MiB, window_in_frac=None,
                 window_in_max=None):
        self.window_max = window_max
        self.window_in_max = window_in_max  # None: window_max
        self.window_frac = window_frac
        self.window_in_frac = window_in_frac
        self.window_out = self.window_in = window_max
        self.margin_frac = margin_frac
        self.slack_frac = slack_frac
        self.step_min = step_min
        self.bytes = 0
        self.limit = None  # the limit the budget was learned under
        self.step_lowest = None  # the lowest limit a candidate saw this step
        self.end_limit = None  # the limit at the last step end

    def retarget(self, limit):
        """Called at every candidate tensor with the limit in force: if a
        scheduler raised or cut it since the budget was learned, the budget
        moves by the change at once, so the first step after a raise does
        not offload for the old limit.  Returns the budget."""
        if self.limit is not None and limit != self.limit:
            self.bytes = max(0, self.bytes - (limit - self.limit))
        self.limit = limit
        if self.step_lowest is None or limit < self.step_lowest:
            self.step_lowest = limit
        return self.bytes

    def at(self, limit):
        """The budget retarget(limit) would give where it is above 0 (the
        hooks retarget only such a budget), without changing it."""
        if self.bytes > 0 and self.limit is not None and limit is not None and limit != self.limit:
            return max(0, self.bytes - (limit - self.limit))
        return self.bytes

    def start(self, limit, demand):
        """Called once per step while the budget is 0, at the step's first
        saved tensor, with the limit in force and the last step's demand
        (its device plus host maximum): a limit cut below that demand since
        the last step end starts the budget at once, at demand - target
        (at least step_min), so the step after a cut already offloads
        instead of leaving the whole excess to placement (libvmem's naive
        step, host memory made for its spills).  Returns the budget."""
        if self.bytes <= 0 and demand > limit:
            self.set_limit(limit)
            self.retarget(limit)  # the limit learned under, the step's lowest
            self.bytes = max(demand - self.target(limit), self.step_min)
        return self.bytes

    def target(self, limit):
        """The device bytes a step may use under limit: limit less the
        margin (the room the fetch ahead and the step's maximum aim at)."""
        return max(0, limit - int(limit * self.margin_frac))

    def set_limit(self, limit):
        def window(frac, most):
            return max(64 * MiB, min(most, int(limit * frac)))
        self.window_out = window(self.window_frac, self.window_max)
        self.window_in = window(self.window_frac if self.window_in_frac is None
                                else self.window_in_frac,
                                self.window_max if self.window_in_max is None
                                else self.window_in_max)

    def step_end(self, limit, device_max, host_max, offloadable, looked=False, relief=0):
        """Updates and returns the budget for the next step.  offloadable:
        bytes the step's largest pass could have offloaded (eligible saved
        tensors; 0 when the step did not look, because the budget was 0).
        looked: the budget was above 0 during the step, so offloadable says
        what the step could offload; a step that looked and could offload
        nothing does not raise the budget (it would grow at every step end
        of a job that does not fit and saves nothing eligible).  relief:
        bytes something else (recomputation) will take off the next step
        that it did not take off this one; the budget is lowered by them."""
        before = self.bytes
        self.set_limit(limit)
        # host bytes of a step whose limit was raised within it (a candidate
        # of the step saw a lower limit) or since the last step end may have
        # come before the raise (blocks on host go back at this step end)
        raised = ((self.step_lowest is not None and limit > self.step_lowest) or
                  (self.end_limit is not None and limit > self.end_limit))
        self.step_lowest = None
        self.end_limit = limit
        self.limit = limit
        target = self.target(limit)
        demand = device_max + host_max
        # raised only by a step that did not fit (a dead band between the
        # target and the limit: a step that fits there keeps its budget;
        # raising it whenever the maximum passed the target made a job
        # whose saved tensors come in large sizes alternate between one
        # tensor more and one less, the larger step 6 % slower, ResNet-50
        # on an H100)
        if demand > limit or (host_max > 0 and not raised):
            self.bytes += max(demand - target, self.step_min)
        elif self.bytes and device_max + int(limit * self.slack_frac) < target:
            # (lowering it from the forward passes' maximum instead, where
            # the step's lies in the backward, was measured and reverted:
            # docs/placement.md, "Copies done let go at once")
            self.bytes -= (target - device_max) // 2
        if relief > 0:
            self.bytes = max(0, self.bytes - relief)
        if offloadable:
            self.bytes = min(self.bytes, offloadable)
        elif looked:
            self.bytes = min(self.bytes, before)
        self.bytes = max(0, self.bytes)
        return self.bytes


class Choice:
    """Which way of picking the tensors to offload runs the faster steps
    under the limit in force, measured on the job itself (no torch needed:
    tested on its own).  The two ways: the first eligible tensors of each
    pass until the budget is reached (False, the default: they leave the
    most time to copy out and back), or tensors spread over the pass
    (True, Offload.spread: the first layers of a convolutional network save
    a few large tensors whose copies back crowd into the end of the
    backward pass; spread over the pass they come back while it runs).

    While a cut lasts under one limit, step_end takes each step's seconds.
    The first step under a limit only notes it.  Then it waits until the
    budget has not moved (nor new pinned memory been made) for `settle`
    steps (at most `max_wait` steps: a budget that keeps moving is measured
    anyway), keeps the median of `measure` steps of the first way, switches,
    does the same for the other, and keeps spread only if its median is
    faster by more than min_gain.  A new limit, or a step with nothing offloaded, starts over
    with the default.  The trial takes at most 1 + 2 x (max_wait +
    measure) steps per limit, some of them in the slower way."""

    def __init__(self, settle=2, measure=4, min_gain=0.03, max_wait=8):
        self.settle = settle
        self.measure = measure
        self.min_gain = min_gain
        self.max_wait = max_wait
        self.limit = None
        self.reset()

    def reset(self):
        self.value = False
        self.phase = 0  # 0: the default measured, 1: the other, 2: decided
        self.steady = 0  # steps since the budget last moved (this phase)
        self.waited = 0  # steps of this phase
        self.times = {False: [], True: []}
        self.decided = None  # (median default, median spread) once decided

    def step_end(self, seconds, limit, budget_moved, active):
        """seconds: the step that just ended; budget_moved: its end changed
        the budget; active: it offloaded.  Returns spread for the next step."""
        if not active or limit != self.limit:
            self.reset()
            self.limit = limit if active else None
            return self.value
        if self.phase == 2:
            return self.value
        self.waited += 1
        self.steady = 0 if budget_moved else self.steady + 1
        if self.steady <= self.settle and self.waited <= self.max_wait:
            self.times[self.value] = []  # measured only once the budget holds
            return self.value
        self.times[self.value].append(seconds)
        if len(self.times[self.value]) < self.measure:
            return self.value
        if self.phase == 0:
            self.phase, self.value, self.steady, self.waited = 1, True, 0, 0
            return self.value
        a = statistics.median(self.times[False])
        b = statistics.median(self.times[True])
        self.decided = (a, b)
        self.value = b < a * (1 - self.min_gain)
        self.phase = 2
        return self.value


# by_shape: a step's shape is the shapes of its first SHAPE_TENSORS saved
# CUDA tensors (fewer where an eligible one comes first), and at most
# SHAPES_KEPT shapes keep a budget of their own
SHAPE_TENSORS = 4
SHAPES_KEPT = 8
SKEW_MIN = 1.5  # spread_auto: spread when the first tensors are this much above average


def front_skew(sizes, budget):
    """How much larger than the pass's average candidate the first
    candidates are that fill `budget` (the bytes the default way, the first
    tensors, offloads): (budget / total bytes) / (those candidates / all
    candidates).  1 where sizes are even over the pass; 2 where the first
    tensors are twice the average (a convolutional network's first layers);
    below 1 where the largest come last (a language model's logits).  0
    where there is nothing to choose: no candidates, no budget, or a budget
    that takes them all.  sizes: the eligible candidates' bytes in the
    order the pass saved them."""
    total = sum(sizes)
    if budget <= 0 or not sizes or budget >= total:
        return 0.0
    acc = 0
    for k, n in enumerate(sizes, 1):
        acc += n
        if acc >= budget:
            break
    return (budget / total) / (k / len(sizes))


class HostPool:
    """Pinned host buffers kept from step to step, by size: a step repeats
    its saved tensors' sizes, and pinning new memory in the forward pass costs
    the CPU (and the GPU, which waits for it) ~0.3-1.2 s per GB.  A buffer
    comes back when its record dies (autograd dropped the packed tensor), with
    the event of the last copy that read it, which the next copy into it
    waits for.

    register (default True): a buffer is pageable memory of exactly its size
    (page-aligned, whole pages of its own), pinned by cudaHostRegister.
    Measured on an H100 (scripts/gpu/pin_probe.py): 0.34-0.39 s per GB,
    against 0.62-1.22 s per GB asked through PyTorch's pinned allocator
    (torch.empty(pin_memory=True)), which rounds every block up to a power
    of two and pins the rounding too; letting 1.6-1.8 GB go took 34-37 ms
    against 260-400 ms for emptying PyTorch's host cache.  Where
    registration fails (or torch.cuda.cudart is missing) the buffer comes
    from PyTorch's pinned allocator, as with register False.

    trim (default True): the pageable memory is a PyTorch CPU tensor, which
    glibc carves from its heap once its dynamic mmap threshold has risen; let
    go, those bytes went back to the system only in the frees of the next
    steps, 25-200 ms of system time in one or two of the steps after a raise
    from a 50% cut (BERT and GPT-2 on an H100).  So clear() ends with glibc's
    malloc_trim, which gives them back there and then.  anon (a study knob,
    off): each buffer an anonymous mapping of its own instead (mmap and
    torch.frombuffer), unmapped when let go; measured, pinning it made a
    cut's first step 2.0-2.8x slower (docs/placement.md, "The steps after a
    raise")."""

    PAGE = 4096

    def __init__(self, torch):
        self.torch = torch
        self.lock = threading.Lock()  # puts run from finalizers, any thread
        self.free = {}
        self.held = 0
        self.new_bytes = 0
        self.register = True
        self.registered = {}  # data_ptr -> pinned length, buffers this pool registered
        self.anon = False  # a study knob (see above)
        # after letting buffers from PyTorch's CPU tensors go, glibc's free
        # heap memory is given back at once (malloc_trim), not in the frees of
        # the next steps
        self.trim = True
        self.maps = {}  # data_ptr -> the anonymous mapping under a registered buffer
        self.register_failures = 0
        # background (a study knob, off): clear() lets the buffers go on a
        # thread of its own, not in the step end that calls it, where 5-10 GB
        # took 0.36-0.63 s on an H100 (the first step after a raise).  Off:
        # the first step after a raise ran 2.2-3.4x faster with it, but the
        # thread's work slowed the next steps, whose median (steps 1-3) rose
        # 12-14% for GPT-2 and up to 2x for BERT (docs/placement.md,
        # "Letting the host buffers go").  releaser: the last thread started
        self.background = False
        self.releaser = None
        # keep (a study knob, off): clear() keeps the free buffers pinned, so
        # a study can tell what letting them go costs the steps after a raise
        self.keep = False
        # huge (a study knob, off): the 2 MiB-aligned inside of each new
        # buffer's pageable memory is advised huge (MADV_HUGEPAGE) before it
        # is registered; scripts/gpu/pin_probe.py pinned huge anonymous
        # buffers at 0.22-0.30 s per GB against 0.39-0.59 for PyTorch's CPU
        # tensors on an H100 (docs/placement.md, "The trials' cost")
        self.huge = False
        self.huge_advised = 0  # bytes advised huge

    def _pinned(self, nbytes):
        """A pinned uint8 buffer of nbytes: registered, else PyTorch's."""
        torch = self.torch
        if self.register:
            try:
                rt = torch.cuda.cudart()
                page = self.PAGE
                length = (nbytes + page - 1) // page * page
                buf, mm = self._pageable(nbytes, length)
                if self.huge:
                    self._advise_huge(buf.data_ptr(), length)
                err = rt.cudaHostRegister(buf.data_ptr(), length, 0)
            except (AttributeError, RuntimeError, TypeError):
                self.register = False  # no cudart here: PyTorch's pinned memory from now on
            else:
                if int(err) == 0:
                    with self.lock:
                        self.registered[buf.data_ptr()] = length
                        if mm is not None:
                            self.maps[buf.data_ptr()] = mm
                    return buf
                self.register_failures += 1  # e.g. the locked-memory limit: this one as before
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    HUGE = 2 << 20
    MADV_HUGEPAGE = 14  # Linux
    _madvise = None  # libc's madvise once _advise_huge looked it up (per pool)

    def _advise_huge(self, addr, length):
        """Advises the whole 2 MiB pages inside [addr, addr + length) huge
        (Linux madvise; nothing where libc or the call is missing)."""
        h = self.HUGE
        lo = (addr + h - 1) // h * h
        hi = (addr + length) // h * h
        if hi <= lo:
            return
        try:
            madvise = self._madvise
            if madvise is None:  # libc looked up once per pool, not per buffer
                madvise = ctypes.CDLL(None, use_errno=True).madvise
                madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                self._madvise = madvise
            if madvise(lo, hi - lo, self.MADV_HUGEPAGE) == 0:
                self.huge_advised += hi - lo
        except (AttributeError, OSError):
            self.huge = False

    def _pageable(self, nbytes, length):
        """A uint8 CPU tensor of nbytes on whole pages of its own (length
        bytes, page-aligned) and the anonymous mapping under it (None where
        it is a PyTorch CPU tensor: no mmap or torch.frombuffer here)."""
        torch = self.torch
        frombuffer = getattr(torch, "frombuffer", None)
        if self.anon and frombuffer is not None:
            try:
                mm = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            except (AttributeError, OSError, ValueError):
                self.anon = False  # no anonymous mappings here: PyTorch's CPU tensors
            else:
                return frombuffer(mm, dtype=torch.uint8, count=nbytes), mm
        page = self.PAGE
        whole = torch.empty(length + page, dtype=torch.uint8)
        off = (-whole.data_ptr()) % page
        return whole[off:off + nbytes], None  # a view: keeps `whole` alive

    # a free buffer up to this many times a request's size serves it where
    # none of its own size is free: tensors of steps that differ (sequence
    # lengths drawn per step) have sizes of their own, each of which was
    # pinned anew (0.34-0.39 s per GB)
    REUSE_LARGER = 2

    def get(self, nbytes, stream):
        """[buffer of nbytes, None]: a free one of that size, else the
        smallest free one of at most REUSE_LARGER times it (its first nbytes,
        the whole buffer as a third item, for put), else a new one."""
        with self.lock:
            lst = self.free.get(nbytes)
            slot = lst.pop() if lst else None
            if slot is None:
                larger = [n for n, ls in self.free.items()
                          if ls and nbytes < n <= self.REUSE_LARGER * nbytes]
                if larger:
                    whole = self.free[min(larger)].pop()
                    slot = [whole[0][0:nbytes], whole[1], whole[0]]
        if slot is None:
            buf = self._pinned(nbytes)
            with self.lock:
                self.held += nbytes
                self.new_bytes += nbytes
            return [buf, None]
        if slot[1] is not None:
            stream.wait_event(slot[1])
            slot[1] = None
        return slot

    def put(self, slot):
        whole = slot[2] if len(slot) > 2 else slot[0]
        with self.lock:
            self.free.setdefault(whole.numel(), []).append([whole, slot[1]])

    def clear(self):
        """Drops the free buffers: the registered ones are unregistered once
        the last copy that read each is done; PyTorch's host allocator, which
        caches the pinned blocks it made, is asked to give its free ones
        back to the system.  With keep set, nothing is let go."""
        if self.keep:
            return
        with self.lock:
            slots = [sl for lst in self.free.values() for sl in lst]
            self.free = {}
            self.held -= sum(sl[0].numel() for sl in slots)
            mine = [self.registered.pop(sl[0].data_ptr(), None) is not None for sl in slots]
            # the mappings go with their buffers, once unregistered (_release)
            maps = [self.maps.pop(sl[0].data_ptr(), None) for sl in slots]
        if not slots:
            return
        if self.background:
            self.releaser = threading.Thread(target=self._release, args=(slots, mine, maps),
                                             name="libvmem-offload-release", daemon=True)
            self.releaser.start()
        else:
            self._release(slots, mine, maps)

    def _release(self, slots, mine, maps):
        """clear()'s work: unpins (once the last copy that read each is
        done) and lets go of the buffers, on clear()'s thread or its own: a
        buffer's anonymous mapping is unmapped when the last reference to
        it, the buffer's or the one in maps, goes (here, at the latest when
        this returns)."""
        cached = trim = False
        for k, ((buf, ev), registered) in enumerate(zip(slots, mine)):
            anon = maps[k] is not None
            if not registered:
                cached = True
                continue
            if ev is not None:
                ev.synchronize()  # no copy may still read what is unpinned
            self.torch.cuda.cudart().cudaHostUnregister(buf.data_ptr())
            slots[k] = maps[k] = None  # the buffer, then its mapping, let go now
            trim = trim or (self.trim and not anon)
        del buf
        if trim:
            try:
                ctypes.CDLL(None).malloc_trim(0)  # glibc's; elsewhere nothing to do
            except (AttributeError, OSError, TypeError):
                pass
        empty = getattr(getattr(self.torch, "_C", None), "_host_emptyCache", None)
        if cached and empty is not None:
            empty()


class RoomAhead:
    """The room the rest of a backward pass needs, learned from the last two
    steps (no torch needed: tested on its own), for the fetch ahead.

    At every unpack hook call of a cut step the offload reads libvmem's
    watermark: the most in use (device and host: what the program asked
    for, wherever it lies) since the last call.  Less the bytes fetched
    ahead and not yet handed out at the last call, that is what the program
    itself needed in the stretch between the two calls (its own bytes: the
    tensors it holds, autograd's included, and what it allocated in
    between).  A pass's stretches, by their hook call number, are kept per
    step.  Where the last two steps ran a pass with the same number of calls,
    ahead(k) is the most either needed in any stretch from call k to the
    pass's end: at call k, bytes fetched ahead may be held up to target -
    ahead(k) without the program running out of room before they are
    handed out (a tensor handed out counts in its own bytes from then on).
    None where nothing is known (the first steps of a cut, a pass that
    changed, calls past the last step's)."""

    def __init__(self):
        self.cur = []     # this step: per backward pass, each stretch's own bytes
        self.seen = []    # the last step's
        self.suffix = []  # per pass: the most from stretch k to the end, or None
        self.k = 0        # hook calls in the current pass
        self.f = None     # bytes fetched ahead at the last call (None: no stretch open)

    def pass_starts(self):
        self.cur.append([])
        self.k = 0
        self.f = None

    def hook(self, most):
        """At a hook call, before it hands out or fetches anything: most,
        the watermark's most in use since the last call."""
        if not self.cur:
            self.pass_starts()
        if self.f is not None:
            self.cur[-1].append(max(0, most - self.f))

    def ahead(self):
        """The most the program needs from this call to the pass's end, or
        None."""
        p = len(self.cur) - 1
        s = self.suffix[p] if 0 <= p < len(self.suffix) else None
        if s is None or self.k >= len(s):
            return None
        return s[self.k]

    def hook_done(self, fetched):
        """At the end of a hook call: fetched, the bytes fetched ahead and not
        handed out now (they open the next stretch)."""
        self.f = fetched
        self.k += 1

    def step_end(self, active):
        """active: the step offloaded (a step that did not forgets it all)."""
        if not active:
            self.cur, self.seen, self.suffix = [], [], []
        else:
            self.suffix = []
            for p, prof in enumerate(self.cur):
                old = self.seen[p] if p < len(self.seen) else None
                if old is None or len(old) != len(prof) or not prof:
                    self.suffix.append(None)
                    continue
                s = [max(a, b) for a, b in zip(old, prof)]
                for i in range(len(s) - 2, -1, -1):
                    s[i] = max(s[i], s[i + 1])
                self.suffix.append(s)
            self.seen = self.cur
            self.cur = []
        self.k = 0
        self.f = None


class _On:
    """_FastCuda.on's context: the stream made current on its device, the
    one current before restored at the end."""
    __slots__ = ("fc", "s", "prev")

    def __init__(self, fc, s):
        self.fc, self.s = fc, s

    def __enter__(self):
        s = self.s
        self.prev = self.fc.get(s.device_index)
        self.fc.set(s.stream_id, s.device_index, s.device_type)

    def __exit__(self, *exc):
        self.fc.set(*self.prev)
        return False


class _FastCuda:
    """The current stream, a switch of streams and a wait of one stream for
    another, without torch.cuda's Python device lookups, which were about a
    quarter of the hooks' CPU time in a cut step of GPT-2 (cProfile on an
    H100).
    Measured there per call (scripts/gpu/hook_probe.py):
    torch.cuda.current_stream(device) 5.9 us against 0.2 us for the call
    underneath it; `with torch.cuda.stream(s)` 19 us; Stream.wait_stream
    10.9 us, against about 5 us for an event recorded and waited for.
    Where torch lacks the calls underneath (another version; the tests'
    fake), torch.cuda's own.  A stream of another device than the current
    one is switched to by torch.cuda.stream, which also switches devices."""

    def __init__(self, torch):
        self.torch = torch
        c = getattr(torch, "_C", None)
        self.get = getattr(c, "_cuda_getCurrentStream", None)
        self.set = getattr(c, "_cuda_setStream", None)
        self.device = getattr(c, "_cuda_getDevice", None)
        # raw: the calls underneath where torch has them; False: always
        # torch.cuda's (a study knob, for A/B runs)
        self.raw = self.device is not None and self.get is not None and self.set is not None
        self.cache = {}  # (stream id, device index, device type) -> torch.cuda.Stream

    def current(self, device):
        """The current stream of device (a torch.device or an index)."""
        if not self.raw:
            return self.torch.cuda.current_stream(device)
        idx = device if isinstance(device, int) else device.index
        key = self.get(self.device() if idx is None else idx)
        s = self.cache.get(key)
        if s is None:
            if len(self.cache) >= 64:  # a program that makes streams without end
                self.cache.clear()
            s = self.cache[key] = self.torch.cuda.Stream(
                stream_id=key[0], device_index=key[1], device_type=key[2])
        return s

    def on(self, stream):
        """A context in which stream is current."""
        if not self.raw or self.device() != stream.device_index:
            return self.torch.cuda.stream(stream)
        return _On(self, stream)

    def wait(self, waiter, stream):
        """waiter waits for the work queued on stream so far."""
        if not self.raw:
            waiter.wait_stream(stream)
            return
        ev = self.torch.cuda.Event()
        ev.record(stream)
        waiter.wait_event(ev)


def dense(shape, stride):
    """Whether a tensor of this shape and stride covers a block of
    prod(shape) elements without a gap or an overlap, its dimensions in any
    order: contiguous, channels_last (a convolutional network trained in
    that format saves such tensors) or any other permutation."""
    expect = 1
    for st, sz in sorted((st, sz) for sz, st in zip(shape, stride) if sz != 1):
        if st != expect:
            return False
        expect *= sz
    return True


def _host_view(buf, t):
    """The pinned uint8 buffer buf seen with t's dtype, shape and strides:
    a copy between the two is then one plain copy of the block, whatever
    t's order of dimensions (dense(t.shape, t.stride()))."""
    typed = buf.view(t.dtype)
    if t.is_contiguous():
        return typed.view(t.shape)
    return typed.as_strided(t.shape, t.stride())


class _Record:
    """One offloaded saved tensor.  slot: [pinned uint8 buffer, event of the
    last copy back from it or None], back to the HostPool when the record
    dies."""
    __slots__ = ("index", "cand", "host", "slot", "out_done", "dev", "in_done", "fetched",
                 "reclaimed", "shape", "stride", "dtype", "device", "nbytes", "packs", "unpacks",
                 "ref", "version", "orig", "cum", "__weakref__")

    def __init__(self, index, cand, slot, host, out_done, t, nbytes):
        self.index = index
        self.cand = cand  # the step's candidate number (Offload.skip)
        self.slot = slot
        self.host = host  # slot's buffer as t (_host_view)
        self.out_done = out_done
        self.dev = None
        self.in_done = None
        self.fetched = False  # dev was taken back ahead (counted in fetched_bytes)
        self.reclaimed = False  # dev is the device tensor itself (see Offload._reclaim)
        self.shape = t.shape
        self.stride = t.stride()
        self.dtype = t.dtype
        self.device = t.device
        self.nbytes = nbytes
        self.packs = 1  # saved this many times (dedupe): the device copy stays until the last unpack
        self.unpacks = 0
        self.ref = None  # gpu_pace: the step's reference event (Offload.judge)
        self.cum = 0  # the pass's bytes offloaded up to this record, this one's included
        # the saved tensor's version when it was saved, and a weak reference
        # to it: hook_unpack's stand-in for autograd's in-place check
        self.version = t._version
        self.orig = weakref.ref(t)


class _Kept:
    """A saved tensor left on the device, with its version when it was
    saved (hook_pack): with saved tensor hooks installed autograd no longer
    checks that a saved tensor was not modified in place before its
    backward, so hook_unpack does."""
    __slots__ = ("t", "version")

    def __init__(self, t, version):
        self.t = t
        self.version = version


def _modified(t, expected):
    """The error autograd raises for a saved tensor modified in place, with
    what this check can tell (not the node that saved it)."""
    try:
        what = "%s %s" % (t.type(), list(t.shape))
    except Exception:  # a tensor subclass without type(): its class
        what = type(t).__name__
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        "operation: [%s] is at version %d; expected version %d instead. (Checked by libvmem's "
        "saved tensor offload, whose hooks stand in for autograd's own check: "
        "docs/placement.md, \"Contract for embedders\".)" % (what, t._version, expected))


def top_hooks(top):
    """The top of this thread's default saved tensor hooks stack, a (pack,
    unpack) tuple, or None; top: torch._C._autograd's
    _top_saved_tensors_default_hooks (PyTorch 2.8 and later)."""
    try:
        t = top(True)  # ignore_is_tracing: the stack as it is
    except TypeError:  # a build whose function takes no argument
        t = top()
    return None if t is None else tuple(t)


class HookSwitch:
    """Keeps the offload's saved tensor hooks pushed only while they may act.

    PyTorch calls a saved tensor hook through Python for every tensor
    autograd saves, about 10 us each on an H100's host, even when the hook
    hands the tensor back as it is (docs/placement.md, "Autograd's other
    paths under the offload").  A job that fits under its limit offloads
    nothing, so its hooks are popped at a step end that leaves no budget and
    no cut in force, and pushed again when the offload may act: at a step
    end that learned a budget, or when libvmem.set_limit() cuts the limit
    below the last step's demand (Offload.update_hooks).  PyTorch's default
    hooks are per thread: the switch acts only on the thread that installed
    them, and only where that leaves other hooks as they were: it pops
    ours only while they are on top of the stack, and pushes them back only
    while the top is what it was when it popped.  Without
    torch._C._autograd._top_saved_tensors_default_hooks (PyTorch before 2.8)
    it cannot tell, and the hooks stay pushed (fixed)."""

    def __init__(self, autograd, hooks):
        self.ag = autograd
        self.hooks = tuple(hooks)
        self.thread = threading.get_ident()
        self._top = getattr(autograd, "_top_saved_tensors_default_hooks", None)
        self.fixed = self._top is None
        self.on = False
        self.pushes = 0
        self.pops = 0
        self.warned = False  # asked to switch from another thread (warned once)
        # the stack's top when the hooks were last popped (at install: as found)
        self.below = None if self.fixed else self.top()

    def top(self):
        """The top of this thread's default hooks stack (top_hooks)."""
        return top_hooks(self._top)

    def set(self, want):
        """Pushes (want) or pops the hooks where the rules above allow;
        returns whether they are pushed."""
        want = want or self.fixed
        if want == self.on:
            return self.on
        if threading.get_ident() != self.thread:
            if not self.warned:  # the hooks are per thread: pushed from here they would not act
                self.warned = True
                import warnings
                warnings.warn(
                    "libvmem offload: a step end or set_limit() on another thread than "
                    "install_torch()'s cannot push or pop its saved tensor hooks, which stay "
                    "%s; end the steps on the thread that runs the forward pass, or set "
                    "VMEM_TORCH_OFFLOAD_HOOKS=always" % ("pushed" if self.on else "off"),
                    RuntimeWarning, stacklevel=3)
            return self.on
        if want:
            if not self.fixed and self.top() != self.below:
                return False  # hooks pushed since: theirs stay on top
            self.ag._push_saved_tensors_default_hooks(*self.hooks)
            self.on = True
            self.pushes += 1
        else:
            if self.top() != self.hooks:  # another's hooks above ours
                return True
            self.ag._pop_saved_tensors_default_hooks()
            self.on = False
            self.pops += 1
            self.below = self.top()
        return self.on

    def remove(self):
        """uninstall(): pops the hooks if pushed (their own contract: on the
        installing thread, no other default hooks pushed since)."""
        if self.on:
            self.ag._pop_saved_tensors_default_hooks()
            self.on = False


class Offload:
    """The hooks and their state for one process (all devices)."""

    def __init__(self, torch, in_use, budget=None, min_bytes=MiB, step_max=None, watermark=None,
                 step_naive=None, fits=None, record_stream=None, copy_out=None):
        """in_use(device_index) -> (device bytes in use, limit): libvmem's
        (a cheap vmem_get_stats; tests pass their own).  step_max(device_index)
        -> device bytes in use at the step's maximum so far (libvmem's
        cur_step_device_max), read when a backward pass starts (statistics
        only); None: not read.  watermark(device_index) -> (bytes in use by
        live blocks, device and host, the most in use since the last call,
        limit): libvmem's vmem_watermark, for pace_room; None: no pacing by
        room.  step_naive(device_index): libvmem's vmem_step_naive, called
        when a cut starts the budget within a step (start_at_cut), so that
        the planner, whose plan for the step comes from a step without the
        cut and without the offload, leaves the rest of it to naive
        placement; None: not called.  fits(device_index, nbytes, stream) ->
        whether libvmem would serve an allocation of nbytes on the stream
        without giving memory back and mapping it again (vmem_fits), which
        waits for the device: fetch by room fetches ahead only where it
        does; None: not asked.  record_stream(device_index, ptr, stream) ->
        whether libvmem took note that work queued on the stream so far
        reads the block at ptr (vmem_record_stream): its memory is then not
        reused before that work is done, whenever it is freed; None: not
        available (the hooks hold each device tensor until its copy out is
        done, as before).  copy_out(device_index, dst, src, nbytes, stream)
        -> whether libvmem queued the copy on the stream with a kernel
        (vmem_copy_async) rather than a copy engine, used while sm_copy is
        set (off by default); None, or False once (sm_copy is then
        cleared): copies out by the copy engine (Tensor.copy_)."""
        self.torch = torch
        self.record_stream = record_stream
        # copies out by the SMs (_pack), a study knob: a copy engine's copy
        # to host makes every mapping libvmem makes meanwhile wait about 1 ms
        # per handle; vmem_copy_async's kernel does not.  Off: on an H100 the
        # remaps' CPU time fell (BERT at 75%: 37-41 to 4-11 ms a step) but
        # the copies took SMs from the forward pass (+10 ms) and the one
        # device synchronisation of a step waited longer (4-10 to 13-63 ms):
        # GPT-2 and BERT ran 3-7% slower at 75%, with the copy stream ranked
        # above the compute stream (out_priority) or not, with 8 or 32
        # blocks (docs/placement.md, "Copies out by the SMs").
        self.copy_out = copy_out
        self.sm_copy = False
        self.out_priority = False  # the copy-out stream ranks above the others
        # early release (_pack), a study knob: with record_stream, a saved
        # tensor is let go as soon as its copy out is queued.  libvmem keeps
        # its memory until the copy is done and, when an allocation needs
        # it, makes the allocating stream wait for the copy (no CPU wait):
        # the forward pass runs ahead of the copies until the memory runs
        # out, instead of being paced to the link by the window.  Off: on an
        # H100 it made GPT-2 and BERT 10-20% slower at 75% (no tensor taken
        # back without a copy, more remaps and releases around the waiting
        # blocks), ConvNeXt 2-14% slower, ResNet-50 and ViT 0-4% faster;
        # where the compute stream stopped waiting for copies it waited for
        # the CPU instead (docs/placement.md, "Letting saved tensors go at
        # once").
        self.early = False
        self.fits = fits
        self.step_naive = step_naive
        # relief(limit) -> bytes recomputation will take off the step under
        # limit (libvmem_recompute sets it): a cut's first step starts the
        # budget from the demand less them
        self.relief = None
        # relief_next(limit) -> bytes recomputation will take off the next
        # step beyond what it took off the step that ended
        # (Recompute.relief_to_come): the budget learned at a step end is
        # lowered by them (Budget.step_end's relief)
        self.relief_next = None
        self.in_use = in_use
        self.step_max = step_max
        self.watermark = watermark
        self.budget = budget or Budget()
        self.min_bytes = min_bytes
        self.lock = threading.Lock()
        # (copy out's event, device tensor): tensors handed back to autograd
        # before their copies out were done, held until they are (_reclaim)
        self.guard = []
        self.streams = {}
        self.fast = _FastCuda(torch)
        self.pool = HostPool(torch)
        self._param_type = getattr(getattr(torch, "nn", None), "Parameter", ())
        self.enabled = True
        # candidates (by their number in the step, and size) not worth an
        # offload: in the last step each was unpacked before its copy out
        # had finished, so its device memory never went back (_unpack)
        self.skip = {}
        self.learn_skip = True
        # spread (_pack): offload candidates spread over the pass rather
        # than the first ones; spread_auto (below, on by default) sets it at
        # each step end, or `choice` (a Choice) per limit by measuring both,
        # unless both are off (then spread stays as set).  Set by hand it
        # was a study knob, off: on the H100 the trial's first way is measured while
        # the cut still settles (the planner's rule trials, skips being
        # learned), which biased it (GPT-2 and BERT at 50%: 529-879 ms
        # measured for the default against 349-390 ms once settled), and
        # spread's gain on ResNet-50 at 75% held on one machine (105.6 ->
        # 83.9 ms) and not on another (103.8 against 105.5);
        # docs/placement.md, "Choosing the tensors by measuring"
        self.spread = False
        self.choice = None
        # spread_auto (on by default since the nineteenth session): spread
        # is set at each step end from the last step's candidates
        # (front_skew of its largest pass, under the next budget): on where
        # the first tensors that fill the budget are skew_min (SKEW_MIN)
        # times the pass's average candidate or more, so that the first
        # tensors would be only the first layers', whose copies back crowd
        # into the end of the backward pass; off otherwise (the transformers
        # measured: 0.65-1.00).  Ignored while a Choice measures (choice
        # set).  With spread_large, measured on an H100 in three alternating
        # pairs: ConvNeXt-Tiny 146.4 -> 118.7 ms at 75%, 217.5 -> 204.5 at
        # 50%; ResNet-50 100.1 -> 86.0 and 146.5 -> 140.5 (medians; without
        # spread_large one ConvNeXt run went 149 -> 221 ms, its hooks' CPU
        # time tripled); docs/placement.md, "Channels_last tensors, and
        # spreading by the candidates' skew"
        self.spread_auto = True
        self.skew_min = SKEW_MIN
        # tensors dense in another order of dimensions than contiguous
        # (channels_last) are candidates too (_eligible); False: contiguous
        # ones only, the way before (a switch for A/B runs)
        self.dense_ok = True
        # spread_large (with spread; on): candidates smaller than the median
        # candidate of the last step's largest pass stay on the device, so
        # spreading takes fewer, larger tensors (each costs the hooks' CPU
        # time: ConvNeXt-Tiny spread 117 tensors a step without it, 57
        # with); spread_min is that median, set at step end
        self.spread_large = True
        self.spread_min = 0
        self.skew = 0.0       # front_skew behind the last decision
        self._t_end = None  # when the last step ended (perf_counter)
        # pacing on the device (_pack): past window_out the compute stream,
        # not the CPU, waits for the oldest copy out, and the CPU goes on
        # queueing kernels.  On by default since its skips are judged on the
        # GPU's timeline (below): with skips judged by queries on the CPU,
        # which runs ahead, they grew and BERT at 50% ran 655-702 ms per
        # step against 376-432; judged on the GPU, two A/B runs on an H100
        # ran the 75% cuts 4-8% faster for ResNet-50 and BERT and the 50%
        # cuts within the spread (docs/placement.md, "Pacing on the device,
        # judged on the GPU").  False: the CPU waits (the behaviour before).
        self.gpu_pace = True
        # gpu_pace: skips judged on the GPU's timeline.  Each offloaded
        # record's first consumer records a timing event on the compute
        # stream; (candidate, bytes, reference, copy out's event, consumer's
        # event) wait here until both events are done (a step end or two
        # later), and a copy out that ended after its consumer came makes
        # the candidate a skip.  A query on the CPU says nothing of the GPU
        # when the CPU runs ahead of it.
        self.judge = []
        # pacing by room (_room), a study knob: at every hook call of a cut
        # step, copies out stay in flight while the device bytes in use plus
        # what the program allocated before the next hook call in the last
        # step (its excursion, from libvmem's watermark) stay under the
        # target; the window paces only where no excursion is known
        self.pace_room = False
        self.ex_last = []  # the last step's excursion after each hook call
        self.last_offloadable = 0  # the last step's largest pass's eligible bytes
        # a cut between steps starts the budget at the next step's first
        # saved tensor (Budget.start), from the last step's demand
        self.start_at_cut = True
        self.look_for_cut = False
        # the pinned buffers outlive steps that offload nothing while the
        # limit they served stays: a job whose steps differ (sequence
        # lengths drawn per step) has light steps under a cut, and letting
        # 4.8 GB go in one of them took 0.39 s, then pinning them again
        # 0.17 s per 1.4 GB (GPT-2, 50% cut, H100; docs/placement.md,
        # "Rule trials on steps that differ").  They go at the first such
        # step after the limit rose above the one they served, or after
        # keep_idle_steps such steps in a row under it
        self.keep_idle_steps = 3
        self.pool_limit = None  # the limit of the last step that offloaded
        self.idle_steps = 0     # steps in a row that offloaded nothing, budget 0
        # the hooks pushed only while they may act (HookSwitch, set by
        # install(); None: the caller pushes them, as the tests do);
        # hooks_always: pushed all the time, as before the twenty-fifth
        # session (VMEM_TORCH_OFFLOAD_HOOKS=always)
        self.switch = None
        self.hooks_always = False
        # fetch by room (_prefetch), a study knob: where the last two steps
        # ran a backward pass alike, the fetch ahead holds as much as the
        # room the rest of the pass leaves under the target (RoomAhead,
        # from libvmem's watermark), not a window of 1/32 of the limit, so
        # the copies back start as soon as the backward frees room.  Off:
        # on an H100 it made every job's backward 1.3-3x slower, with or
        # without the fit check (vmem_fits): copies back allocated early
        # take free blocks the backward's own allocations then miss, and
        # libvmem gives memory back and maps it again, waiting for the
        # device (the arena's regions 4-39 -> 39-84); docs/placement.md,
        # "Fetching back by room".  Not with pace_room (one watermark reader).
        self.fetch_room = False
        # ahead_min: records the fetch ahead may hold whatever its window
        # (1: one, so that a record larger than the window still comes
        # ahead; 2: double buffering, the next record's copy back runs
        # while the one before waits for its consumer).  The room under
        # the target bounds it as before.  A study knob, 1: on an H100 it
        # passed no decision rule (ResNet-50 at 75% 83.1 -> 87.1 ms, the
        # median of three processes; within one process -4% at 75% and +7%
        # at 50%; docs/placement.md, "Double buffering in the fetch ahead")
        self.ahead_min = 1
        # bulk_skip (_bulk_check): a record its backward consumed together
        # with most of those saved after it is a skip for the next steps
        self.bulk_skip = True
        # learn_order (_fetch_order), a study knob: the fetch ahead follows
        # the order the last step's backward unpacked its records in,
        # instead of the reverse of the saving order
        self.learn_order = False
        self.order_last = []
        self.warned_bulk = False  # said once (step_end) that a pass was taken in bulk
        # by_shape: a budget per step shape.  A step's shape (_note_shape)
        # picks the budget its last step of that shape left; a new shape
        # starts from the budget in force, so a job whose steps all look
        # alike, or never repeat a shape, runs as with one budget.  On
        # (forty-sixth session): on GPT-2 with lengths drawn per step (H100,
        # two processes each) it ran a 16-step cut at 50% 2.39-2.63x the
        # uncut steps against 2.88-3.41x with one budget and naive's 2.80,
        # with 1.77 GB on host instead of 7.22, and at 75% 1.88-1.95x
        # against 1.86-2.09x.  It had been off since at 75% a rare shape
        # kept the budget learned in the cut's first step, before
        # recomputation started; recomputation now starts in that step
        # (docs/placement.md, "A budget per step shape")
        self.by_shape = True
        self.budgets = {}        # shape -> Budget, for the shapes not in force
        self.budget_shape = None  # the shape self.budget belongs to
        self.room = RoomAhead()
        self.last_demand = 0
        self._skip_limit = None  # the limit the skips were learned under
        self._reset_step()
        self.totals = {"offloaded_bytes": 0, "offloaded_tensors": 0, "prefetched_bytes": 0,
                       "late_fetch_bytes": 0, "late_no_room_bytes": 0, "reclaimed_bytes": 0,
                       "skipped_bytes": 0, "bulk_bytes": 0, "early_bytes": 0,
                       "sm_copied_bytes": 0,
                       "strided_bytes": 0,
                       "waits_out": 0, "waits_out_gpu": 0, "deduped": 0, "steps_active": 0,
                       "pack_seconds": 0.0, "unpack_seconds": 0.0, "wait_seconds": 0.0}
        self.last_step = {}
        self._mark = (0.0, 0.0, 0.0)

    # -- step state ------------------------------------------------------

    def _reset_step(self):
        self.shape_parts = []   # by_shape: the step's first saved tensors' shapes
        self.step_shape = None  # the step's shape, once known
        self.t_ref = {}         # gpu_pace: per device, a timing event on its compute stream at the step's first offload
        self.records = []       # offloaded this step, in pack order
        self.pending = []       # (record, device tensor) whose copy out may run
        self.pending_bytes = 0
        self.fetched_bytes = 0  # fetched ahead, not unpacked yet
        self.fetched_count = 0  # the records behind fetched_bytes
        # records[fetch_next]: the highest record not yet fetched or unpacked
        # (None: from the last); every record above it has been.  With a
        # learned order (learn_order), fetch_seq lists the pass's records in
        # the order the last step unpacked them, and fetch_next is the
        # first position in it not yet fetched or unpacked
        self.fetch_next = None
        self.fetch_seq = None
        self.cand_index = {}      # candidate number -> its record's index, this step
        self.unpack_cands = []    # candidates in the order of their records' first unpacks
        # dedupe: (ptr, version, shape, dtype) -> (weakref to the tensor,
        # record, or None if it stayed on the device); the weakref tells a
        # tensor packed twice from a later one that got the same address
        # after the first was freed
        self.seen = {}
        self.step_cands = 0     # eligible tensors seen (not counting a second save)
        self.next_skip = {}     # the next step's skip
        self.step_offloaded = 0
        self.step_tensors = 0   # tensors offloaded this step
        self.step_early = 0     # of step_offloaded: let go at once (record_stream)
        self.step_offloadable = 0
        # a step may run several forward and backward passes (gradient
        # accumulation): the budget is per pass (the step's peak is its
        # largest pass's), and a pack after an unpack starts a new pass
        self.in_backward = False
        self.pass_offloaded = 0
        self.pass_offloadable = 0
        self.max_pass_offloadable = 0
        self.pass_sizes = []      # this pass's eligible candidates' bytes, in order
        # bulk_skip: the pass's first record (index in records), the highest
        # record not yet unpacked (Record.cum: pass_offloaded up to a record)
        self.pass_first = 0
        self.pass_hi = -1
        self.step_bulk = 0        # bytes of records found consumed in bulk (bulk_skip)
        # bulk_skip: (record, highest record of its pass not unpacked at its
        # first unpack, bytes saved after it then to come, its pass's bytes
        # offloaded then), judged at the step end
        self.bulk_maybe = []
        self.max_pass_sizes = []  # those of the pass with the most eligible bytes
        self.step_prefetched = 0
        self.step_late = 0
        self.step_late_no_room = 0  # of step_late: no room under the limit for it ahead
        self.step_ahead_max = 0  # the most bytes fetched ahead and not handed out at once
        self.step_room_known = 0  # backward hook calls where fetch by room knew the room ahead
        self.step_bw_hooks = 0    # backward hook calls that read the watermark for it
        self.step_no_fit = 0      # fetches by room put off: no free block fitted them
        # the fetch ahead's walks that stopped at a record it could not
        # fetch yet: for its window, or for want of room under the target
        self.step_stop_window = 0
        self.step_stop_room = 0
        self.step_reclaimed = 0
        self.step_skipped = 0
        self.step_fwd_max = 0  # device bytes in use at the step's maximum before a backward pass
        # pace_room: the excursion after each hook call this step (bytes the
        # program allocated above what was in use at the call before the
        # next one), the hook calls counted, the bytes in use at the last one
        self.ex = []
        self.hooks = 0
        self.wm_used = None
        self.step_room_waits = 0  # pace_room: copies out waited for for want of room
        # pace_room: the most in use over the step's stretches less the
        # copies out in flight during each: the step's maximum had the
        # copies been let go at once, which the budget learns from (pacing
        # by room fills the device up to the target whatever the budget)
        self.step_drained = 0
        # pace_room: the stretch whose excursion most outgrew the last step's
        # at the same call (call number, bytes over), a check of the learning
        self.step_ex_miss = (-1, 0)

    def step_end(self, stats_of, device=None):
        """At a libvmem step end: learn the next budget.  stats_of(device) ->
        (limit, step device max, step host max) of the device this process
        offloads from: the device of this step's first offloaded tensor,
        else `device` (the step end's), else the current CUDA device (one
        budget per process: a rank of a multi-GPU job runs on its own)."""
        with self.lock:
            dev = self.records[0].device.index if self.records else device
            if dev is None:
                dev = self.torch.cuda.current_device()
            if self.wm_used is not None:  # the stretch since the last hook call
                _, most, _ = self.watermark(dev)
                self.step_drained = max(self.step_drained, most - self.pending_bytes)
            self._drain(block=True)
            self._bulk_judge()
            limit, dmax, hmax = stats_of(dev)
            tot = self.totals
            self.last_step = {"pack_s": tot["pack_seconds"] - self._mark[0],
                              "unpack_s": tot["unpack_seconds"] - self._mark[1],
                              "wait_s": tot["wait_seconds"] - self._mark[2],
                              "offloaded": self.step_offloaded, "early": self.step_early,
                              "tensors": self.step_tensors,
                              "offloadable": self.step_offloadable,
                              "prefetched": self.step_prefetched, "late": self.step_late,
                              "late_no_room": self.step_late_no_room,
                              "ahead_max": self.step_ahead_max,
                              "room_known": self.step_room_known, "bw_hooks": self.step_bw_hooks,
                              "no_fit": self.step_no_fit,
                              "stop_window": self.step_stop_window,
                              "stop_room": self.step_stop_room,
                              "reclaimed": self.step_reclaimed, "skipped": self.step_skipped,
                              "bulk": self.step_bulk,
                              "budget": self.budget.bytes, "device_max": dmax, "host_max": hmax,
                              "shapes": len(self.budgets) + (self.budget_shape is not None),
                              "fwd_max": self.step_fwd_max,
                              "hooks": self.hooks, "ex_known": len(self.ex_last),
                              "ex_max": max(self.ex) if self.ex else 0,
                              "room_waits": self.step_room_waits,
                              "ex_miss_at": self.step_ex_miss[0], "ex_miss": self.step_ex_miss[1],
                              "limit": limit, "host_pinned": self.pool.held,
                              "host_pinned_new": self.pool.new_bytes}
            if self.step_offloaded:
                self.totals["steps_active"] += 1
            if self.step_bulk and not self.warned_bulk:
                self.warned_bulk = True
                import warnings
                warnings.warn(
                    "libvmem offload: a backward pass took %.2f GB of saved tensors in bulk (a "
                    "model compiled whole by torch.compile, or the inputs of the program's own "
                    "checkpointed blocks?): the offload leaves such tensors on the device, and "
                    "the cut step runs at placement's speed; with torch.compile, compile each "
                    "block instead (docs/embedding.md)" % (self.step_bulk / 1e9), RuntimeWarning)
            new_pinned = self.pool.new_bytes
            self.pool.new_bytes = 0
            # paced by room, the device maximum is the copies' doing as much
            # as the step's: the budget learns from the maximum without them
            learn = min(dmax, self.step_drained) if self.step_drained else dmax
            self.last_step["drained_max"] = self.step_drained
            before = self.budget.bytes
            relief = 0
            if self.relief_next is not None:
                try:
                    relief = max(0, int(self.relief_next(limit)))
                except Exception:  # a stand-in's error must not fail the step end
                    self.relief_next = None
            self.last_step["relief"] = relief
            self.budget.step_end(limit, learn, hmax, self.max_pass_offloadable,
                                 looked=before > 0, relief=relief)
            now = time.perf_counter()
            if self.choice is not None:
                # a step that moved the budget or pinned new host memory
                # (~1 s per few GB: the other way's tensors have other sizes)
                # is a transient, not measured
                self.spread = self.choice.step_end(
                    now - self._t_end if self._t_end is not None else 0.0, limit,
                    self.budget.bytes != before or new_pinned > 0, self.step_offloaded > 0)
                self.last_step["spread"] = self.spread
                self.last_step["choice"] = self.choice.decided
            elif self.spread_auto:
                self.skew = front_skew(self.max_pass_sizes, self.budget.bytes)
                self.spread = self.skew >= self.skew_min
                self.last_step["spread"] = self.spread
            if self.spread and self.spread_large and self.max_pass_sizes:  # read while spreading
                self.spread_min = statistics.median(self.max_pass_sizes)
            self.last_step["skew"] = self.skew
            self._t_end = now
            self.last_offloadable = self.max_pass_offloadable
            self.last_demand = dmax + hmax
            self.look_for_cut = self.start_at_cut
            if self.step_offloaded:
                self.pool_limit = limit
            idle = not self.any_budget(limit) and not self.step_offloaded
            self.idle_steps = self.idle_steps + 1 if idle else 0
            if idle and (self.pool_limit is None or limit > self.pool_limit or
                         self.idle_steps >= self.keep_idle_steps):
                t0, held = time.perf_counter(), self.pool.held
                self.pool.clear()
                self.last_step["clear_s"] = time.perf_counter() - t0
                self.last_step["cleared"] = held - self.pool.held
                self.next_skip = {}  # the cut is over: learn afresh at the next one
                self.judge = []
                self.pool_limit, self.idle_steps = None, 0
                self.budgets = {}  # every shape's budget is 0 under this limit
            if self._skip_limit is not None and limit != self._skip_limit:
                self.next_skip = {}  # another limit: other timings, learn afresh
                self.judge = []
            self._skip_limit = limit
            self._judge()
            self.skip = self.next_skip
            self.ex_last = self.ex
            self.order_last = self.unpack_cands
            self.room.step_end(self.step_offloaded > 0 and self.budget.bytes > 0)
            self._reset_step()
            self._mark = (tot["pack_seconds"], tot["unpack_seconds"], tot["wait_seconds"])
            self.last_step["hooks_on"] = self.update_hooks(limit)

    def update_hooks(self, limit=None):
        """Pushes the hooks (HookSwitch) while they may act: a budget to
        offload, or a limit (the one in force, when known) below the last
        step's demand, which the next step's first saved tensor would start
        the budget for (start_at_cut); pops them otherwise.  Returns whether
        they are pushed (None without a switch)."""
        if self.switch is None:
            return None
        want = (self.hooks_always or self.any_budget(limit) or
                (self.start_at_cut and limit is not None and 0 < limit < self.last_demand))
        return self.switch.set(want)

    def _judge(self):
        """gpu_pace: the judgements whose events are done decide their
        skips (into next_skip); the others wait for a later step end.
        Forgotten with the skips (another limit, or the cut over)."""
        keep = []
        for cand, n, ref, out, u in self.judge:
            if not (out.query() and u.query()):
                keep.append((cand, n, ref, out, u))
            else:
                try:
                    late = ref.elapsed_time(out) > ref.elapsed_time(u)
                except RuntimeError:  # not comparable (never expected): no judgement
                    late = False
                if late:
                    self.next_skip[cand] = n
        self.judge = keep[-4096:]  # bounded if events never complete (a hung device)

    # -- streams ---------------------------------------------------------

    def _streams(self, device):
        s = self.streams.get(device)
        if s is None:
            torch = self.torch
            with torch.cuda.device(device):
                # copies out by the SMs: their kernel's blocks are scheduled
                # ahead of the compute stream's where the stream ranks higher
                out = (torch.cuda.Stream(device, priority=-1) if self.out_priority
                       else torch.cuda.Stream(device))
                s = (out, torch.cuda.Stream(device))
            self.streams[device] = s
        return s

    # -- pack ------------------------------------------------------------

    def _eligible(self, t):
        if not t.is_cuda or t.numel() == 0:
            return 0
        # parameters, trained or frozen: the module holds them, nothing is freed
        if (t.is_leaf and t.requires_grad) or isinstance(t, self._param_type):
            return 0
        n = t.numel() * t.element_size()
        if n < self.min_bytes or t.storage_offset() != 0:
            return 0
        if not t.is_contiguous() and not (self.dense_ok and dense(t.shape, t.stride())):
            return 0
        if t.untyped_storage().nbytes() != n:  # a view of a larger storage frees nothing
            return 0
        return n

    def pack(self, t):
        if self.by_shape and self.step_shape is None:
            self._note_shape(t)
        if not self.enabled or (self.budget.bytes <= 0 and not self.look_for_cut):
            return t
        t0 = time.perf_counter()  # the hook's whole CPU time while it may act
        try:
            return self._pack_hook(t)
        finally:
            self.totals["pack_seconds"] += time.perf_counter() - t0

    def _note_shape(self, t):
        """by_shape: notes a saved tensor of the step until the step's shape
        is known (SHAPE_TENSORS CUDA tensors, or an eligible one: nothing
        is offloaded before it), then puts in force the budget of that
        shape (_use_shape)."""
        try:
            if not t.is_cuda:
                return
            self.shape_parts.append((tuple(t.shape), t.dtype))
            if len(self.shape_parts) < SHAPE_TENSORS and not self._eligible(t):
                return
        except Exception:  # not a tensor as expected: the shape is what was seen
            pass
        if self.shape_parts:
            with self.lock:
                self._use_shape(tuple(self.shape_parts))

    def _use_shape(self, shape):
        self.step_shape = shape
        if shape == self.budget_shape:
            return
        if self.budget_shape is not None:
            self.budgets[self.budget_shape] = self.budget
        b = self.budgets.pop(shape, None)
        if b is None:  # a new shape: from the budget in force
            b = copy.copy(self.budget)
        self.budget, self.budget_shape = b, shape
        while len(self.budgets) >= SHAPES_KEPT:  # the longest unused goes
            del self.budgets[next(iter(self.budgets))]

    def any_budget(self, limit=None):
        """Whether a budget of any shape is above 0 (under limit, if given:
        as retarget would leave it; Budget.at)."""
        return any(b.at(limit) > 0 for b in (self.budget, *self.budgets.values()))

    def _pack_hook(self, t):
        torch = self.torch
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            return t
        if torch.cuda.is_current_stream_capturing():
            return t
        # a budget of 0: a cut since the last step end? (one stats read per step)
        if self.budget.bytes <= 0 and not self._cut_started(t):
            return t
        ex = self._hook(t.device.index or 0)
        if self.pending:
            with self.lock:
                if ex is not None:
                    self._room(t.device.index or 0, ex)
                else:
                    # copies out done since the last look: their device
                    # tensors go now, at any pack.  Left to the next
                    # offloaded tensor, the last ones of a pass (after its
                    # budget is spent there is none) were held through the
                    # rest of the forward pass, its peak included, until
                    # the backward pass started.
                    self._drain(block=False)
        n = self._eligible(t)
        if not n:
            return t
        # a limit changed since the budget was learned? (a stats read, ~1 us)
        if self.budget.retarget(self.in_use(t.device.index)[1]) <= 0:
            return t
        return self._pack(t, n, ex)

    def _cut_started(self, t):
        """At the first saved CUDA tensor of a step whose budget is 0, outside
        a graph capture (pack checks both, and looks again at the next saved
        tensor otherwise): starts the budget if the limit is now below the
        last step's demand, less what recomputation will take off the step
        (relief; Budget.start)."""
        self.look_for_cut = False
        if self.last_demand <= 0:
            return False
        dev = t.device.index
        limit = self.in_use(dev)[1]
        demand = self.last_demand
        if demand <= limit:  # no cut below the last step's demand (the budget is 0 here)
            return False
        if self.relief is not None:
            try:
                demand -= min(demand, self.relief(limit))
            except Exception:  # a stand-in's error must not fail the saved tensor hook
                self.relief = None
        started = self.budget.start(limit, demand) > 0
        # the step's plan comes from a step without the cut (and without the
        # offload or the recomputation): the rest of the step goes by naive
        # placement, also where recomputation covers the cut and no budget starts
        if self.step_naive is not None:
            try:
                self.step_naive(dev)
            except Exception:  # a libvmem error in a saved tensor hook: the plan stays,
                self.step_naive = None  # and the offload does not ask again
        return started

    def _pack(self, t, n, ex=None):
        torch = self.torch
        with self.lock:
            key = (t.data_ptr(), t._version, tuple(t.shape), t.dtype)
            hit = self.seen.get(key)
            if hit is not None and hit[0]() is t:
                if hit[1] is None:  # saved again, and left on the device the first time
                    return t
                self.totals["deduped"] += 1
                hit[1].packs += 1
                return hit[1]
            if self.in_backward:
                # a new forward pass in the same step: its own budget, and
                # its records are fetched ahead from its last one down
                self.in_backward = False
                self.pass_offloaded = self.pass_offloadable = 0
                self.pass_sizes = []
                self.fetch_next = None
                self.fetch_seq = None
                self.pass_first = len(self.records)
                self.pass_hi = -1
            # a candidate's number counts each tensor once however often it
            # is saved (the skips are by number: one shift would move them all)
            cand = self.step_cands
            self.step_cands += 1
            skipped = self.skip.get(cand) == n
            if skipped:
                self.next_skip[cand] = n  # still not worth it while the step repeats
                self.step_skipped += n
                self.totals["skipped_bytes"] += n
            else:
                self.step_offloadable += n
                self.pass_offloadable += n
                self.pass_sizes.append(n)
                if self.pass_offloadable > self.max_pass_offloadable:
                    self.max_pass_offloadable = self.pass_offloadable
                    self.max_pass_sizes = self.pass_sizes
            # spread: the pass's budget is a fraction of what the last
            # step's largest pass could offload; offload a candidate only
            # while the bytes offloaded so far stay within that fraction of
            # the bytes seen, so the copies spread over the pass
            spread_out = (self.spread and not skipped and self.last_offloadable and
                          self.budget.bytes < self.last_offloadable and
                          ((self.pass_offloaded + n) * self.last_offloadable >
                           self.budget.bytes * self.pass_offloadable or
                           (self.spread_large and n < self.spread_min)))
            if skipped or spread_out or self.pass_offloaded >= self.budget.bytes:
                self.seen[key] = (weakref.ref(t), None)  # stays on the device
                return t
            self._drain(block=False)
            out, _ = self._streams(t.device)
            fc = self.fast
            compute = fc.current(t.device)
            slot = self.pool.get(n, out)
            timed = self.gpu_pace and self.learn_skip
            ref = None
            if timed:  # events are compared on one device only: a reference per device
                ref = self.t_ref.get(t.device.index)
                if ref is None:
                    ref = self.t_ref[t.device.index] = torch.cuda.Event(enable_timing=True)
                    ref.record(compute)
            host = _host_view(slot[0], t)
            fc.wait(out, compute)
            with fc.on(out):
                # (t is dense, its storage exactly its bytes: _eligible)
                if self.sm_copy and self.copy_out is not None and \
                        self.copy_out(t.device.index or 0, slot[0].data_ptr(), t.data_ptr(), n,
                                      out.cuda_stream):
                    self.totals["sm_copied_bytes"] += n
                else:
                    self.sm_copy = False  # off, or refused (no such device support)
                    host.copy_(t, non_blocking=True)
                done = torch.cuda.Event(enable_timing=True) if timed else torch.cuda.Event()
                done.record(out)
            r = _Record(len(self.records), cand, slot, host, done, t, n)
            r.ref = ref
            self.cand_index[cand] = r.index
            r.cum = self.pass_offloaded + n
            self.pass_hi = r.index
            weakref.finalize(r, self.pool.put, slot)
            self.records.append(r)
            self.seen[key] = (r.orig, r)
            early = (self.early and self.record_stream is not None and
                     self.record_stream(t.device.index or 0, t.data_ptr(), out.cuda_stream))
            if early:
                self.step_early += n
                self.totals["early_bytes"] += n
            else:
                self.pending.append((r, t))
                self.pending_bytes += n
            self.step_offloaded += n
            self.step_tensors += 1
            self.pass_offloaded += n
            self.totals["offloaded_bytes"] += n
            self.totals["offloaded_tensors"] += 1
            if not t.is_contiguous():  # dense in another order (channels_last ...)
                self.totals["strided_bytes"] += n
            # pacing: past window_out bytes of copies in flight the forward
            # pass waits for the oldest, so the link keeps up with it.  (Not
            # pacing while the device had room, letting the copies queue
            # behind the forward pass, was measured worse: docs/placement.md)
            if ex is not None:
                self._room(t.device.index or 0, ex)
            while (ex is None and self.pending_bytes > self.budget.window_out and
                   len(self.pending) > 1):
                self._drop_oldest(block=True, compute=compute if self.gpu_pace else None)
            return r

    def _hook(self, device):
        """pace_room, at every hook call of a cut step: learns the excursion
        of the stretch since the last call from libvmem's watermark, and
        returns the last step's excursion after this call (None: not known,
        or pacing by room off)."""
        if not self.pace_room or self.watermark is None or self.budget.bytes <= 0:
            return None
        with self.lock:  # the watermark's buffers, the counts: the forward and backward threads
            used, most, _ = self.watermark(device)
            if self.wm_used is not None:
                # the copies in flight now were in flight all through the stretch
                self.step_drained = max(self.step_drained, most - self.pending_bytes)
                e = max(0, most - self.wm_used)
                j = len(self.ex)
                if j < len(self.ex_last) and e - self.ex_last[j] > self.step_ex_miss[1]:
                    self.step_ex_miss = (j, e - self.ex_last[j])
                self.ex.append(e)
            self.wm_used = used
            k = self.hooks
            self.hooks += 1
            return self.ex_last[k] if k < len(self.ex_last) else None

    def _room(self, device, ex):
        """Pacing by room: lets go of the copies out done, then waits for
        the oldest while libvmem's device bytes in use plus ex (what the
        program allocated before the next hook call in the last step) pass
        the target."""
        self._drain(block=False)
        while self.pending:
            used, limit = self.in_use(device)
            if used + ex <= self.budget.target(limit):
                return
            self.step_room_waits += 1
            self._drop_oldest(block=True)

    def _drop_oldest(self, block, compute=None):
        """Lets the oldest pending device tensor go once its copy out is
        done: if it is not, returns False (block false), waits on the CPU
        (block true), or, given the compute stream (gpu_pace), makes that
        stream wait for the copy and lets it go at once: its memory, free in
        the compute stream's order from here, is reused only after the copy
        has read it, and the CPU goes on queueing kernels."""
        r, t = self.pending[0]
        if not r.out_done.query():
            if compute is not None:
                compute.wait_event(r.out_done)
                self.totals["waits_out_gpu"] += 1
            elif not block:
                return False
            else:
                self.totals["waits_out"] += 1
                t0 = time.perf_counter()
                r.out_done.synchronize()
                self.totals["wait_seconds"] += time.perf_counter() - t0
        self.pending.pop(0)
        self.pending_bytes -= r.nbytes
        return True

    def _drain(self, block):
        while self.pending and self._drop_oldest(block):
            pass
        while self.guard:  # tensors handed back before their copies out were done
            ev = self.guard[0][0]
            if not ev.query():
                if not block:
                    break
                ev.synchronize()
            self.guard.pop(0)

    # -- unpack and prefetch ---------------------------------------------

    def _fetch(self, r, stream=None):
        """Allocates r's device tensor on the compute stream and copies it
        back on `stream` (the copy waits for the copy out and for the
        compute stream's work so far, which may still use the memory), or
        on the compute stream itself when stream is None."""
        torch = self.torch
        fc = self.fast
        compute = fc.current(r.device)
        dev = torch.empty_strided(r.shape, r.stride, dtype=r.dtype, device=r.device)
        copier = compute if stream is None else stream
        if stream is not None:
            fc.wait(copier, compute)
        copier.wait_event(r.out_done)
        with fc.on(copier):
            dev.copy_(r.host, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(copier)
        # the consumer waits on a copy stream's event; the compute stream's
        # own copy is in its order already
        r.dev, r.in_done, r.slot[1] = dev, (None if stream is None else ev), ev
        r.fetched = stream is not None

    def _pending_at(self, r):
        """Where r is in pending (its device tensor still held: its copy out
        was in flight at the last drain), or -1."""
        for i in range(len(self.pending) - 1, -1, -1):
            if self.pending[i][0] is r:
                return i
        return -1

    def _reclaim(self, r, i, ahead):
        """r (pending[i]) gets its device tensor back: no copy, no new
        memory.  ahead: taken by the fetch ahead, counted in its window."""
        t = self.pending.pop(i)[1]
        self.pending_bytes -= r.nbytes
        if not r.out_done.query():
            # its copy out still reads it: were its memory reused once
            # autograd lets it go, a second unpack (retain_graph) would fetch
            # what a later kernel wrote there.  libvmem defers the reuse
            # until the copy stream's work is done (on the GPU, only if an
            # allocation needs that memory first); without it the tensor is
            # held until the copy is seen done (_drain)
            out = self._streams(t.device)[0]
            if not (self.record_stream is not None and
                    self.record_stream(t.device.index or 0, t.data_ptr(), out.cuda_stream)):
                self.guard.append((r.out_done, t))
        # the pinned buffer's next copy waits for the copy out
        r.dev, r.in_done, r.slot[1] = t, None, r.out_done
        r.reclaimed = True
        if ahead:
            r.fetched = True
            self.fetched_bytes += r.nbytes
            self.fetched_count += 1
        self.step_reclaimed += r.nbytes
        self.totals["reclaimed_bytes"] += r.nbytes

    def _fetch_order(self):
        """learn_order, at a pass's first fetch ahead: the pass's records in
        the order the last step's backward first unpacked their candidates
        (then any others, last saved first), or None where fewer than half
        of them are in it (the steps differ: the reverse of the saving
        order).  A model whose blocks torch.compile compiled one by one
        saves each block's tensors at its end and unpacks them first saved
        first, block by block from the last: the reverse of the saving
        order fetches each block's first tensor last, after its consumer
        asked for it."""
        first = self.pass_first
        seq, seen = [], set()
        for c in self.order_last:
            i = self.cand_index.get(c)
            if i is not None and i >= first and i not in seen:
                seq.append(i)
                seen.add(i)
        n = len(self.records) - first
        if 2 * len(seq) < n:
            return None
        seq.extend(i for i in range(len(self.records) - 1, first - 1, -1) if i not in seen)
        return seq

    def _prefetch(self):
        if not self.records:
            return
        if self.fetch_next is None:
            self.fetch_seq = self._fetch_order() if self.learn_order and self.order_last else None
            self.fetch_next = 0 if self.fetch_seq is not None else len(self.records) - 1
        seq = self.fetch_seq
        if seq is not None:  # positions in seq, upwards
            recs, n, dk = self.records, len(seq), 1

            def at(k):
                return recs[seq[k]] if k < n else None
        else:  # record indices, downwards
            recs, dk = self.records, -1

            def at(k):
                return recs[k] if k >= 0 else None
        used, limit = None, None
        # backward mostly unpacks in reverse pack order, but not always (a
        # residual branch): a record unpacked early below others leaves a
        # hole; the walk goes over holes and stops at the first record it
        # cannot fetch, and the pointer moves only past records done
        # fetch by room: what the rest of the pass needs, where known
        ahead = self.room.ahead() if self.fetch_room and self.in_backward else None
        if ahead is not None:
            self.step_room_known += 1
        k = self.fetch_next
        while True:
            r = at(k)
            if r is None:
                return
            if r.dev is not None or r.unpacks:
                if k == self.fetch_next:
                    self.fetch_next += dk
                k += dk
                continue
            if (ahead is None and self.fetched_bytes + r.nbytes > self.budget.window_in and
                    self.fetched_count >= self.ahead_min):
                self.step_stop_window += 1
                return
            if used is None:
                used, limit = self.in_use(r.device.index or 0)
            if ahead is not None and \
                    self.fetched_bytes + r.nbytes + ahead > self.budget.target(limit):
                return
            # a tensor still held is in `used` already: keeping it takes the
            # room a copy back would (its memory goes back once its copy out
            # is done, so holding it early is not free)
            i = self._pending_at(r)
            if used + (0 if i >= 0 else r.nbytes) > self.budget.target(limit):
                self.step_stop_room += 1
                return
            # fetched by room, the copy back is allocated in the backward's
            # middle, where the free memory may lie in pieces: an allocation
            # no free block fits makes libvmem give memory back and map it
            # again, which waits for the device (measured on an H100: the
            # backward 2-5x slower, the arena's regions 7 -> 40-50); it
            # waits for a later hook call, or its consumer
            if (i < 0 and ahead is not None and self.fits is not None and
                    not self.fits(r.device.index or 0, r.nbytes,
                                  self.fast.current(r.device).cuda_stream)):
                self.step_no_fit += 1
                return
            if i >= 0:
                self._reclaim(r, i, ahead=True)
            else:
                self._fetch(r, self._streams(r.device)[1])
                used += r.nbytes
                self.fetched_bytes += r.nbytes
                self.fetched_count += 1
                self.step_prefetched += r.nbytes
                self.totals["prefetched_bytes"] += r.nbytes
            self.step_ahead_max = max(self.step_ahead_max, self.fetched_bytes)
            if k == self.fetch_next:
                self.fetch_next += dk
            k += dk

    def hook_pack(self, t):
        """The pack hook install() pushes: pack(), and a tensor left as it
        is comes wrapped with its version, which hook_unpack checks."""
        p = self.pack(t)
        if p is not t:
            return p
        try:
            return _Kept(t, t._version)
        except Exception:  # no version counter to read: as it is
            return t

    def hook_unpack(self, p):
        """The unpack hook install() pushes: autograd checks a saved
        tensor's version only without hooks, so this does it in its place
        (a tensor modified in place after it was saved raises, as it would
        without the offload), then unpack().  An offloaded tensor is checked
        while the program still holds it (a weak reference); once the
        program has let it go, only a view of it could change it, and that
        is not seen."""
        if type(p) is _Kept:
            t = p.t
            if t._version != p.version:
                raise _modified(t, p.version)
            if not self.records and self.budget.bytes <= 0:
                return t  # nothing offloaded this step, none to offload: nothing to do
            return self.unpack(t)
        if type(p) is _Record:
            t = p.orig()
            if t is not None and t._version != p.version:
                raise _modified(t, p.version)
        return self.unpack(p)

    def unpack(self, p):
        t0 = time.perf_counter()
        try:
            return self._unpack(p)
        finally:
            self.totals["unpack_seconds"] += time.perf_counter() - t0

    def _unpack(self, p):
        torch = self.torch
        starts = not self.in_backward
        if starts and self.step_max is not None and self.budget.bytes > 0:
            self._backward_starts(p)
        self.in_backward = True
        if torch.cuda.is_current_stream_capturing():
            return self._unpack_captured(p)
        if not (self.fetch_room and self.watermark is not None and not self.pace_room and
                self.budget.bytes > 0):
            return self._unpack_hook(p)
        with self.lock:
            if starts:
                self.room.pass_starts()
            self.room.hook(self.watermark(self._device_of(p))[1])
            self.step_bw_hooks += 1
        try:
            return self._unpack_hook(p)
        finally:
            with self.lock:
                self.room.hook_done(self.fetched_bytes)

    def _device_of(self, p):
        dev = getattr(p, "device", None)
        if dev is not None and getattr(dev, "type", "cuda") == "cuda" and dev.index is not None:
            return dev.index
        if self.records:
            return self.records[0].device.index or 0
        return self.torch.cuda.current_device()

    def _unpack_hook(self, p):
        torch = self.torch
        ex = self._hook(p.device.index or 0) if getattr(p, "is_cuda", False) or \
            isinstance(p, _Record) else None
        if not isinstance(p, _Record):
            if self.records:
                with self.lock:
                    if ex is not None:
                        self._room(self.records[0].device.index or 0, ex)
                    self._drain(block=False)
                    self._prefetch()
            return p
        with self.lock:
            r = p
            if r.ref is not None and r.unpacks == 0 and self.learn_skip:
                # the consumer's place on the compute stream, before any
                # copy back it may wait for (judged at a later step end)
                u = torch.cuda.Event(enable_timing=True)
                u.record(self.fast.current(r.device))
                self.judge.append((r.cand, r.nbytes, r.ref, r.out_done, u))
            i = self._pending_at(r) if r.dev is None else -1
            if i >= 0:
                self._reclaim(r, i, ahead=False)
            if r.dev is None:
                used, limit = self.in_use(r.device.index or 0)
                if used + r.nbytes > self.budget.target(limit):
                    self.step_late_no_room += r.nbytes  # else the fetch ahead had not reached it
                    self.totals["late_no_room_bytes"] += r.nbytes
                self._fetch(r)
                self.step_late += r.nbytes
                self.totals["late_fetch_bytes"] += r.nbytes
            elif r.in_done is not None:
                self.fast.current(r.device).wait_event(r.in_done)
            if r.unpacks == 0:
                self.unpack_cands.append(r.cand)
                if self.bulk_skip and self.learn_skip:
                    self._bulk_check(r)
            # its consumer is here and its copy out is not even done: its
            # memory never went back, so the next steps leave it on the device
            if (r.ref is None and r.reclaimed and r.unpacks == 0 and self.learn_skip and
                    not r.out_done.query()):
                self.next_skip[r.cand] = r.nbytes
            dev = self._hand_out(r)
            if ex is not None:
                self._room(r.device.index or 0, ex)
            self._drain(block=False)
            self._prefetch()
            return dev

    def _bulk_check(self, r):
        """bulk_skip, at r's first unpack: the bytes of the pass's records
        saved after r and not unpacked yet.  A backward pass consumes saved
        tensors in about the reverse of their saving order, which is what
        lets an offloaded tensor's memory serve the rest of the step until
        its copy comes back.  A consumer that takes the pass's tensors in
        bulk (a torch.compile'd model's backward: one node unpacks all it
        saved, first saved first) needs them all on the device at once:
        offloading them moves bytes for nothing and brings them back late
        into a full device.  Where more than the fetch ahead's window and
        more than half the pass's offloaded bytes were saved after r and
        are still to come, r is a skip for the next steps (as a record
        whose copy out came too late is; judged at the step end,
        _bulk_judge); a node that saves a few tensors together stays under
        both."""
        if r.index < self.pass_first or self.pass_hi <= r.index:
            return
        recs, hi = self.records, self.pass_hi
        while hi > r.index and recs[hi].unpacks > 0:
            hi -= 1
        self.pass_hi = hi
        later = recs[hi].cum - r.cum
        if later > self.budget.window_in and 2 * later > self.pass_offloaded:
            self.bulk_maybe.append((r, hi, later, self.pass_offloaded))

    def _bulk_judge(self):
        """At the step end: the records _bulk_check found consumed in bulk
        become skips, unless what was still to come after them was records
        never unpacked (a graph the program dropped, after the one it ran
        backward on), which do not count."""
        if not self.bulk_maybe:
            return
        recs = self.records
        never = [0] * (len(recs) + 1)  # never[i]: bytes of records below i never unpacked
        for i, r in enumerate(recs):
            never[i + 1] = never[i] + (r.nbytes if r.unpacks == 0 else 0)
        for r, hi, later, passed in self.bulk_maybe:
            later -= never[hi + 1] - never[r.index + 1]
            if later > self.budget.window_in and 2 * later > passed:
                self.next_skip[r.cand] = r.nbytes
                self.step_bulk += r.nbytes
                self.totals["bulk_bytes"] += r.nbytes

    def _backward_starts(self, p):
        """A backward pass's first unpack: notes the step's device maximum
        so far (the forward passes' peak, before any fetch ahead)."""
        m = self.step_max(self._device_of(p))
        if m:
            self.step_fwd_max = max(self.step_fwd_max, m)

    def _hand_out(self, r):
        """r's device copy, to one of its consumers: bytes fetched ahead
        are settled at the first, and the record lets go of the copy at the
        last (autograd holds it from there)."""
        if r.fetched and r.unpacks == 0:
            self.fetched_bytes -= r.nbytes
            self.fetched_count -= 1
        dev = r.dev
        r.unpacks += 1
        if r.unpacks >= r.packs:
            r.dev = None
            r.in_done = None
        return dev

    def _unpack_captured(self, p):
        """Inside a CUDA graph capture: no copy stream, no event of outside
        work, no fetch ahead.  A tensor offloaded before the capture (its
        forward ran outside) is waited for on the CPU and copied back on
        the capturing stream, which the graph then replays."""
        if not isinstance(p, _Record):
            return p
        with self.lock:
            r = p
            if r.dev is None:
                r.out_done.synchronize()
                dev = self.torch.empty_strided(r.shape, r.stride, dtype=r.dtype, device=r.device)
                dev.copy_(r.host, non_blocking=True)
                return dev
            if r.in_done is not None:
                r.in_done.synchronize()
            return self._hand_out(r)


_off = None
_read = None  # the stats reader of install()


def _stats_reader(lib_mod):
    import ctypes

    sz, u64, dbl, cint, cstr = (ctypes.c_size_t, ctypes.c_uint64, ctypes.c_double,
                                ctypes.c_int, ctypes.c_char_p)

    class _S(ctypes.Structure):  # vmem_stats_t (version 7), include/vmem.h
        _fields_ = [("size", ctypes.c_uint32), ("version", ctypes.c_uint32), ("backend", cstr)] + [
            (f, sz) for f in (
                "limit", "pending_limit", "start_cap", "device_held", "device_in_use",
                "device_requested", "device_peak_held", "device_peak_in_use", "device_regions",
                "host_limit", "host_held", "host_in_use", "host_peak_held", "host_peak_in_use")] + [
            (f, u64) for f in (
                "allocs", "frees", "spills", "spilled_bytes", "failures", "bad_frees",
                "device_region_allocs", "device_region_frees", "steps")] + [
            ("last_step_seconds", dbl)] + [
            (f, sz) for f in (
                "step_device_min", "step_device_max", "step_host_min", "step_host_max")] + [
            (f, cint) for f in ("host_fallback", "perf", "shrink_pending", "placement")] + [
            (f, u64) for f in (
                "placed_host_allocs", "placed_host_bytes", "fallback_allocs", "fallback_bytes",
                "moved_to_host_bytes", "moved_to_device_bytes", "planned_steps",
                "diverged_steps", "plan_host_bytes", "host_freed_bytes")] + [
            ("host_life_events", dbl), ("host_life_seconds", dbl), ("device_unused", sz),
            ("device_unused_byte_seconds", dbl), ("device_unused_mean", dbl),
            ("device_trims", u64), ("device_trimmed", u64), ("limit_source", cstr),
            ("device", cint)] + [
            (f, u64) for f in (
                "plan_swap_bytes", "swap_out_bytes", "swap_in_bytes", "swap_points",
                "swap_skipped")] + [
            ("cur_step_device_max", sz), ("cur_step_host_max", sz),
            ("naive_chosen_steps", u64), ("device_syncs", u64), ("device_sync_seconds", dbl),
            ("device_remaps", u64), ("device_remapped", u64)]

    lib = lib_mod.load()
    fn = lib.vmem_get_stats
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    peek = lib.vmem_instance_peek
    buf = _S()
    buf.size = ctypes.sizeof(_S)
    ref = ctypes.byref(buf)

    def read(device):
        v = peek(device)
        if not v or fn(v, ref) != 0:
            return None
        return buf
    return read


def _watermark_reader(lib_mod):
    import ctypes
    lib = lib_mod.load()
    fn = getattr(lib, "vmem_watermark", None)
    if fn is None:  # an older libvmem: no pacing by room
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(ctypes.c_size_t)] * 3
    peek = lib.vmem_instance_peek
    vals = [ctypes.c_size_t() for _ in range(3)]
    refs = [ctypes.byref(x) for x in vals]

    def read(device):
        v = peek(device)
        if not v or fn(v, *refs) != 0:
            return 0, 0, 1 << 62
        return vals[0].value, vals[1].value, vals[2].value
    return read


def _instance_call(lib_mod, name, argtypes, ok):
    """f(device, *args) -> whether libvmem's `name` (vmem_t * first, then
    argtypes) on device's instance returned ok; None if this libvmem lacks it."""
    import ctypes
    lib = lib_mod.load()
    fn = getattr(lib, name, None)
    if fn is None:
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + argtypes
    peek = lib.vmem_instance_peek

    def call(device, *args):
        v = peek(device)
        return bool(v) and fn(v, *args) == ok
    return call


def _fits_reader(lib_mod):
    """fits(device, nbytes, stream): vmem_fits (None with an older libvmem:
    fetch by room does not ask)."""
    import ctypes
    return _instance_call(lib_mod, "vmem_fits", [ctypes.c_size_t, ctypes.c_void_p], 1)


def _record_stream_fn(lib_mod):
    """record(device, ptr, stream): vmem_record_stream (None with an older
    libvmem: device tensors are held until their copy is done)."""
    import ctypes
    return _instance_call(lib_mod, "vmem_record_stream", [ctypes.c_void_p, ctypes.c_void_p], 0)


def _copy_out_fn(lib_mod):
    """copy(device, dst, src, nbytes, stream): vmem_copy_async (None with an
    older libvmem: copies out by the copy engine)."""
    import ctypes
    return _instance_call(lib_mod, "vmem_copy_async",
                          [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], 0)


def install(lib_mod, torch, min_bytes=MiB, budget=None):
    """Installs the saved tensor hooks (default hooks, pushed on the calling
    thread, where the forward pass must run and the step ends should come:
    HookSwitch pushes them only while they may act, unless
    $VMEM_TORCH_OFFLOAD_HOOKS is "always").  Idempotent; returns the
    Offload."""
    global _off, _read
    if _off is not None:
        return _off
    _read = _stats_reader(lib_mod)

    def in_use(device):
        s = _read(device)
        return (s.device_in_use, s.limit) if s is not None else (0, 1 << 62)

    def step_max(device):
        s = _read(device)
        return s.cur_step_device_max if s is not None else 0

    always = _hooks_always()
    _off = Offload(torch, in_use, budget=budget, min_bytes=min_bytes, step_max=step_max,
                   watermark=_watermark_reader(lib_mod),
                   step_naive=getattr(lib_mod, "step_naive", None),
                   fits=_fits_reader(lib_mod), record_stream=_record_stream_fn(lib_mod),
                   copy_out=_copy_out_fn(lib_mod))
    _off.hooks_always = always
    _off.switch = HookSwitch(torch._C._autograd, (_off.hook_pack, _off.hook_unpack))
    _off.update_hooks()
    return _off


def _hooks_always():
    """$VMEM_TORCH_OFFLOAD_HOOKS: "cut" (default: the hooks pushed only
    while they may act, HookSwitch) or "always"."""
    import os
    v = os.environ.get("VMEM_TORCH_OFFLOAD_HOOKS", "cut").strip().lower()
    if v not in ("cut", "always"):
        raise ValueError("VMEM_TORCH_OFFLOAD_HOOKS=%r: expected \"cut\" or \"always\"" % v)
    return v == "always"


def limit_set(device=None):
    """Called by libvmem.set_limit() after the limit changed: a cut below
    the last step's demand pushes the hooks at once (on the installing
    thread), so that the next step's first saved tensor starts the budget
    as it would with the hooks always pushed."""
    if _off is None:
        return
    s = _read(device if device is not None else 0)
    if s is not None:
        _off.update_hooks(s.limit)


def uninstall():
    """Pops the hooks install() pushed (call it on the same thread, with no
    other default hooks pushed since)."""
    global _off
    if _off is None:
        return
    _off.enabled = False
    if _off.switch is not None:
        _off.switch.remove()
    _off = None


def step_end(device=None):
    """Called by libvmem.step_end(device) after the libvmem step end."""
    if _off is None:
        return

    def stats_of(device):
        s = _read(device)
        if s is None:
            return 1 << 62, 0, 0
        return s.limit, s.step_device_max, s.step_host_max
    _off.step_end(stats_of, device)


def stats():
    """The offload's counters: totals since install and the last step."""
    if _off is None:
        return {"installed": False}
    sw = _off.switch
    out = {"installed": True, "budget": _off.budget.bytes,
           "hooks_on": sw.on if sw is not None else None,
           "hook_pushes": sw.pushes if sw is not None else 0,
           "hook_pops": sw.pops if sw is not None else 0}
    out.update(_off.totals)
    out["last_step"] = dict(_off.last_step)
    return out
