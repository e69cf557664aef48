#!/usr/bin/env python3
"""Tests of libvmem_offload without a GPU or PyTorch: the budget on its own,
and the hooks over a small stand-in for the parts of torch they use (copies
run at once, events are complete).  The hooks on a real GPU, with PyTorch's
autograd: scripts/gpu/offload-check.sh.

    python3 python/test_offload.py [-v]

With LIBVMEM_TEST_INSTALLED=1 (.ci/run's wheel check) the installed module is
tested, not the one beside this file.
"""

import gc
import os
import sys
import unittest
import weakref

_HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("LIBVMEM_TEST_INSTALLED") == "1":
    # python puts this file's directory first on sys.path: take it off, so
    # that the installed module is the one tested
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
else:
    sys.path.insert(0, _HERE)
import libvmem_offload as off  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
RAISED = 128 * GiB  # a limit above make()'s: the cut ends


# --------------------------------------------------------------------------
# A stand-in for torch: tensors are lists of values over a shared storage
# --------------------------------------------------------------------------

class DType:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __repr__(self):
        return self.name


class Device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __eq__(self, other):
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


class Storage:
    next_ptr = [4096]

    def __init__(self, nbytes, ptr=None):
        self.nbytes_ = nbytes
        self.data = {}
        if ptr is None:
            ptr = Storage.next_ptr[0]
            Storage.next_ptr[0] += nbytes + 4096
        self.ptr = ptr

    def nbytes(self):
        return self.nbytes_


class FakeTorch:
    uint8 = DType("uint8", 1)
    float32 = DType("float32", 4)

    def __init__(self):
        ft = self
        self.log = []  # ("d2h"|"h2d"|"h2d-late", nbytes)
        self.waits = []  # (stream, event) of every Stream.wait_event
        self.syncs = 0   # Event.synchronize calls (the CPU waiting)

        class Tensor:
            def __init__(self, shape, dtype, device, storage=None, leaf=False, grad=False,
                         ptr=None):
                self.shape = tuple(shape)
                self.dtype = dtype
                self.device = device
                n = 1
                for d in self.shape:
                    n *= d
                self.n = n
                self.storage = storage or Storage(n * dtype.size, ptr)
                self.is_leaf = leaf
                self.requires_grad = grad
                self._version = 0
                self.contig = True
                self.offset = 0
                self.strides = None  # None: contiguous

            is_cuda = property(lambda self: self.device.type == "cuda")

            def numel(self):
                return self.n

            def element_size(self):
                return self.dtype.size

            def is_contiguous(self):
                return self.contig

            def storage_offset(self):
                return self.offset

            def untyped_storage(self):
                return self.storage

            def data_ptr(self):
                return self.storage.ptr

            def stride(self):
                if self.strides is not None:
                    return self.strides
                out, acc = [], 1
                for d in reversed(self.shape):
                    out.append(acc)
                    acc *= d
                return tuple(reversed(out))

            def as_strided(self, shape, stride):
                t = Tensor(shape, self.dtype, self.device, self.storage)
                t.strides = tuple(stride)
                t.contig = t.strides == Tensor(shape, self.dtype, self.device,
                                               self.storage).stride()
                return t

            def __getitem__(self, sl):  # a 1-d uint8 slice: a view at an offset
                t = Tensor((sl.stop - sl.start,), self.dtype, self.device,
                           Storage(sl.stop - sl.start, self.storage.ptr + sl.start))
                t.base = self
                return t

            def view(self, what):
                if isinstance(what, DType):
                    return Tensor((self.storage.nbytes() // what.size,), what, self.device,
                                  self.storage)
                return Tensor(what, self.dtype, self.device, self.storage)

            def fill(self, values):
                for i, x in enumerate(values):
                    self.storage.data[i] = x
                return self

            def values(self):
                return [self.storage.data.get(i) for i in range(self.n)]

            def copy_(self, src, non_blocking=False):
                assert self.n == src.n
                kind = {("cpu", "cuda"): "h2d", ("cuda", "cpu"): "d2h"}[
                    (src.device.type, self.device.type)]
                if kind == "h2d" and ft.cur_stream is ft.default:
                    kind = "h2d-late"
                ft.log.append((kind, self.n * self.dtype.size))
                self.storage.data = dict(src.storage.data)  # only the filled values
                return self

        self.Tensor = Tensor

        class Parameter(Tensor):
            pass

        class NN:
            pass

        self.nn = NN()
        self.nn.Parameter = Parameter

        class Stream:
            cuda_stream = 0

            def wait_stream(self, other):
                pass

            def wait_event(self, ev):
                ft.waits.append((self, ev))

        class Event:
            # a timeline: each record takes the next tick; on a copy stream
            # the event lands copy_lag ticks later (the copy's own time)
            def __init__(self, enable_timing=False):
                self.timing = enable_timing
                self.t = None

            def record(self, stream=None):
                ft.clock += 1
                lag = ft.copy_lag if stream is not None and stream is not ft.default else 0
                self.t = ft.clock + lag

            def query(self):
                return ft.copies_done

            def elapsed_time(self, end):
                assert self.timing and end.timing, "timing events only"
                return end.t - self.t

            def synchronize(self):
                ft.syncs += 1

        class StreamCtx:
            def __init__(self, s):
                self.s = s

            def __enter__(self):
                self.prev, ft.cur_stream = ft.cur_stream, self.s

            def __exit__(self, *a):
                ft.cur_stream = self.prev

        class Cuda:
            pass

        cuda = Cuda()
        cuda.Stream = lambda device=None: Stream()
        cuda.Event = Event
        cuda.current_stream = lambda device=None: ft.cur_stream
        cuda.stream = StreamCtx
        cuda.device = lambda d: StreamCtx(ft.cur_stream)
        cuda.is_current_stream_capturing = lambda: ft.capturing
        cuda.current_device = lambda: ft.current_device
        self.cuda = cuda
        self.default = Stream()
        self.cur_stream = self.default
        self.capturing = False
        self.current_device = 0
        self.copies_done = True  # what Event.query says (copies are made at once all the same)
        self.clock = 0
        self.copy_lag = 0
        self.pinned = 0    # bytes asked of PyTorch's pinned allocator
        self.pageable = 0  # bytes of plain host tensors

    def empty(self, n, dtype=None, pin_memory=False):
        if pin_memory:
            self.pinned += n
        else:
            self.pageable += n
        return self.Tensor((n,), dtype, Device("cpu"))

    def empty_strided(self, shape, stride, dtype=None, device=None):
        t = self.Tensor(shape, dtype, device)
        return t.as_strided(shape, stride)

    def cuda_tensor(self, nbytes, fill=None, **kw):
        t = self.Tensor((nbytes // 4,), self.float32, Device("cuda", 0), **kw)
        if fill is not None:
            t.fill([fill + i for i in range(min(t.n, 8))])
        return t


off_test_cpu = Device("cpu")


def cut_step(torch, o, state, sizes):
    """One step that does not fit: a tensor of each size packed, all
    unpacked in reverse, the step end (1 GiB on host at its maximum)."""
    ts = [torch.cuda_tensor(n, float(k)) for k, n in enumerate(sizes)]
    packed = [o.pack(t) for t in ts]
    del ts
    for p in reversed(packed):
        o.unpack(p)
    del packed, p
    o.step_end(lambda dev: (state["limit"], 30 * GiB, GiB))
    gc.collect()


def make(budget_bytes=0, used=0, limit=64 * GiB, **kw):
    torch = FakeTorch()
    state = {"used": used, "limit": limit}
    o = off.Offload(torch, lambda dev: (state["used"], state["limit"]), **kw)
    o.budget.bytes = budget_bytes
    o.budget.limit = limit
    return torch, o, state


def paced_by_room(limit):
    """An Offload with pacing by room over a watermark the test sets
    (wm["used"], wm["most"]), 1 GiB in use; returns (torch, o, wm)."""
    wm = {"used": GiB, "most": GiB}
    torch, o, _ = make(GiB, used=GiB, limit=limit,
                       watermark=lambda dev: (wm["used"], wm["most"], limit))
    o.pace_room = True
    return torch, o, wm


def offloaded(torch, o, n, nbytes=4 * MiB):
    """n tensors packed, their copies out done and their device tensors let
    go (the usual state when backward starts); returns (tensors, packed)."""
    ts = [torch.cuda_tensor(nbytes, float(k)) for k in range(n)]
    packed = [o.pack(t) for t in ts]
    o._drain(block=True)
    return ts, packed


# --------------------------------------------------------------------------

class BudgetTest(unittest.TestCase):
    def test_a_step_that_fits_offloads_nothing(self):
        b = off.Budget()
        self.assertEqual(b.step_end(10 * GiB, 6 * GiB, 0, 0), 0)

    def test_a_cut_raises_the_budget_by_what_did_not_fit(self):
        b = off.Budget()
        limit = 10 * GiB
        got = b.step_end(limit, 9 * GiB, 4 * GiB, 0)
        target = limit - int(limit * b.margin_frac)
        self.assertEqual(got, 13 * GiB - target)

    def test_what_recomputation_will_take_off_next_lowers_the_budget(self):
        limit = 10 * GiB
        for relief in (0, GiB, 3 * GiB, 9 * GiB):
            b = off.Budget()
            target = limit - int(limit * b.margin_frac)
            got = b.step_end(limit, 9 * GiB, 4 * GiB, 0, relief=relief)
            self.assertEqual(got, max(0, 13 * GiB - target - relief), relief)
        b = off.Budget()
        b.bytes = 2 * GiB  # a step that fitted at its target keeps its budget, less the relief
        b.limit = limit
        self.assertEqual(b.step_end(limit, b.target(limit), 0, 0, relief=GiB), GiB)

    def test_the_budget_never_exceeds_what_a_step_can_offload(self):
        b = off.Budget()
        b.step_end(10 * GiB, 9 * GiB, 8 * GiB, 0)
        self.assertEqual(b.step_end(10 * GiB, 9 * GiB, 2 * GiB, 3 * GiB), 3 * GiB)

    def test_room_to_spare_lowers_the_budget_and_never_below_zero(self):
        b = off.Budget()
        b.bytes = 4 * GiB
        got = b.step_end(10 * GiB, 5 * GiB, 0, 8 * GiB)
        self.assertLess(got, 4 * GiB)
        for _ in range(20):
            got = b.step_end(10 * GiB, 1 * GiB, 0, 8 * GiB)
        self.assertEqual(got, 0)

    def test_a_step_that_looked_and_could_offload_nothing_does_not_raise_the_budget(self):
        # a job over its limit whose saved tensors are all ineligible: the
        # first step end starts the budget; later ones, which looked and
        # found nothing to offload, keep it instead of adding to it forever
        b = off.Budget()
        first = b.step_end(10 * GiB, 9 * GiB, 4 * GiB, 0)
        self.assertGreater(first, 0)
        for _ in range(50):
            self.assertEqual(b.step_end(10 * GiB, 9 * GiB, 4 * GiB, 0, looked=True), first)
        # room to spare still lowers it
        self.assertLess(b.step_end(10 * GiB, GiB, 0, 0, looked=True), first)
        # a step that did not look (budget 0) raises it as before
        b2 = off.Budget()
        self.assertGreater(b2.step_end(10 * GiB, 9 * GiB, 4 * GiB, 0, looked=False), 0)

    def test_offload_budget_stays_bounded_when_nothing_is_eligible(self):
        torch, o, state = make(0, limit=10 * GiB)
        budgets = []
        for _ in range(6):
            small = torch.cuda_tensor(256 * 1024, 1.0)  # below min_bytes: never a candidate
            self.assertIs(o.pack(small), small)
            o.step_end(lambda dev: (state["limit"], 9 * GiB, 4 * GiB))
            budgets.append(o.budget.bytes)
        self.assertGreater(budgets[0], 0)
        self.assertEqual(budgets, [budgets[0]] * 6)

    def test_a_step_just_under_the_target_keeps_the_budget(self):
        b = off.Budget()
        b.bytes = 2 * GiB
        limit = 10 * GiB
        target = limit - int(limit * b.margin_frac)
        self.assertEqual(b.step_end(limit, target - 10 * MiB, 0, 8 * GiB), 2 * GiB)

    def test_a_step_that_fits_above_the_target_keeps_the_budget(self):
        # between the target and the limit, with nothing on host: it fit, and
        # one more tensor offloaded would only cost link time
        b = off.Budget()
        b.bytes = 2 * GiB
        limit = 10 * GiB
        target = limit - int(limit * b.margin_frac)
        for _ in range(3):
            self.assertEqual(b.step_end(limit, target + 100 * MiB, 0, 8 * GiB), 2 * GiB)
        # bytes on host: it did not fit, raised to the target
        self.assertEqual(b.step_end(limit, limit - MiB, 300 * MiB, 8 * GiB),
                         2 * GiB + limit - MiB + 300 * MiB - target)

    def test_a_limit_change_within_a_step_moves_the_budget_at_once(self):
        b = off.Budget()
        b.step_end(10 * GiB, 9 * GiB, 4 * GiB, 0)
        before = b.bytes
        self.assertEqual(b.retarget(10 * GiB + GiB), before - GiB)     # raised by 1 GiB
        self.assertEqual(b.retarget(40 * GiB), 0)                       # raised past the need
        self.assertEqual(b.retarget(30 * GiB), 10 * GiB)                # cut again

    def test_host_bytes_from_before_a_raise_within_the_step_do_not_raise_the_budget(self):
        b = off.Budget()
        b.step_end(10 * GiB, 9 * GiB, 4 * GiB, 0)
        b.retarget(10 * GiB)  # a candidate saw the cut limit, then the limit was raised
        b.retarget(80 * GiB)  # and a later candidate the raised one
        self.assertEqual(b.step_end(80 * GiB, 9 * GiB, 2 * GiB, 6 * GiB), 0)
        b2 = off.Budget()
        b2.step_end(10 * GiB, 9 * GiB, 4 * GiB, 0)
        before = b2.bytes
        b2.retarget(10 * GiB)  # same limit: host bytes mean it did not fit
        self.assertEqual(b2.step_end(10 * GiB, 8 * GiB, 256 * MiB, 8 * GiB), before + b2.step_min)

    def test_host_bytes_left_from_before_a_raise_between_steps_do_not_raise_the_budget(self):
        b = off.Budget()
        b.step_end(10 * GiB, 9 * GiB, GiB, 8 * GiB)  # cut: the budget rises
        self.assertGreater(b.bytes, 0)
        b.retarget(40 * GiB)  # raised before the next step's first candidate
        self.assertEqual(b.bytes, 0)
        # that step still had blocks on host from the cut (they go back at its end)
        self.assertEqual(b.step_end(40 * GiB, 6 * GiB, 3 * GiB, 8 * GiB), 0)
        # under one limit, host bytes of a step raise the budget as before
        self.assertGreater(b.step_end(40 * GiB, 6 * GiB, 3 * GiB, 8 * GiB), 0)

    def test_windows_scale_with_the_limit(self):
        b = off.Budget()
        b.set_limit(1 * GiB)
        self.assertEqual(b.window_out, 64 * MiB)
        b.set_limit(8 * GiB)
        self.assertEqual(b.window_out, 256 * MiB)
        b.set_limit(80 * GiB)
        self.assertEqual(b.window_out, b.window_max)


class HooksTest(unittest.TestCase):
    def test_no_budget_returns_the_tensor_itself(self):
        torch, o, _ = make(0)
        t = torch.cuda_tensor(4 * MiB, 1.0)
        self.assertIs(o.pack(t), t)
        self.assertIs(o.unpack(t), t)
        self.assertEqual(torch.log, [])

    def test_round_trip_keeps_the_values(self):
        torch, o, _ = make(GiB)
        ts = [torch.cuda_tensor(4 * MiB, 10.0 * k) for k in range(3)]
        packed = [o.pack(t) for t in ts]
        self.assertTrue(all(p is not t for p, t in zip(packed, ts)))
        o._drain(block=True)  # the copies out are done: the device tensors are let go
        for p, t in reversed(list(zip(packed, ts))):
            back = o.unpack(p)
            self.assertIsNot(back, t)
            self.assertEqual(back.values()[:8], t.values()[:8])
            self.assertEqual(back.shape, t.shape)
        self.assertEqual(o.totals["offloaded_bytes"], 12 * MiB)

    def test_ineligible_tensors_stay(self):
        torch, o, _ = make(GiB)
        param = torch.cuda_tensor(4 * MiB, 1.0, leaf=True, grad=True)
        small = torch.cuda_tensor(256 * 1024, 1.0)
        # overlapping (its two rows are one): not dense, though its storage is its size
        strided = torch.cuda_tensor(4 * MiB, 1.0).as_strided((2, MiB // 2), (1, 1))
        big = torch.cuda_tensor(8 * MiB, 1.0)
        part = big.view((MiB // 4,))  # a view of a larger storage
        frozen = torch.cuda_tensor(4 * MiB, 1.0, leaf=True)
        frozen.__class__ = torch.nn.Parameter
        for t in (param, small, strided, part, frozen):
            self.assertIs(o.pack(t), t)
        torch.capturing = True
        t = torch.cuda_tensor(4 * MiB, 1.0)
        self.assertIs(o.pack(t), t)
        self.assertEqual(o.totals["offloaded_tensors"], 0)

    def test_dense_tensors_in_another_order_are_offloaded_with_their_strides(self):
        torch, o, _ = make(GiB)
        # N, C, H, W = 8, 64, 32, 16 in channels_last: 1 MiB of float32, dense, not contiguous
        shape, stride = (8, 64, 32, 16), (64 * 32 * 16, 1, 16 * 64, 64)
        self.assertTrue(off.dense(shape, stride))
        self.assertFalse(off.dense(shape, (64 * 32 * 16, 1, 16 * 64, 32)))  # a gap
        self.assertFalse(off.dense((2, 4), (1, 1)))  # overlapping
        self.assertTrue(off.dense((1, 4, 1), (99, 1, 7)))  # sizes of 1 carry any stride
        t = torch.cuda_tensor(MiB, 3.0).as_strided(shape, stride)
        self.assertFalse(t.is_contiguous())
        p = o.pack(t)
        self.assertIsInstance(p, off._Record)
        self.assertEqual(p.host.stride(), stride)  # one plain copy: the same layout on host
        self.assertEqual(torch.log, [("d2h", MiB)])
        self.assertEqual(o.totals["strided_bytes"], MiB)
        o._drain(block=True)
        back = o.unpack(p)
        self.assertEqual(back.stride(), stride)
        self.assertEqual(back.shape, shape)
        self.assertEqual(back.values()[:8], t.values()[:8])

    def test_budget_stops_the_offload(self):
        torch, o, _ = make(8 * MiB)
        ts = [torch.cuda_tensor(4 * MiB, 1.0) for _ in range(4)]
        packed = [o.pack(t) for t in ts]
        self.assertEqual(sum(p is not t for p, t in zip(packed, ts)), 2)
        self.assertEqual(o.step_offloadable, 16 * MiB)

    def test_copies_done_after_the_budget_is_spent_let_their_tensors_go_at_the_next_pack(self):
        # the pass's budget is spent with two copies out still in flight;
        # once they are done, the next pack lets their device tensors go,
        # whether it offloads, stays on the device or is not a candidate,
        # so they are not held through the rest of the forward pass (its
        # peak) until the backward pass starts
        for later in ("candidate", "small"):
            torch, o, _ = make(8 * MiB)
            torch.copies_done = False
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(2)]
            packed = [o.pack(t) for t in ts]
            self.assertEqual(o.pending_bytes, 8 * MiB)
            torch.copies_done = True
            t = torch.cuda_tensor(4 * MiB if later == "candidate" else 256 * 1024, 9.0)
            self.assertIs(o.pack(t), t)  # past the budget, or too small: stays
            self.assertEqual((o.pending, o.pending_bytes), ([], 0), later)
            self.assertEqual(o.totals["waits_out"], 0)  # no CPU wait for it
            for k in (1, 0):
                self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])

    def test_a_tensor_saved_twice_is_copied_once(self):
        torch, o, _ = make(GiB)
        t = torch.cuda_tensor(4 * MiB, 3.0)
        a, b = o.pack(t), o.pack(t)
        self.assertIs(a, b)
        self.assertEqual(sum(1 for k, _ in torch.log if k == "d2h"), 1)

    def test_a_tensor_saved_twice_is_one_candidate_offloaded_or_not(self):
        torch, o, _ = make(4 * MiB)
        a, b, c = (torch.cuda_tensor(4 * MiB, 1.0) for _ in range(3))
        self.assertIsNot(o.pack(a), a)
        self.assertIs(o.pack(b), b)  # the budget is spent: b stays on the device
        self.assertIs(o.pack(b), b)
        self.assertIs(o.pack(c), c)
        self.assertEqual((o.step_cands, o.step_offloadable), (3, 12 * MiB))

    def test_a_tensor_saved_twice_is_fetched_once_for_both_consumers(self):
        torch, o, _ = make(GiB)
        t = torch.cuda_tensor(4 * MiB, 3.0)
        a = o.pack(t)
        o.pack(t)
        first = o.unpack(a)
        torch.log.clear()
        second = o.unpack(a)
        self.assertIs(second, first)
        self.assertEqual(torch.log, [])
        self.assertIsNone(a.dev)  # the last consumer has it: the record lets go

    def test_a_later_tensor_at_a_freed_address_is_not_taken_for_it(self):
        torch, o, _ = make(GiB)
        t = torch.cuda_tensor(4 * MiB, 1.0)
        a = o.pack(t)
        ptr = t.data_ptr()
        del t
        o._drain(block=True)  # the copy is done: the offload drops its reference
        gc.collect()
        u = torch.cuda_tensor(4 * MiB, 100.0, ptr=ptr)
        b = o.pack(u)
        self.assertIsNot(a, b)
        self.assertEqual(o.unpack(b).values()[:8], u.values()[:8])

    def test_backward_order_is_fetched_ahead_within_the_window(self):
        torch, o, state = make(GiB)
        o.budget.window_in = 8 * MiB
        ts, packed = offloaded(torch, o, 6)
        torch.log.clear()
        o.unpack(packed[5])  # not fetched yet: a late fetch, then two ahead
        self.assertEqual(torch.log[0], ("h2d-late", 4 * MiB))
        self.assertEqual([k for k, _ in torch.log[1:]], ["h2d", "h2d"])
        self.assertIsNotNone(packed[4].dev)
        self.assertIsNotNone(packed[3].dev)
        self.assertIsNone(packed[2].dev)
        torch.log.clear()
        for k in (4, 3, 2, 1, 0):
            self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
        self.assertNotIn("h2d-late", [k for k, _ in torch.log])
        self.assertEqual(o.step_late, 4 * MiB)
        self.assertEqual(o.step_late_no_room, 0)  # room there was: 5 had not been fetched yet

    def test_records_larger_than_the_window_come_ahead_one_or_two_at_a_time(self):
        # a window smaller than one record: by default one record is held
        # ahead; with ahead_min 2 the next one's copy back is queued while
        # the one before waits for its consumer (double buffering), and a
        # third waits for the first to be handed out
        for ahead_min, held in ((1, [4]), (2, [3, 4])):
            torch, o, _ = make(GiB)
            o.budget.window_in = 2 * MiB
            o.ahead_min = ahead_min
            ts, packed = offloaded(torch, o, 6)
            o.unpack(packed[5])  # late: the fetch ahead starts behind it
            self.assertEqual([k for k in range(6) if packed[k].dev is not None], held)
            self.assertEqual(o.fetched_count, ahead_min)
            self.assertEqual(o.fetched_bytes, ahead_min * 4 * MiB)
            self.assertGreater(o.step_stop_window, 0)
            torch.log.clear()
            for k in (4, 3, 2, 1, 0):
                self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
                self.assertLessEqual(o.fetched_count, ahead_min)
            self.assertNotIn("h2d-late", [k for k, _ in torch.log])
            self.assertEqual((o.fetched_bytes, o.fetched_count), (0, 0))
            self.assertEqual(o.step_late, 4 * MiB)

    def test_double_buffering_stays_within_the_room(self):
        # ahead_min lifts the window, not the room: with room under the
        # target for one record only, one comes ahead
        torch, o, state = make(GiB)
        o.budget.window_in = 2 * MiB
        o.ahead_min = 2
        ts, packed = offloaded(torch, o, 4)
        o.budget.target = lambda lim: state["used"] + 4 * MiB
        o.unpack(packed[3])
        self.assertEqual(o.fetched_count, 1)
        self.assertGreater(o.step_stop_room, 0)

    def test_a_record_unpacked_out_of_order_leaves_the_others_to_be_fetched_ahead(self):
        torch, o, _ = make(GiB)
        o.budget.window_in = 4 * MiB
        ts, packed = offloaded(torch, o, 6)
        o.unpack(packed[5])             # late; 4 comes ahead (the window holds one)
        o.unpack(packed[2])             # a branch reads 2 before 4 and 3: late
        torch.log.clear()
        for k in (4, 3, 1, 0):
            self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
        self.assertNotIn("h2d-late", [k for k, _ in torch.log])
        self.assertEqual(o.step_late, 8 * MiB)  # 5 and 2 only
        self.assertEqual(o.fetched_bytes, 0)

    def test_each_pass_of_gradient_accumulation_has_its_budget_and_its_fetch_ahead(self):
        torch, o, _ = make(8 * MiB)
        o.budget.window_in = 8 * MiB
        for micro in range(2):  # two forward and backward passes, one step
            ts, packed = offloaded(torch, o, 3)
            self.assertEqual([p is t for p, t in zip(packed, ts)], [False, False, True],
                             "pass %d: the budget (8 MiB) is per pass" % micro)
            torch.log.clear()
            for k in (2, 1, 0):
                self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
            self.assertEqual([k for k, _ in torch.log], ["h2d", "h2d"],
                             "pass %d: 1 and 0 fetched ahead at the first unpack" % micro)
        self.assertEqual((o.step_offloaded, o.step_late), (16 * MiB, 0))
        self.assertEqual(o.max_pass_offloadable, 12 * MiB)

    def test_no_fetch_ahead_without_room_under_the_limit(self):
        torch, o, state = make(GiB, used=10 * GiB - 6 * MiB, limit=10 * GiB)
        ts, packed = offloaded(torch, o, 3)
        torch.log.clear()
        o.unpack(packed[2])
        self.assertEqual([k for k, _ in torch.log], ["h2d-late"])
        self.assertEqual(o.step_late_no_room, 4 * MiB)
        state["used"] = GiB
        o.unpack(packed[1])  # room now: 0 comes ahead
        self.assertIsNotNone(packed[0].dev)

    def test_inside_a_graph_capture_nothing_is_fetched_ahead(self):
        torch, o, _ = make(GiB)
        ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(3)]
        packed = [o.pack(t) for t in ts]
        torch.capturing = True
        torch.log.clear()
        back = o.unpack(packed[2])
        self.assertEqual(back.values()[:8], ts[2].values()[:8])
        self.assertEqual(torch.log, [("h2d-late", 4 * MiB)])  # on the capturing stream only
        self.assertIs(o.unpack(ts[0]), ts[0])
        self.assertEqual(len(torch.log), 1)
        self.assertIsNone(packed[1].dev)

    def test_a_cut_between_steps_offloads_from_the_first_step_under_it(self):
        def run(new_limit, start_at_cut=True):
            left = []
            torch, o, state = make(0, limit=64 * GiB, step_naive=left.append)
            o.start_at_cut = start_at_cut
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
            self.assertTrue(all(o.pack(t) is t for t in ts))  # fits: nothing to do
            o.step_end(lambda dev: (64 * GiB, 8 * GiB, 0))     # its maximum: 8 GiB
            self.assertEqual(o.budget.bytes, 0)
            state["limit"] = new_limit  # cut between steps (set_limit, not a step end)
            cpu = torch.Tensor((MiB,), torch.float32, off_test_cpu)
            self.assertIs(o.pack(cpu), cpu)  # a CPU tensor saved first: looked past
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
            packed = [o.pack(t) for t in ts]
            o.left = left
            return torch, o, sum(p is not t for p, t in zip(packed, ts))
        torch, o, n = run(6 * GiB)
        self.assertEqual(n, 4)  # offloaded in the first step under the cut
        self.assertEqual(o.left, [0])  # and libvmem told to leave the step's plan, once
        self.assertEqual(o.budget.bytes, 8 * GiB - o.budget.target(6 * GiB))
        self.assertEqual(o.budget.window_out, 6 * GiB // 32)  # the new limit's windows
        self.assertEqual([k for k, _ in torch.log], ["d2h"] * 4)
        _, o, n = run(10 * GiB)  # cut, but above the last step's demand
        self.assertEqual((n, o.budget.bytes, o.left), (0, 0, []))
        _, o, n = run(6 * GiB, start_at_cut=False)  # the way before: a step later
        self.assertEqual((n, o.budget.bytes, o.left), (0, 0, []))

    def test_a_cut_recomputation_covers_starts_no_budget_and_the_rest_is_offloaded(self):
        def run(relief):
            left = []
            torch, o, state = make(0, limit=64 * GiB, step_naive=left.append)
            o.left = left
            asked = []

            def rel(limit):
                asked.append(limit)
                return relief(limit)
            o.relief = rel
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
            self.assertTrue(all(o.pack(t) is t for t in ts))
            o.step_end(lambda dev: (64 * GiB, 8 * GiB, 0))  # its maximum: 8 GiB
            state["limit"] = 6 * GiB
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
            packed = [o.pack(t) for t in ts]
            return o, asked, sum(p is not t for p, t in zip(packed, ts))
        # recomputation takes 3 GiB off an 8 GiB step: it fits under 6 GiB, nothing starts
        o, asked, n = run(lambda limit: 3 * GiB)
        self.assertEqual((n, o.budget.bytes, asked), (0, 0, [6 * GiB]))
        self.assertEqual(o.left, [0])  # the step's plan (from before the cut) is left all the same
        # 1 GiB off: the budget starts from 7 GiB, not 8
        o, _, n = run(lambda limit: GiB)
        self.assertEqual((n, o.left), (4, [0]))
        self.assertEqual(o.budget.bytes, 7 * GiB - o.budget.target(6 * GiB))
        # more than the demand is taken as all of it; a raising relief is dropped, not raised
        o, _, n = run(lambda limit: 64 * GiB)
        self.assertEqual((n, o.budget.bytes), (0, 0))

        def boom(limit):
            raise RuntimeError("stand-in")
        o, _, n = run(boom)
        self.assertEqual(n, 4)
        self.assertIsNone(o.relief)
        self.assertEqual(o.budget.bytes, 8 * GiB - o.budget.target(6 * GiB))

    def test_a_step_end_learns_less_what_recomputation_will_take_off_next(self):
        def run(relief_next):
            torch, o, state = make(0, limit=6 * GiB)
            asked = []

            def rel(limit):
                asked.append(limit)
                return relief_next(limit)
            o.relief_next = rel
            # a cut step whose blocks ran plain: 6 GiB on the device and 2 on host
            o.step_end(lambda dev: (6 * GiB, 6 * GiB, 2 * GiB))
            return o, asked
        o, asked = run(lambda limit: 0)
        full = 8 * GiB - o.budget.target(6 * GiB)
        self.assertEqual((o.budget.bytes, asked, o.last_step["relief"]), (full, [6 * GiB], 0))
        o, _ = run(lambda limit: GiB)
        self.assertEqual((o.budget.bytes, o.last_step["relief"]), (full - GiB, GiB))
        o, _ = run(lambda limit: 3 * GiB)  # recomputation covers the cut: no budget
        self.assertEqual(o.budget.bytes, 0)

        def boom(limit):
            raise RuntimeError("stand-in")
        o, _ = run(boom)  # dropped, and the budget learned as without it
        self.assertIsNone(o.relief_next)
        self.assertEqual(o.budget.bytes, full)

    def test_pinned_buffers_are_reused_by_the_next_step(self):
        torch, o, state = make(GiB)
        cut_step(torch, o, state, [4 * MiB] * 4)
        first = torch.pinned
        self.assertEqual(first, 16 * MiB)
        cut_step(torch, o, state, [4 * MiB] * 4)
        self.assertEqual(torch.pinned, first)
        self.assertEqual(o.last_step["host_pinned_new"], 0)
        # the cut ends (the limit rises): a step with nothing to offload
        # gives the buffers back
        emptied = []
        torch._C = type("C", (), {"_host_emptyCache": staticmethod(lambda: emptied.append(1))})
        o.budget.bytes = 0
        o.step_end(lambda dev: (RAISED, GiB, 0))
        self.assertEqual(o.pool.held, 0)
        self.assertEqual(emptied, [1])

    def test_pinned_buffers_outlive_light_steps_under_the_same_limit(self):
        # a job whose steps differ has steps that offload nothing under the
        # cut: the buffers stay for keep_idle_steps - 1 of them in a row,
        # and go at the next (or at once where the limit rose)
        torch, o, state = make(GiB)
        cut_step(torch, o, state, [4 * MiB] * 4)
        held = o.pool.held
        self.assertEqual(held, 16 * MiB)
        o.budget.bytes = 0
        for k in range(o.keep_idle_steps - 1):
            o.step_end(lambda dev: (state["limit"], GiB, 0))
            self.assertEqual(o.pool.held, held, "light step %d let the buffers go" % k)
        o.budget.bytes = GiB  # a heavier step offloads again: the count starts over
        cut_step(torch, o, state, [4 * MiB] * 4)
        self.assertEqual((o.pool.held, o.last_step["host_pinned_new"]), (held, 0))
        o.budget.bytes = 0
        for k in range(o.keep_idle_steps - 1):
            o.step_end(lambda dev: (state["limit"], GiB, 0))
        self.assertEqual(o.pool.held, held)
        o.step_end(lambda dev: (state["limit"], GiB, 0))
        self.assertEqual(o.pool.held, 0, "let go after keep_idle_steps light steps")
        self.assertEqual(o.last_step["cleared"], held)

    def test_a_free_buffer_up_to_twice_the_size_serves_a_smaller_tensor(self):
        torch, o, state = make(GiB)
        cut_step(torch, o, state, [4 * MiB] * 2)
        self.assertEqual((o.pool.held, torch.pinned), (8 * MiB, 8 * MiB))
        # smaller tensors, as in a step of a shorter sequence: the buffers
        # serve them, nothing new is pinned, and they go back whole
        cut_step(torch, o, state, [3 * MiB, 2 * MiB])
        self.assertEqual(o.last_step["host_pinned_new"], 0)
        self.assertEqual((o.pool.held, torch.pinned), (8 * MiB, 8 * MiB))
        self.assertEqual(sorted(o.pool.free), [4 * MiB])
        self.assertEqual(len(o.pool.free[4 * MiB]), 2)
        # values and shape come back through a part of a larger buffer
        ts = [torch.cuda_tensor(3 * MiB, 7.0), torch.cuda_tensor(2 * MiB, 9.0)]
        packed = [o.pack(t) for t in ts]
        self.assertTrue(all(p is not t for p, t in zip(packed, ts)))
        o._drain(block=True)
        for p, t in reversed(list(zip(packed, ts))):
            back = o.unpack(p)
            self.assertEqual((back.values()[:8], back.shape), (t.values()[:8], t.shape))
        del ts, packed, p, t, back
        o.step_end(lambda dev: (state["limit"], 30 * GiB, GiB))
        gc.collect()
        self.assertEqual((o.pool.held, len(o.pool.free[4 * MiB])), (8 * MiB, 2))
        # a tensor of less than half a free buffer gets one of its own
        cut_step(torch, o, state, [1 * MiB])
        self.assertEqual(o.last_step["host_pinned_new"], 1 * MiB)
        self.assertEqual(sorted(o.pool.free), [1 * MiB, 4 * MiB])

    def test_each_step_shape_keeps_its_own_budget(self):
        # steps of two shapes (sequence lengths) under one limit: a heavy
        # one that does not fit and a light one that fits with room to
        # spare; the heavy step's budget must not be the one the light step
        # lowered
        def starts_with(by_shape):
            torch, o, state = make(0, limit=20 * GiB)
            o.by_shape = by_shape
            heavy = lambda: [torch.cuda_tensor(64 * MiB, float(k)) for k in range(160)]
            light = lambda: [torch.cuda_tensor(16 * MiB, float(k)) for k in range(8)]

            def step(ts, dmax, hmax):
                packed = [o.pack(t) for t in ts]
                first = o.budget.bytes  # in force once the step's first tensor is seen
                del ts
                o._drain(block=True)
                for p in reversed(packed):
                    o.unpack(p)
                del packed
                o.step_end(lambda dev: (state["limit"], dmax, hmax))
                gc.collect()
                return first

            o.budget.bytes, o.budget.limit = 4 * GiB, 20 * GiB
            step(heavy(), 22 * GiB, GiB)            # did not fit: the budget rises
            heavy_budget = o.budget.bytes
            step(light(), 4 * GiB, 0)               # fits with room: it falls
            step(light(), 4 * GiB, 0)
            light_budget = o.budget.bytes
            self.assertLess(light_budget, heavy_budget)
            self.assertEqual(o.any_budget(20 * GiB), by_shape)  # the heavy shape's wants the hooks
            return step(heavy(), 22 * GiB, GiB), heavy_budget, light_budget, o

        first, heavy_budget, light_budget, o = starts_with(True)
        self.assertEqual(first, heavy_budget)
        self.assertEqual(o.last_step["shapes"], 2)
        first, _, light_budget, o = starts_with(False)
        self.assertEqual(first, light_budget)  # one budget (the default): the light steps'
        self.assertEqual(o.last_step["shapes"], 0)

    def test_a_shapes_budget_follows_a_raise_and_the_hooks_go(self):
        o, ag = switched()
        o.by_shape = True
        torch = o.torch
        o.budget.bytes, o.budget.limit = 2 * GiB, 10 * GiB
        o.pack(torch.cuda_tensor(64 * MiB, 1.0))   # shape A: 2 GiB
        o._use_shape(("B",))                       # another shape, from A's budget
        o.budget.bytes = 0
        self.assertTrue(o.any_budget(10 * GiB))    # A's keeps the hooks wanted
        self.assertTrue(o.update_hooks(10 * GiB))
        self.assertFalse(o.any_budget(13 * GiB))   # raised by more than A's budget
        self.assertFalse(o.update_hooks(13 * GiB))
        self.assertEqual(ag.stack, [])

    class Cudart:
        """cudaHostRegister / cudaHostUnregister, recorded; err: what
        registering returns (0: success)."""
        def __init__(self, torch, err=0):
            self.torch, self.err = torch, err
            self.reg, self.unreg, self.threads = {}, [], set()

        def cudaHostRegister(self, ptr, length, flags):
            if not self.err:
                self.reg[ptr] = length
            return self.err

        def cudaHostUnregister(self, ptr):
            import threading
            self.unreg.append((ptr, self.torch.syncs))
            self.threads.add(threading.get_ident())
            return 0

    def _cut_steps(self, err, background=False):
        torch, o, state = make(GiB)
        o.pool.background = background
        rt = self.Cudart(torch, err)
        torch.cuda.cudart = lambda: rt
        for _ in range(2):
            cut_step(torch, o, state, [4 * MiB + 100 * k for k in range(4)])
        emptied = []
        torch._C = type("C", (), {"_host_emptyCache": staticmethod(lambda: emptied.append(1))})
        syncs = torch.syncs
        o.budget.bytes = 0
        o.step_end(lambda dev: (RAISED, GiB, 0))  # the cut ends
        if o.pool.releaser is not None:
            o.pool.releaser.join()
        return torch, o, rt, emptied, syncs

    def test_the_buffers_are_let_go_on_a_thread_of_their_own(self):
        import threading
        _, _, rt, _, _ = self._cut_steps(0, background=True)
        self.assertEqual(len(rt.unreg), 4)
        self.assertNotIn(threading.get_ident(), rt.threads)  # not in the step end
        _, o, rt, _, _ = self._cut_steps(0)  # the default: in the step end
        self.assertEqual((len(rt.unreg), rt.threads), (4, {threading.get_ident()}))
        self.assertIsNone(o.pool.releaser)

    def test_pinned_buffers_are_registered_whole_pages_and_unregistered_when_the_cut_ends(self):
        torch, o, rt, emptied, syncs = self._cut_steps(0)
        # four buffers, registered once (the second step reused them), each
        # on whole pages of its own: page-aligned, its size rounded up to pages
        self.assertEqual(len(rt.reg), 4)
        sizes = sorted(4 * MiB + 100 * k for k in range(4))
        self.assertEqual(sorted(rt.reg.values()), [(n + 4095) // 4096 * 4096 for n in sizes])
        self.assertTrue(all(ptr % 4096 == 0 for ptr in rt.reg))
        self.assertEqual(torch.pinned, 0)  # nothing from PyTorch's pinned allocator
        self.assertGreaterEqual(torch.pageable, sum(rt.reg.values()))
        # the cut's end unregisters every one, after waiting for the copies
        # back that read them, and has no PyTorch cache to empty
        self.assertEqual(sorted(p for p, _ in rt.unreg), sorted(rt.reg))
        self.assertTrue(all(at > syncs for _, at in rt.unreg))
        self.assertEqual(o.pool.held, 0)
        self.assertEqual(o.pool.registered, {})
        self.assertEqual(emptied, [])

    def test_registered_buffers_are_anonymous_mappings_unmapped_when_the_cut_ends(self):
        import ctypes
        import mmap as mmap_mod
        torch, o, state = make(GiB)
        rt = self.Cudart(torch)
        torch.cuda.cudart = lambda: rt
        maps = []  # weak references to every mapping a buffer was made from

        def frombuffer(buf, dtype=None, count=-1):
            self.assertIsInstance(buf, mmap_mod.mmap)
            maps.append(weakref.ref(buf))
            ptr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            t = torch.Tensor((count,), dtype, Device("cpu"), ptr=ptr)
            t.keep = buf  # as torch.frombuffer's tensor keeps its buffer
            return t
        torch.frombuffer = frombuffer
        o.pool.anon = True  # a study knob, off by default
        sizes = [4 * MiB + 100 * k for k in range(4)]
        for _ in range(2):
            cut_step(torch, o, state, sizes)
        # four mappings (the second step reused them), each registered whole
        # at its page-aligned start; no PyTorch tensor under any of them
        self.assertEqual(len(maps), 4)
        self.assertEqual(sorted(rt.reg.values()), [(n + 4095) // 4096 * 4096 for n in sizes])
        self.assertTrue(all(ptr % 4096 == 0 for ptr in rt.reg))
        self.assertEqual((torch.pageable, torch.pinned), (0, 0))
        self.assertTrue(all(m() is not None for m in maps))
        o.budget.bytes = 0
        o.step_end(lambda dev: (RAISED, GiB, 0))  # the cut ends
        # unregistered, then unmapped within the step end: no mapping is left
        self.assertEqual(sorted(p for p, _ in rt.unreg), sorted(rt.reg))
        self.assertEqual([m() for m in maps], [None] * 4)
        self.assertEqual((o.pool.held, o.pool.maps), (0, {}))
        # the default: PyTorch's CPU tensors
        o.pool.anon = False
        o.budget.bytes = GiB
        cut_step(torch, o, state, sizes[:1])
        self.assertEqual((len(maps), torch.pageable > 0), (4, True))

    def test_the_heap_is_trimmed_once_the_buffers_are_let_go(self):
        trims = []

        class Libc:
            def malloc_trim(self, pad):
                trims.append((pad, len(rt.unreg)))
                return 1
        real = off.ctypes.CDLL
        off.ctypes.CDLL = lambda name: Libc()
        try:
            torch, o, state = make(GiB)
            rt = self.Cudart(torch)
            torch.cuda.cudart = lambda: rt
            for _ in range(2):
                cut_step(torch, o, state, [4 * MiB + 100 * k for k in range(4)])
            self.assertEqual(trims, [])  # nothing let go while cut
            o.budget.bytes = 0
            o.step_end(lambda dev: (RAISED, GiB, 0))  # the cut ends
            self.assertEqual(trims, [(0, 4)])  # once, after all four were unregistered
            o.pool.trim = False  # the way before: glibc gives them back when it will
            o.budget.bytes = GiB
            cut_step(torch, o, state, [4 * MiB])
            o.budget.bytes = 0
            o.step_end(lambda dev: (RAISED, GiB, 0))
            self.assertEqual((trims, len(rt.unreg)), ([(0, 4)], 5))
        finally:
            off.ctypes.CDLL = real

    def test_huge_advises_each_new_buffers_whole_2mib_pages_before_it_is_registered(self):
        calls = []

        class Libc:
            def __init__(self):
                self.madvise = self.Madvise()

            class Madvise:
                argtypes = None

                def __call__(self, addr, length, advice):
                    calls.append((addr, length, advice, len(rt.reg)))
                    return 0

            def malloc_trim(self, pad):
                return 1
        real = off.ctypes.CDLL
        off.ctypes.CDLL = lambda name, **kw: Libc()
        try:
            torch, o, state = make(GiB)
            rt = self.Cudart(torch)
            torch.cuda.cudart = lambda: rt
            sizes = [6 * MiB + 100 * k for k in range(4)]
            cut_step(torch, o, state, sizes)
            self.assertEqual(calls, [])  # off by default
            o.budget.bytes = 0
            o.step_end(lambda dev: (RAISED, GiB, 0))  # the cut ends: buffers let go
            o.pool.huge = True
            o.budget.bytes = GiB
            cut_step(torch, o, state, sizes)
            self.assertEqual(len(calls), 4)
            h = 2 * MiB
            for addr, length, advice, registered in calls:
                self.assertEqual(advice, 14)  # MADV_HUGEPAGE
                self.assertEqual((addr % h, length % h), (0, 0))
                self.assertGreaterEqual(length, 4 * MiB)  # the whole pages inside 6 MiB
                # inside a buffer registered right after
                self.assertTrue(any(p <= addr and addr + length <= p + n for p, n in rt.reg.items()))
            self.assertEqual([c[3] for c in calls], [4, 5, 6, 7])  # each before its registration
            self.assertEqual(o.pool.huge_advised, sum(c[1] for c in calls))
        finally:
            off.ctypes.CDLL = real

    def test_a_refused_registration_falls_back_to_pytorchs_pinned_memory(self):
        torch, o, rt, emptied, _ = self._cut_steps(2)  # e.g. cudaErrorMemoryAllocation
        self.assertEqual(rt.reg, {})
        self.assertEqual(torch.pinned, sum(4 * MiB + 100 * k for k in range(4)))
        self.assertEqual(o.pool.register_failures, 4)
        self.assertEqual(rt.unreg, [])
        self.assertEqual(emptied, [1])  # PyTorch's cached blocks given back
        self.assertEqual(o.pool.held, 0)

    def test_a_tensor_unpacked_before_its_copy_out_is_done_comes_back_without_a_copy(self):
        torch, o, state = make(GiB)
        o.gpu_pace = False  # the CPU waits, and judges the skip by its query
        o.budget.window_out = 8 * MiB
        torch.copies_done = False  # the GPU is behind: the copies out are in flight
        ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
        packed = [o.pack(t) for t in ts]
        self.assertEqual(len(o.pending), 2)  # the window held the last two
        torch.log.clear()
        self.assertIs(o.unpack(packed[3]), ts[3])  # its own device tensor, no copy back
        self.assertIsNotNone(packed[2].dev)        # the prefetch took 2 back the same way
        self.assertIs(o.unpack(packed[2]), ts[2])
        # only 1 and 0, whose copies out were done and let go, came back by copies
        self.assertEqual(torch.log, [("h2d", 4 * MiB), ("h2d", 4 * MiB)])
        self.assertEqual(o.step_reclaimed, 8 * MiB)
        self.assertEqual(o.pending_bytes, 0)
        torch.copies_done = True
        for k in (1, 0):
            self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
        self.assertEqual((o.step_late, o.step_prefetched), (0, 8 * MiB))
        del packed, ts
        o.step_end(lambda dev: (state["limit"], 30 * GiB, GiB))
        gc.collect()
        # the next step does not offload those two candidates (same numbers and sizes)
        torch.log.clear()
        ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
        packed = [o.pack(t) for t in ts]
        self.assertEqual([p is t for p, t in zip(packed, ts)], [False, False, True, True])
        self.assertEqual([k for k, _ in torch.log], ["d2h", "d2h"])
        self.assertEqual(o.step_skipped, 8 * MiB)
        self.assertEqual(o.step_offloadable, 8 * MiB)
        # a candidate of another size at a skipped number is offloaded
        o.step_end(lambda dev: (state["limit"], 30 * GiB, GiB))
        o.budget.bytes = GiB  # (the step end capped it at the 8 MiB offloadable)
        t2 = [torch.cuda_tensor(4 * MiB, 1.0), torch.cuda_tensor(4 * MiB, 1.0),
              torch.cuda_tensor(2 * MiB, 1.0)]
        self.assertEqual([o.pack(t) is t for t in t2], [False, False, False])
        # the cut ends: the skips are forgotten
        o.budget.bytes = 0
        o.step_end(lambda dev: (RAISED, GiB, 0))
        o.step_end(lambda dev: (RAISED, GiB, 0))
        self.assertEqual(o.skip, {})

    def test_a_tensor_handed_back_before_its_copy_out_is_done_is_held_until_it_is(self):
        # autograd lets go of the tensor after its consumer; were its memory
        # free then, the copy out still in flight could read what the next
        # kernel writes there, and a second unpack (retain_graph) would copy
        # that back
        torch, o, _ = make(GiB)
        o.gpu_pace = False
        torch.copies_done = False
        t = torch.cuda_tensor(4 * MiB, 5.0)
        vals = t.values()[:8]
        p = o.pack(t)
        back = o.unpack(p)
        self.assertIs(back, t)  # its own device tensor: no copy back
        ref = weakref.ref(t)
        del t, back
        gc.collect()
        self.assertIsNotNone(ref())  # the copy out still reads it: held
        torch.copies_done = True
        o.unpack(torch.cuda_tensor(256 * 1024, 0.0))  # a hook call lets go of what is done
        gc.collect()
        self.assertIsNone(ref())
        torch.log.clear()
        again = o.unpack(p)  # the second backward pass over the same graph
        self.assertEqual(again.values()[:8], vals)
        self.assertEqual(torch.log, [("h2d-late", 4 * MiB)])
        # with libvmem's record_stream the allocator defers the reuse instead
        torch, o, _ = make(GiB)
        o.gpu_pace = False
        calls = []
        o.record_stream = lambda dev, ptr, stream: calls.append(ptr) or True
        torch.copies_done = False
        t = torch.cuda_tensor(4 * MiB, 5.0)
        p = o.pack(t)
        self.assertIs(o.unpack(p), t)
        self.assertEqual((calls, o.guard), ([t.data_ptr()], []))

    def test_a_saved_tensor_modified_in_place_raises_at_unpack_as_autograd_would(self):
        # with hooks installed autograd skips its own version check: the
        # installed hooks make it, for tensors left on the device and offloaded
        for budget in (0, GiB):
            torch, o, _ = make(budget)
            t = torch.cuda_tensor(4 * MiB, 1.0)
            u = torch.cuda_tensor(4 * MiB, 2.0)
            pt, pu = o.hook_pack(t), o.hook_pack(u)
            self.assertIsNot(pt, t)
            self.assertIsInstance(pu, off._Kept if budget == 0 else off._Record)
            o._drain(block=True)
            u._version += 1  # changed in place after it was saved
            self.assertEqual(o.hook_unpack(pt).values()[:8], t.values()[:8])
            with self.assertRaisesRegex(RuntimeError, "modified by an inplace operation"):
                o.hook_unpack(pu)

    def test_pacing_on_the_device_makes_the_compute_stream_wait_not_the_cpu(self):
        for gpu in (False, True):
            torch, o, state = make(GiB)
            o.gpu_pace = gpu
            o.budget.window_out = 8 * MiB
            torch.copies_done = False  # the copies out are in flight
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
            packed = [o.pack(t) for t in ts]
            self.assertEqual(len(o.pending), 2)  # the window let the first two go
            self.assertEqual(o.pending_bytes, 8 * MiB)
            on_compute = [ev for s, ev in torch.waits if s is torch.default]
            if gpu:
                # the compute stream waits for exactly the first two copies out
                self.assertEqual(torch.syncs, 0)
                self.assertEqual(on_compute, [packed[0].out_done, packed[1].out_done])
                self.assertEqual(o.totals["waits_out_gpu"], 2)
            else:
                self.assertEqual(torch.syncs, 2)
                self.assertEqual(on_compute, [])
            # either way the values come back
            torch.copies_done = True
            for k in (3, 2, 1, 0):
                self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])

    def test_with_record_stream_a_tensor_goes_as_soon_as_its_copy_is_queued(self):
        calls = []
        answer = {"ok": True}

        def record(dev, ptr, stream):
            calls.append((dev, ptr, stream))
            return answer["ok"]
        torch, o, state = make(GiB, record_stream=record)
        self.assertFalse(o.early)  # a study knob, off by default
        o.early = True
        o.budget.window_out = 8 * MiB
        torch.copies_done = False  # the copies out are in flight
        ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
        packed = [o.pack(t) for t in ts]
        # no window, no wait: libvmem holds the memory until each copy is done
        self.assertEqual(o.pending, [])
        self.assertEqual([ev for s, ev in torch.waits if s is torch.default], [])
        self.assertEqual(torch.syncs, 0)
        self.assertEqual([c[1] for c in calls], [t.data_ptr() for t in ts])
        self.assertEqual(o.step_early, 16 * MiB)
        # the values come back by copies, each after its copy out
        torch.copies_done = True
        for k in (3, 2, 1, 0):
            self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
        self.assertEqual(o.step_reclaimed, 0)
        # refused by libvmem, or switched off: the window as before
        for ok, early in ((False, True), (True, False)):
            answer["ok"] = ok
            torch, o, state = make(GiB, record_stream=record)
            o.early = early
            o.budget.window_out = 8 * MiB
            torch.copies_done = False
            n = len(calls)
            packed = [o.pack(torch.cuda_tensor(4 * MiB, 1.0)) for _ in range(4)]
            self.assertEqual(len(o.pending), 2)
            self.assertEqual(o.step_early, 0)
            self.assertEqual(len(calls) - n, 4 if early else 0)

    def test_copies_out_by_the_sms_when_asked_and_by_the_copy_engine_otherwise(self):
        calls = []
        answer = {"ok": True}

        def copy_out(dev, dst, src, nbytes, stream):
            calls.append((dst, src, nbytes))
            return answer["ok"]
        torch, o, state = make(GiB, copy_out=copy_out)
        self.assertFalse(o.sm_copy)  # a study knob, off by default
        o.budget.window_out = 64 * MiB
        t = torch.cuda_tensor(4 * MiB, 1.0)
        o.pack(t)
        self.assertEqual(calls, [])
        self.assertEqual(torch.log, [("d2h", 4 * MiB)])
        # on: libvmem's kernel copies it, the copy engine does not
        torch, o, state = make(GiB, copy_out=copy_out)
        o.sm_copy = True
        o.budget.window_out = 64 * MiB
        t = torch.cuda_tensor(4 * MiB, 2.0)
        packed = o.pack(t)
        self.assertEqual(torch.log, [])
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][1:], (t.data_ptr(), 4 * MiB))
        self.assertEqual(o.totals["sm_copied_bytes"], 4 * MiB)
        self.assertEqual(o.records[-1].slot[0].data_ptr(), calls[0][0])
        del packed
        # refused once (no such device support): the copy engine from then on
        answer["ok"] = False
        o.pack(torch.cuda_tensor(4 * MiB, 3.0))
        self.assertFalse(o.sm_copy)
        self.assertEqual(torch.log, [("d2h", 4 * MiB)])
        o.pack(torch.cuda_tensor(4 * MiB, 4.0))
        self.assertEqual(len(calls), 2)
        self.assertEqual(torch.log, [("d2h", 4 * MiB)] * 2)

    def test_paced_on_the_device_skips_are_judged_on_the_gpu_timeline(self):
        # gpu_pace: the CPU's query says the copies are in flight (it runs
        # ahead), but on the GPU's timeline they ended before their
        # consumers: nothing is skipped.  Then copies that end after their
        # consumers (a long lag): skipped, once a step end finds the events
        # done.
        for lag, skipped in ((0, {}), (10 ** 6, {0: 4 * MiB, 1: 4 * MiB})):
            torch, o, state = make(GiB)
            self.assertTrue(o.gpu_pace)  # the default
            o.budget.window_out = 8 * MiB
            torch.copy_lag = lag
            torch.copies_done = False
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(2)]
            packed = [o.pack(t) for t in ts]
            for p in reversed(packed):
                o.unpack(p)
            self.assertEqual(o.next_skip, {})  # not judged by the CPU's query
            self.assertEqual(len(o.judge), 2)
            del ts, packed, p
            o.budget.bytes = GiB
            o.step_end(lambda dev: (state["limit"], 30 * GiB, GiB))
            # the events were not done at that step end: judged at a later one
            self.assertEqual(len(o.judge), 2)
            self.assertEqual(o.skip, {})
            torch.copies_done = True
            o.budget.bytes = GiB
            o.step_end(lambda dev: (state["limit"], 30 * GiB, GiB))
            self.assertEqual(o.judge, [])
            self.assertEqual(o.skip, skipped, "lag %d" % lag)
            # judgements still waiting when the limit changes are forgotten
            torch.copies_done = False
            ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
            packed = [o.pack(t) for t in ts]
            for p in reversed(packed):
                o.unpack(p)
            self.assertTrue(o.judge)
            del ts, packed, p
            o.step_end(lambda dev: (32 * GiB, 30 * GiB, GiB))
            self.assertEqual((o.judge, o.skip), ([], {}))
            gc.collect()

    def test_a_held_tensor_is_taken_back_ahead_only_with_room_and_within_the_window(self):
        torch, o, state = make(GiB, used=10 * GiB - MiB, limit=10 * GiB)
        o.budget.window_out = 8 * MiB
        torch.copies_done = False
        ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(3)]
        packed = [o.pack(t) for t in ts]
        self.assertEqual([e[0] for e in o.pending], [packed[1], packed[2]])
        other = torch.cuda_tensor(4 * MiB, 9.0)
        o.unpack(other)  # a tensor that was not offloaded: the fetch ahead runs
        self.assertIsNone(packed[2].dev)  # no room under the limit: 2 stays held, not taken
        state["used"] = GiB
        o.budget.window_in = 4 * MiB
        o.unpack(other)
        self.assertIs(packed[2].dev, ts[2])  # room now: taken back ahead, no copy
        self.assertIsNone(packed[1].dev)     # the window is full with it
        self.assertEqual((o.fetched_bytes, o.step_reclaimed), (4 * MiB, 4 * MiB))
        torch.copies_done = True  # its copy out finished before its consumer came
        self.assertIs(o.unpack(packed[2]), ts[2])
        self.assertEqual(o.fetched_bytes, 4 * MiB)  # 1 came in its place
        self.assertEqual(o.next_skip, {})  # worth its offload: not skipped next step
        self.assertEqual([k for k, _ in torch.log if k.startswith("h2d")], ["h2d"])

    def bulk_step(self, o, torch, order, n=8, size=64 * MiB):
        """One step of n saved tensors of size, unpacked in order (indices
        into the packed list); returns what pack gave for each."""
        ts = [torch.cuda_tensor(size, float(k)) for k in range(n)]
        packed = [o.pack(t) for t in ts]
        o._drain(block=True)
        for k in order:
            o.unpack(packed[k])
        o.step_end(lambda dev: (2 * GiB, 30 * GiB, GiB))
        return [type(p).__name__ for p in packed]

    def test_tensors_a_backward_consumes_in_bulk_are_skipped_next_step(self):
        # a torch.compile'd model's backward: one node unpacks all its saved
        # tensors, first saved first
        torch, o, _ = make(4 * GiB, limit=2 * GiB)
        o.budget.set_limit(2 * GiB)  # windows of 64 MiB
        o.gpu_pace = False
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.bulk_step(o, torch, range(8))
        self.assertEqual(len(w), 1)
        self.assertIn("compile each block", str(w[0].message))
        # saved after record k and still to come: (7 - k) x 64 MiB; more than
        # the window and more than half of the pass's 512 MiB for k = 0, 1, 2
        self.assertEqual(o.skip, {0: 64 * MiB, 1: 64 * MiB, 2: 64 * MiB})
        self.assertEqual((o.last_step["bulk"], o.totals["bulk_bytes"]), (192 * MiB, 192 * MiB))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = self.bulk_step(o, torch, range(8))
        self.assertEqual(w, [])  # said once
        self.assertEqual(got[:4], ["Tensor"] * 3 + ["_Record"])  # left on the device
        self.assertEqual(o.last_step["skipped"], 192 * MiB)
        for _ in range(6):  # the rest follow, about half of what is offloaded at a time,
            self.bulk_step(o, torch, range(8))  # but for the last two: within the window
        self.assertEqual(sorted(o.skip), [0, 1, 2, 3, 4, 5])
        _, o2, _ = make(4 * GiB, limit=2 * GiB)
        o2.budget.set_limit(2 * GiB)
        o2.gpu_pace = False
        o2.bulk_skip = False
        self.bulk_step(o2, torch, range(8))
        self.assertEqual(o2.skip, {})

    def test_a_learned_order_fetches_blocks_compiled_one_by_one_in_time(self):
        # three blocks of two tensors each, each block's pair unpacked first
        # saved first, the blocks from the last: the reverse of the saving
        # order fetches each block's first tensor after its consumer asked
        order = [4, 5, 2, 3, 0, 1]
        late = {}
        for learn in (False, True):
            torch, o, _ = make(4 * GiB, limit=2 * GiB)
            o.budget.set_limit(2 * GiB)  # the fetch ahead holds one 64 MiB record
            o.gpu_pace = False
            o.bulk_skip = False
            o.learn_order = learn
            for _ in range(2):
                self.bulk_step(o, torch, order, n=6)
            late[learn] = o.last_step["late"]
            if learn:
                self.assertEqual(o.order_last, order)
        # the first unpack is late either way; in the reverse order so are 2 and 0
        self.assertEqual(late, {False: 3 * 64 * MiB, True: 64 * MiB})

    def test_a_graph_dropped_after_the_one_run_backward_does_not_make_bulk(self):
        # eight tensors saved by the forward that backward runs on, then eight
        # by one whose graph the program drops: still to come after each of
        # the first eight at its unpack, but never unpacked
        torch, o, _ = make(4 * GiB, limit=2 * GiB)
        o.budget.set_limit(2 * GiB)
        o.gpu_pace = False
        for _ in range(2):
            self.bulk_step(o, torch, range(7, -1, -1), n=16)
        self.assertEqual((o.skip, o.totals["bulk_bytes"]), ({}, 0))

    def test_a_backward_in_reverse_order_or_by_small_nodes_is_not_bulk(self):
        for order in (range(7, -1, -1),  # eager: the reverse of the saving order
                      [6, 7, 4, 5, 2, 3, 0, 1]):  # nodes that each save two tensors
            torch, o, _ = make(4 * GiB, limit=2 * GiB)
            o.budget.set_limit(2 * GiB)
            o.gpu_pace = False
            for _ in range(2):
                self.bulk_step(o, torch, order)
            self.assertEqual((o.skip, o.totals["bulk_bytes"]), ({}, 0), list(order))

    def test_skips_are_forgotten_when_the_limit_changes(self):
        torch, o, state = make(GiB)
        o.gpu_pace = False  # skips judged by the CPU's query (at once)
        o.budget.window_out = 4 * MiB
        for limit in (state["limit"], state["limit"], 32 * GiB):
            torch.copies_done = False
            ts = [torch.cuda_tensor(4 * MiB, 1.0) for _ in range(2)]
            packed = [o.pack(t) for t in ts]
            for p in reversed(packed):
                o.unpack(p)
            del ts, packed, p
            o.budget.bytes = GiB
            o.step_end(lambda dev: (limit, 30 * GiB, GiB))
            gc.collect()
        # the first step learned to skip candidate 1, the second (its copy
        # out of 0 still in flight at the first unpack) candidate 0 as well;
        # the third ran under another limit: nothing is skipped after it
        self.assertEqual(o.last_step["skipped"], 8 * MiB)
        self.assertEqual(o.skip, {})

    def test_a_step_that_offloaded_nothing_learns_from_its_own_device(self):
        # a rank on GPU 1 offloads nothing until its budget rises, and must
        # learn that from GPU 1's statistics, not GPU 0's
        torch, o, _ = make(0)
        asked = []

        def stats_of(dev):
            asked.append(dev)
            return (10 * GiB, 12 * GiB, 0) if dev == 1 else (1 << 62, 0, 0)
        torch.current_device = 1
        o.step_end(stats_of)
        self.assertEqual(asked, [1])
        self.assertGreater(o.budget.bytes, 0)
        o.step_end(stats_of, device=1)
        self.assertEqual(asked, [1, 1])

    def test_a_raise_within_the_step_turns_the_offload_off_at_once(self):
        torch, o, state = make(4 * GiB, limit=10 * GiB)
        state["limit"] = 40 * GiB
        t = torch.cuda_tensor(4 * MiB, 1.0)
        self.assertIs(o.pack(t), t)
        self.assertEqual(o.budget.bytes, 0)

    def test_pacing_by_room_keeps_copies_in_flight_where_the_last_step_had_room(self):
        limit = 10 * GiB
        torch, o, wm = paced_by_room(limit)
        o.budget.window_out = 4 * MiB
        # step 1 learns the excursions: after hook call 2 the program went
        # 9 GiB above what was in use (the loss, say), elsewhere nowhere
        for most in (GiB, GiB, GiB, 10 * GiB, GiB, GiB):
            wm["most"] = most
            t = torch.cuda_tensor(64 * 1024, 1.0)  # not offloaded: only counted
            self.assertIs(o.pack(t), t)
        self.assertEqual(o.ex, [0, 0, 9 * GiB, 0, 0])
        o.step_end(lambda dev: (limit, 5 * GiB, 0))
        o.budget.bytes = GiB
        self.assertEqual(o.ex_last, [0, 0, 9 * GiB, 0, 0])
        # step 2: copies in flight
        torch.copies_done = False
        ts = [torch.cuda_tensor(4 * MiB, float(k)) for k in range(4)]
        packed = [o.pack(t) for t in ts[:2]]
        # past the window, but the next stretches need no room: no wait
        self.assertEqual((len(o.pending), torch.syncs), (2, 0))
        packed.append(o.pack(ts[2]))  # 9 GiB come next: every copy in flight is waited for
        self.assertEqual((len(o.pending), torch.syncs), (0, 3))
        packed.append(o.pack(ts[3]))
        self.assertEqual((len(o.pending), torch.syncs), (1, 3))
        torch.copies_done = True
        for k in range(3, -1, -1):
            self.assertEqual(o.unpack(packed[k]).values()[:8], ts[k].values()[:8])
        # without the watermark (an older libvmem), the window paces (the
        # CPU waiting: pacing on the device would make the stream wait)
        torch2, o2, _ = make(GiB, used=GiB, limit=limit)
        o2.gpu_pace = False
        o2.pace_room = True
        o2.budget.window_out = 4 * MiB
        torch2.copies_done = False
        for k in range(3):
            o2.pack(torch2.cuda_tensor(4 * MiB, float(k)))
        self.assertEqual((len(o2.pending), torch2.syncs), (1, 2))

    def test_paced_by_room_the_budget_learns_the_maximum_without_the_copies_in_flight(self):
        limit = 10 * GiB
        torch, o, wm = paced_by_room(limit)
        o.ex_last = [0] * 16  # room known everywhere: the copies stay in flight
        torch.copies_done = False
        target = o.budget.target(limit)
        # the forward pass fills the device up to just under the target, 1 GiB
        # of it the copies in flight (each stretch adds what the last saved)
        packed = []
        for k in range(4):
            wm["most"] = target - 100 * MiB - GiB + k * 256 * MiB
            packed.append(o.pack(torch.cuda_tensor(256 * MiB, float(k))))
        wm["most"] = target - 100 * MiB
        self.assertEqual(o.pending_bytes, GiB)
        o.step_end(lambda dev: (limit, target - 100 * MiB, 0))
        # the maximum read as just under the target (which alone keeps the
        # budget), but without the copies it was 1 GiB lower: lowered
        self.assertEqual(o.last_step["drained_max"], target - 100 * MiB - GiB)
        self.assertLess(o.budget.bytes, GiB)
        del packed
        # without pacing by room the same step keeps the budget
        torch2, o2, _ = make(GiB, used=GiB, limit=limit)
        torch2.copies_done = False
        packed2 = [o2.pack(torch2.cuda_tensor(256 * MiB, float(k))) for k in range(4)]
        o2.step_end(lambda dev: (limit, target - 100 * MiB, 0))
        self.assertEqual(o2.budget.bytes, GiB)
        del packed2

    def test_the_forward_maximum_is_read_once_per_backward_pass(self):
        reads = []

        def step_max(dev):
            reads.append(dev)
            return 100 * MiB * len(reads)
        torch, o, _ = make(GiB, step_max=step_max)
        ts, packed = offloaded(torch, o, 2)
        o.unpack(packed[1])
        o.unpack(packed[0])
        self.assertEqual(reads, [0])
        self.assertEqual(o.step_fwd_max, 100 * MiB)
        ts2, packed2 = offloaded(torch, o, 1)  # a second pass (gradient accumulation)
        o.unpack(packed2[0])
        self.assertEqual((reads, o.step_fwd_max), ([0, 0], 200 * MiB))
        o.step_end(lambda dev: (64 * GiB, GiB, 0))
        self.assertEqual((o.last_step["fwd_max"], o.step_fwd_max), (200 * MiB, 0))
        # a step that offloads nothing reads nothing
        o.budget.bytes = 0
        t = torch.cuda_tensor(4 * MiB, 1.0)
        o.unpack(o.pack(t))
        self.assertEqual(len(reads), 2)


class FakeAutograd:
    """torch._C._autograd's default saved tensor hooks: one thread's stack."""

    def __init__(self, with_top=True):
        self.stack = []
        if with_top:
            self._top_saved_tensors_default_hooks = \
                lambda ignore_is_tracing: self.stack[-1] if self.stack else None

    def _push_saved_tensors_default_hooks(self, pack, unpack):
        self.stack.append((pack, unpack))

    def _pop_saved_tensors_default_hooks(self):
        self.stack.pop()


def switched(budget_bytes=0, limit=10 * GiB, ag=None):
    """An Offload with a HookSwitch over a FakeAutograd, switched once as
    install() does; returns (o, ag)."""
    _, o, _ = make(budget_bytes, limit=limit)
    ag = ag or FakeAutograd()
    o.switch = off.HookSwitch(ag, (o.hook_pack, o.hook_unpack))
    o.update_hooks()
    return o, ag


def fits(o, limit=10 * GiB, device_max=6 * GiB):
    o.step_end(lambda dev: (limit, device_max, 0))


class HookSwitchTest(unittest.TestCase):
    def ours(self, o):
        return (o.hook_pack, o.hook_unpack)

    def test_hooks_are_pushed_only_while_the_offload_may_act(self):
        o, ag = switched()
        self.assertEqual(ag.stack, [])  # installed: nothing to offload, nothing pushed
        fits(o)
        self.assertEqual(ag.stack, [])
        o.step_end(lambda dev: (10 * GiB, 9 * GiB, 3 * GiB))  # did not fit: a budget
        self.assertGreater(o.budget.bytes, 0)
        self.assertEqual(ag.stack, [self.ours(o)])
        self.assertTrue(o.last_step["hooks_on"])
        for _ in range(10):  # raised: the budget falls away, and the hooks go with it
            fits(o, limit=40 * GiB, device_max=GiB)
            if not ag.stack:
                break
        self.assertEqual(o.budget.bytes, 0)
        self.assertEqual(ag.stack, [])
        self.assertEqual((o.switch.pushes, o.switch.pops), (1, 1))

    def test_a_cut_below_the_last_steps_demand_pushes_at_once(self):
        o, ag = switched()
        fits(o)  # demand 6 GiB
        self.assertEqual(o.update_hooks(8 * GiB), False)  # above the demand: no cut
        self.assertEqual(ag.stack, [])
        self.assertEqual(o.update_hooks(5 * GiB), True)  # set_limit cut below it
        self.assertEqual(ag.stack, [self.ours(o)])
        o.start_at_cut = False  # the budget would wait for a step end: no hooks before it
        self.assertEqual(o.update_hooks(5 * GiB), False)

    def test_limit_set_reads_the_limit_and_switches(self):
        o, ag = switched()
        fits(o)
        saved = off._off, off._read
        limit = [8 * GiB]
        try:
            off._off = o
            off._read = lambda dev: type("S", (), {"limit": limit[0]})()
            off.limit_set(0)
            self.assertEqual(ag.stack, [])
            limit[0] = 4 * GiB
            off.limit_set(0)
            self.assertEqual(ag.stack, [self.ours(o)])
        finally:
            off._off, off._read = saved

    def test_other_hooks_are_left_as_they_were(self):
        o, ag = switched(budget_bytes=GiB)
        self.assertEqual(ag.stack, [self.ours(o)])
        theirs = (lambda t: t, lambda t: t)
        ag._push_saved_tensors_default_hooks(*theirs)  # e.g. a save_on_cpu context
        o.budget.bytes = 0
        self.assertTrue(o.update_hooks())  # ours are not on top: not popped
        self.assertEqual(ag.stack, [self.ours(o), theirs])
        ag._pop_saved_tensors_default_hooks()
        self.assertFalse(o.update_hooks())
        self.assertEqual(ag.stack, [])
        ag._push_saved_tensors_default_hooks(*theirs)  # pushed while ours were off
        o.budget.bytes = GiB
        self.assertFalse(o.update_hooks())  # not pushed over theirs
        self.assertEqual(ag.stack, [theirs])
        ag._pop_saved_tensors_default_hooks()  # their context ends
        self.assertTrue(o.update_hooks())
        self.assertEqual(ag.stack, [self.ours(o)])

    def test_only_the_installing_thread_switches(self):
        import threading
        o, ag = switched()
        o.budget.bytes = GiB
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(2):
                th = threading.Thread(target=o.update_hooks)
                th.start()
                th.join()
        self.assertEqual(ag.stack, [])
        self.assertEqual(len(w), 1)  # said once
        self.assertIn("VMEM_TORCH_OFFLOAD_HOOKS=always", str(w[0].message))
        o.update_hooks()
        self.assertEqual(ag.stack, [self.ours(o)])

    def test_always_and_a_torch_without_the_top_function_keep_them_pushed(self):
        o, ag = switched(ag=FakeAutograd(with_top=False))
        self.assertEqual(ag.stack, [self.ours(o)])
        fits(o)
        self.assertEqual(ag.stack, [self.ours(o)])
        o, ag = switched()
        o.hooks_always = True
        fits(o)
        self.assertEqual(ag.stack, [self.ours(o)])
        o.switch.remove()  # uninstall
        self.assertEqual(ag.stack, [])

    def test_the_environment_variable(self):
        saved = os.environ.get("VMEM_TORCH_OFFLOAD_HOOKS")
        try:
            got = []
            for v in ("cut", "always", " Always ", "bogus"):
                os.environ["VMEM_TORCH_OFFLOAD_HOOKS"] = v
                try:
                    got.append(off._hooks_always())
                except ValueError:
                    got.append("refused")
            del os.environ["VMEM_TORCH_OFFLOAD_HOOKS"]
            got.append(off._hooks_always())
            self.assertEqual(got, [False, True, True, "refused", False])
        finally:
            if saved is not None:
                os.environ["VMEM_TORCH_OFFLOAD_HOOKS"] = saved
            else:
                os.environ.pop("VMEM_TORCH_OFFLOAD_HOOKS", None)


class RoomAheadTest(unittest.TestCase):
    """The room the rest of a backward pass needs, on its own."""

    @staticmethod
    def run_pass(room, most, fetched=0):
        """One backward pass of len(most) hook calls, the watermark reading
        most[k] at call k; returns ahead() at each call."""
        room.pass_starts()
        seen = []
        for m in most:
            room.hook(m)
            seen.append(room.ahead())
            room.hook_done(fetched)
        return seen

    def test_nothing_is_known_until_two_steps_ran_the_pass_alike(self):
        room = off.RoomAhead()
        self.assertEqual(self.run_pass(room, [9, 5, 7, 2]), [None] * 4)
        room.step_end(True)
        self.assertEqual(self.run_pass(room, [9, 5, 7, 2]), [None] * 4)
        room.step_end(True)
        # the stretch after call k is read at call k + 1: [5, 7, 2]; from call
        # k to the end the most is [7, 7, 2], and past the last stretch nothing
        self.assertEqual(self.run_pass(room, [9, 5, 7, 2]), [7, 7, 2, None])

    def test_the_room_ahead_is_the_most_of_the_last_two_steps_less_what_was_fetched(self):
        room = off.RoomAhead()
        self.run_pass(room, [100, 60, 50, 10], fetched=0)
        room.step_end(True)
        # the same needs, 20 bytes fetched ahead all along: the watermark reads
        # 20 more, the stretches' own bytes are the same; one stretch needs 65
        self.run_pass(room, [120, 80, 85, 30], fetched=20)
        room.step_end(True)
        self.assertEqual(room.suffix, [[65, 65, 10]])

    def test_a_pass_that_changed_or_a_step_without_offload_is_forgotten(self):
        room = off.RoomAhead()
        for _ in range(2):
            self.run_pass(room, [9, 5, 7, 2])
            self.run_pass(room, [4, 4])  # a second pass (gradient accumulation)
            room.step_end(True)
        self.assertEqual(room.suffix, [[7, 7, 2], [4]])
        self.run_pass(room, [9, 5, 7, 2, 1])  # one call more: not alike
        self.run_pass(room, [4, 4])
        room.step_end(True)
        self.assertEqual(room.suffix, [None, [4]])
        self.run_pass(room, [9, 5, 7, 2, 1])
        room.step_end(False)
        self.assertEqual((room.suffix, room.seen), ([], []))


def fetched_by_room(limit, needs, steps, window_in=4 * MiB, fits_at=None):
    """An Offload over a watermark that reads, at each unpack hook call k of
    a step, needs[k] plus the bytes fetched ahead then (the program's own
    bytes in the stretch before that call); runs `steps` steps of 6 tensors
    of 4 MiB offloaded and unpacked in reverse (fits_at: the calls at which
    libvmem's free blocks fit a copy back; None: not asked); returns (o, log of the last
    step's copies back, bytes fetched ahead after each of its calls)."""
    calls = []
    torch, o, state = make(GiB, used=GiB, limit=limit,
                           watermark=lambda dev: (GiB, needs[len(calls) % len(needs)] +
                                                  o.fetched_bytes, limit),
                           fits=None if fits_at is None else
                           lambda dev, n, stream: len(calls) % 6 in fits_at)
    o.fetch_room = True  # a study knob, off by default
    target = o.budget.target(limit)
    for _ in range(steps):
        o.budget.window_in = window_in  # (a step end sets it from the limit)
        ts, packed = offloaded(torch, o, 6)
        torch.log.clear()
        held = []
        for k in range(5, -1, -1):
            self_check = o.unpack(packed[k])
            assert self_check.values()[:8] == ts[k].values()[:8]
            calls.append(k)
            held.append(o.fetched_bytes)
        log = [kind for kind, _ in torch.log if kind.startswith("h2d")]
        del ts, packed, self_check
        o.step_end(lambda dev: (limit, target + MiB, 0))  # the dead band: the budget holds
        gc.collect()
    return o, log, held


class FetchByRoomTest(unittest.TestCase):
    def test_the_fetch_ahead_takes_the_room_the_rest_of_the_pass_leaves(self):
        limit = 10 * GiB
        target = limit - int(limit * 0.03)
        # the program's own bytes after each call: 8 MiB of room under the
        # target for two calls, then 40 MiB
        needs = [GiB, target - 8 * MiB, target - 8 * MiB, target - 40 * MiB,
                 target - 40 * MiB, target - 40 * MiB]
        o, log, held = fetched_by_room(limit, needs, steps=2)
        # the first two steps know nothing: the window (one tensor) ahead
        self.assertEqual(held, [4 * MiB] * 5 + [0])
        self.assertEqual(log, ["h2d-late"] + ["h2d"] * 5)
        o, log, held = fetched_by_room(limit, needs, steps=3)
        # the third: two ahead while the room is 8 MiB, then all of them
        self.assertEqual(held, [8 * MiB, 8 * MiB, 12 * MiB, 8 * MiB, 4 * MiB, 0])
        self.assertEqual(log, ["h2d-late"] + ["h2d"] * 5)
        self.assertEqual(o.last_step["ahead_max"], 12 * MiB)
        self.assertEqual(o.last_step["room_known"], 5)  # not at the last call: nothing after it
        self.assertEqual(o.last_step["bw_hooks"], 6)

    def test_a_fetch_by_room_waits_where_no_free_block_fits_it(self):
        limit = 10 * GiB
        target = limit - int(limit * 0.03)
        needs = [GiB, target - 8 * MiB, target - 8 * MiB, target - 40 * MiB,
                 target - 40 * MiB, target - 40 * MiB]
        # libvmem's free blocks fit a copy back only at call 3
        o, log, held = fetched_by_room(limit, needs, steps=3, fits_at={3})
        self.assertEqual(held, [0, 0, 0, 8 * MiB, 4 * MiB, 0])
        self.assertEqual(log, ["h2d-late"] * 4 + ["h2d"] * 2)
        self.assertEqual(o.last_step["no_fit"], 3)

    def test_no_room_ahead_fetches_only_late(self):
        limit = 10 * GiB
        target = limit - int(limit * 0.03)
        needs = [GiB] + [target - MiB] * 5  # the rest of the pass leaves no room
        o, log, held = fetched_by_room(limit, needs, steps=3)
        self.assertEqual(held, [0] * 6)
        self.assertEqual(log, ["h2d-late"] * 6)

    def test_off_by_default_the_window_fetches_ahead_as_before(self):
        limit = 10 * GiB
        target = limit - int(limit * 0.03)
        needs = [GiB, target - 8 * MiB, target - 8 * MiB, target - 40 * MiB,
                 target - 40 * MiB, target - 40 * MiB]
        calls = []
        torch, o, _ = make(GiB, used=GiB, limit=limit,
                           watermark=lambda dev: (GiB, needs[len(calls) % 6], limit))
        self.assertFalse(o.fetch_room)
        for _ in range(3):
            o.budget.window_in = 4 * MiB
            ts, packed = offloaded(torch, o, 6)
            held = []
            for k in range(5, -1, -1):
                o.unpack(packed[k])
                calls.append(k)
                held.append(o.fetched_bytes)
            del ts, packed
            o.step_end(lambda dev: (limit, target + MiB, 0))
        self.assertEqual(held, [4 * MiB] * 5 + [0])
        self.assertEqual(o.last_step["bw_hooks"], 0)  # the watermark is not read


class ChoiceTest(unittest.TestCase):
    """The measured choice between the first tensors and tensors spread
    over the pass (libvmem_offload.Choice)."""

    def run_steps(self, c, steps, limit=10 * GiB):
        """steps: (seconds of the default, seconds of spread, budget moved);
        each step takes the seconds of the way in force.  Returns the ways."""
        ways = []
        for first, spread, moved in steps:
            ways.append(c.value)
            c.step_end(spread if c.value else first, limit, moved, True)
        return ways

    def test_spread_is_kept_when_measured_faster(self):
        c = off.Choice(settle=2, measure=3)
        ways = self.run_steps(c, [(0.10, 0.08, False)] * 12)
        # the first step under the limit only notes it, 2 settle and 3 are
        # measured in each way, then spread holds
        self.assertEqual(ways, [False] * 6 + [True] * 6)
        self.assertTrue(c.value)
        self.assertEqual(c.decided, (0.10, 0.08))
        self.assertEqual(self.run_steps(c, [(0.10, 0.08, False)] * 3), [True] * 3)

    def test_the_default_is_kept_when_spread_is_slower_or_within_the_margin(self):
        for spread_s in (0.12, 0.099):
            c = off.Choice(settle=2, measure=3, min_gain=0.03)
            ways = self.run_steps(c, [(0.10, spread_s, False)] * 14)
            # the first step under a limit only notes it; then 2 settle
            # and 3 are measured in each way
            self.assertEqual(ways[:6], [False] * 6)
            self.assertEqual(ways[6:11], [True] * 5)  # the trial of spread
            self.assertEqual(ways[11:], [False] * 3)
            self.assertFalse(c.value)

    def test_steps_are_measured_only_once_the_budget_holds(self):
        c = off.Choice(settle=2, measure=3, max_wait=20)
        # two slow steps are measured, then the budget moves: they are
        # dropped, so the default's median is that of the steps after
        steps = [(0.50, 0.08, False)] * 5 + [(0.50, 0.08, True)] + [(0.10, 0.08, False)] * 12
        self.run_steps(c, steps)
        self.assertEqual(c.decided, (0.10, 0.08))

    def test_a_budget_that_keeps_moving_is_measured_after_max_wait(self):
        c = off.Choice(settle=2, measure=3, max_wait=4)
        ways = self.run_steps(c, [(0.10, 0.08, True)] * 16)
        self.assertEqual(ways[:7], [False] * 7)  # 4 steps waited, 3 measured
        self.assertTrue(c.value)

    def test_a_new_limit_or_a_step_without_offload_starts_over(self):
        c = off.Choice(settle=2, measure=3)
        self.run_steps(c, [(0.10, 0.08, False)] * 12)
        self.assertTrue(c.value)
        self.assertFalse(c.step_end(0.1, 5 * GiB, False, True))  # another limit
        self.assertIsNone(c.decided)
        self.run_steps(c, [(0.10, 0.08, False)] * 12, limit=5 * GiB)
        self.assertTrue(c.value)
        self.assertFalse(c.step_end(0.1, 5 * GiB, False, False))  # the cut is over
        self.assertIsNone(c.decided)

    def test_the_offload_takes_spread_from_its_choice_at_each_step_end(self):
        torch, o, _ = make(8 * MiB)  # what two 4 MiB tensors offload: the budget holds
        seen, moved_flags = [], []

        class Fake:
            decided = None

            def step_end(self, seconds, limit, moved, active):
                seen.append((limit, active))
                moved_flags.append(moved)
                return True
        self.assertIsNone(o.choice)  # a study knob, off by default
        o.choice = Fake()
        ts, packed = offloaded(torch, o, 2)
        for p in reversed(packed):
            o.unpack(p)
        o.step_end(lambda dev: (64 * GiB, 63 * GiB, 0))
        self.assertEqual(seen[0], (64 * GiB, True))
        self.assertTrue(o.spread)
        self.assertTrue(o.last_step["spread"])
        # the step pinned new host memory (its first use of the pool): a
        # transient, reported as a moved budget
        self.assertEqual(moved_flags, [True])
        del ts, packed, p  # autograd drops them: their buffers go back to the pool
        ts, packed = offloaded(torch, o, 2)  # the same sizes: the pool's buffers
        for p in reversed(packed):
            o.unpack(p)
        o.step_end(lambda dev: (64 * GiB, 63 * GiB, 0))
        self.assertEqual(moved_flags, [True, False])  # the budget held (dead band)
        self.assertEqual(seen[1], (64 * GiB, True))
        # forced (cut-bench's CUT_OFFLOAD_SPREAD with CUT_OFFLOAD_SPREAD_AUTO=0): left as set
        o.choice = None
        o.spread_auto = False
        o.spread = True
        o.step_end(lambda dev: (64 * GiB, 63 * GiB, 0))
        self.assertTrue(o.spread)


class SpreadAutoTest(unittest.TestCase):
    """spread_auto: the way is set at each step end from the front skew of
    the last step's candidates under the next budget."""

    def test_front_skew(self):
        self.assertAlmostEqual(off.front_skew([4] * 12, 20), 1.0)  # even sizes
        # the first two fill the budget and carry 20/52 of the bytes at 2/12 of the count
        self.assertAlmostEqual(off.front_skew([16, 16] + [2] * 10, 20), (20 / 52) / (2 / 12))
        self.assertLess(off.front_skew([2] * 10 + [16, 16], 20), 1.0)  # the largest come last
        for sizes, budget in (([], 20), ([4] * 12, 0), ([4] * 12, 48), ([4] * 12, 60)):
            self.assertEqual(off.front_skew(sizes, budget), 0.0)  # nothing to choose

    def step(self, torch, o, sizes_mib):
        ts = [torch.cuda_tensor(n * MiB, float(k)) for k, n in enumerate(sizes_mib)]
        packed = [o.pack(t) for t in ts]
        o._drain(block=True)
        for p in reversed(packed):
            o.unpack(p)
        o.step_end(lambda dev: (64 * GiB, 63 * GiB, 0))  # in the dead band: the budget holds
        return packed

    def test_spread_follows_the_skew_of_the_last_step(self):
        torch, o, _ = make(20 * MiB)
        self.assertTrue(o.spread_auto)  # on by default
        o.spread_large = False  # every candidate counts
        first_heavy = [16, 16] + [2] * 10
        self.step(torch, o, first_heavy)
        self.assertEqual(o.budget.bytes, 20 * MiB)
        self.assertAlmostEqual(o.skew, off.front_skew([n * MiB for n in first_heavy], 20 * MiB))
        self.assertTrue(o.spread)
        self.assertTrue(o.last_step["spread"])
        # the next step spreads: candidates after the first two are offloaded too
        packed = self.step(torch, o, first_heavy)
        sent = [k for k, p in enumerate(packed) if isinstance(p, off._Record)]
        self.assertTrue(any(k >= 2 for k in sent), sent)
        self.assertLessEqual(sum(first_heavy[k] for k in sent) * MiB, 20 * MiB + 16 * MiB)
        for sizes in ([4] * 12, [2] * 10 + [16, 16]):  # even, or the largest last
            self.step(torch, o, sizes)
            self.assertFalse(o.spread, sizes)
            self.assertLess(o.skew, off.SKEW_MIN)

    def test_spread_large_leaves_the_small_candidates(self):
        torch, o, _ = make(20 * MiB)
        self.assertTrue(o.spread_large)  # on by default
        sizes = [16, 16] + [2, 6] * 5  # median 6 MiB
        self.step(torch, o, sizes)
        self.assertTrue(o.spread)
        self.assertEqual(o.spread_min, 6 * MiB)
        packed = self.step(torch, o, sizes)
        sent = [k for k, p in enumerate(packed) if isinstance(p, off._Record)]
        self.assertTrue(any(k >= 2 for k in sent), sent)  # still spread
        self.assertFalse([k for k in sent if sizes[k] < 6], sent)  # none of the 2 MiB ones
        self.assertEqual(o.last_step["tensors"], len(sent))
        o.spread_large = False
        packed = self.step(torch, o, sizes)
        sent = [k for k, p in enumerate(packed) if isinstance(p, off._Record)]
        self.assertTrue([k for k in sent if sizes[k] < 6], sent)  # without it, small ones too

    def test_two_passes_a_step_decide_from_the_largest_and_spread_each(self):
        # gradient accumulation: a pack after an unpack starts the next pass
        torch, o, _ = make(20 * MiB)
        o.spread_large = False
        heavy, light = [16, 16] + [2] * 10, [1] * 12

        def two_passes():
            sent = []
            for sizes in (heavy, light):
                ts = [torch.cuda_tensor(n * MiB, float(k)) for k, n in enumerate(sizes)]
                packed = [o.pack(t) for t in ts]
                o._drain(block=True)
                sent.append([k for k, p in enumerate(packed) if isinstance(p, off._Record)])
                for p in reversed(packed):
                    o.unpack(p)
            o.step_end(lambda dev: (64 * GiB, 63 * GiB, 0))
            return sent
        two_passes()
        # the first pass holds the most eligible bytes: its skew decides
        self.assertAlmostEqual(o.skew, off.front_skew([n * MiB for n in heavy], 20 * MiB))
        self.assertTrue(o.spread)
        sent = two_passes()
        self.assertTrue(any(k >= 2 for k in sent[0]), sent)  # the first pass spreads

    def test_left_alone_when_off_or_while_a_choice_measures(self):
        torch, o, _ = make(20 * MiB)
        o.spread_auto = False
        self.step(torch, o, [16, 16] + [2] * 10)
        self.assertFalse(o.spread)  # spread_auto off: spread stays as set
        o.spread = True
        self.step(torch, o, [4] * 12)
        self.assertTrue(o.spread)

        class Fake:
            decided = None

            def step_end(self, seconds, limit, moved, active):
                return False
        o.spread_auto = True
        o.choice = Fake()
        self.step(torch, o, [16, 16] + [2] * 10)
        self.assertFalse(o.spread)  # the choice's answer, not the skew's


class FastCudaTest(unittest.TestCase):
    """_FastCuda over a stand-in for torch's calls underneath torch.cuda:
    a current stream per device, kept as (stream id, device, type)."""

    def fake(self):
        log = []

        class Stream:
            def __init__(self, stream_id=0, device_index=0, device_type=1):
                self.stream_id, self.device_index, self.device_type = (
                    stream_id, device_index, device_type)

            def wait_event(self, ev):
                log.append(("wait", self.stream_id, ev))

            def wait_stream(self, other):
                log.append(("wait_stream", self.stream_id, other.stream_id))

        class Event:
            def record(self, stream):
                log.append(("record", stream.stream_id, self))

        class Ctx:  # torch.cuda.stream: notes that it was used
            def __init__(self, st):
                self.st = st

            def __enter__(self):
                log.append(("torch.cuda.stream", self.st.stream_id))

            def __exit__(self, *a):
                return False

        state = {"dev": 0, "cur": {0: (0, 0, 1), 1: (0, 1, 1)}}

        def set_stream(sid, idx, typ):
            state["cur"][idx] = (sid, idx, typ)
            state["dev"] = idx  # PyTorch's setStream switches to the stream's device
        C = type("C", (), {
            "_cuda_getCurrentStream": staticmethod(lambda idx: state["cur"][idx]),
            "_cuda_setStream": staticmethod(set_stream),
            "_cuda_getDevice": staticmethod(lambda: state["dev"])})
        cuda = type("Cuda", (), {})()
        cuda.Stream = Stream
        cuda.Event = Event
        cuda.stream = Ctx
        cuda.current_stream = lambda device=None: ("torch.cuda.current_stream", device)
        torch = type("T", (), {})()
        torch._C, torch.cuda = C, cuda
        return torch, state, log, Stream

    def test_current_stream_is_one_object_per_stream(self):
        torch, state, _, _ = self.fake()
        fc = off._FastCuda(torch)
        self.assertTrue(fc.raw)
        a = fc.current(0)
        self.assertEqual((a.stream_id, a.device_index), (0, 0))
        self.assertIs(fc.current(0), a)  # cached: no new object per call
        state["cur"][0] = (7, 0, 1)
        b = fc.current(Device("cuda", 0))  # a torch.device does as well as an index
        self.assertEqual(b.stream_id, 7)
        self.assertIsNot(b, a)
        state["dev"] = 1
        self.assertEqual(fc.current(Device("cuda")).device_index, 1)  # no index: the current device
        fc.raw = False  # the study knob: torch.cuda's own
        self.assertEqual(fc.current(0), ("torch.cuda.current_stream", 0))

    def test_on_makes_a_stream_current_and_restores_the_one_before(self):
        torch, state, log, Stream = self.fake()
        fc = off._FastCuda(torch)
        s = Stream(5, 0, 1)
        with fc.on(s):
            self.assertEqual(state["cur"][0], (5, 0, 1))
        self.assertEqual(state["cur"][0], (0, 0, 1))
        with self.assertRaises(ValueError):
            with fc.on(s):
                raise ValueError
        self.assertEqual(state["cur"][0], (0, 0, 1))  # restored on an exception too
        self.assertEqual(log, [])
        # a stream of another device: torch.cuda.stream, which switches devices too
        with fc.on(Stream(9, 1, 1)):
            pass
        self.assertEqual(log, [("torch.cuda.stream", 9)])
        self.assertEqual(state["cur"][1], (0, 1, 1))

    def test_wait_records_on_the_stream_and_the_waiter_waits(self):
        torch, _, log, Stream = self.fake()
        fc = off._FastCuda(torch)
        w, s = Stream(3), Stream(4)
        fc.wait(w, s)
        self.assertEqual([x[:2] for x in log], [("record", 4), ("wait", 3)])
        self.assertIs(log[0][2], log[1][2])  # the same event
        log.clear()
        fc.raw = False
        fc.wait(w, s)
        self.assertEqual(log, [("wait_stream", 3, 4)])

    def test_without_the_calls_underneath_it_is_torch_cuda(self):
        torch = FakeTorch()  # no torch._C
        fc = off._FastCuda(torch)
        self.assertFalse(fc.raw)
        self.assertIs(fc.current(0), torch.cur_stream)


if __name__ == "__main__":
    unittest.main()
