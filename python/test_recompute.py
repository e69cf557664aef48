#!/usr/bin/env python3
"""Tests of libvmem_recompute without a GPU or PyTorch: the search for a
model's repeated blocks, the choice of the blocks to recompute, and the
wrapped forwards over a small stand-in for the parts of torch they use (the
statistics are a reader the test sets, the checkpoint a stand-in that runs
the function once in the forward pass and again when the test calls its
backward).  With PyTorch on a GPU: scripts/gpu/recompute_check.py.

    python3 python/test_recompute.py [-v]

With LIBVMEM_TEST_INSTALLED=1 (.ci/run's wheel check) the installed module is
tested, not the one beside this file.
"""

import os
import sys
import unittest
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALLED = os.environ.get("LIBVMEM_TEST_INSTALLED") == "1"
if INSTALLED:  # python puts this file's directory first on sys.path: not it
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
else:
    sys.path.insert(0, HERE)
import libvmem_recompute as rcm  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------------
# A stand-in for torch: modules register their sub-modules as torch's do,
# tensors are a count of elements (and values where the test reads them)
# --------------------------------------------------------------------------

class Tensor:
    def __init__(self, n=1, esize=4, data=None):
        self.data = None if data is None else list(data)
        self.n = len(self.data) if data is not None else n
        self.esize = esize

    def numel(self):
        return self.n

    def element_size(self):
        return self.esize

    def clone(self):
        return Tensor(self.n, self.esize, self.data)

    def copy_(self, src):
        self.data[:] = src.data
        return self


def out_tensor(nbytes):
    return Tensor(nbytes // 4, 4)


class Module:
    def __init__(self):
        object.__setattr__(self, "_modules", {})
        self._params = []
        self.training = True

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def children(self):  # torch's: each module once
        seen = set()
        for m in self._modules.values():
            if id(m) not in seen:
                seen.add(id(m))
                yield m

    def modules(self, _seen=None):  # torch's: pre-order, self first, each once
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield self
        for m in self._modules.values():
            yield from m.modules(seen)

    def parameters(self):
        for m in self.modules():
            yield from m._params

    def train(self, mode=True):
        for m in self.modules():
            m.training = mode
        return self

    def eval(self):
        return self.train(False)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def register_forward_pre_hook(self, hook):  # torch's: hook(module, args)
        hooks = self.__dict__.setdefault("_forward_pre_hooks", {})
        key = object()
        hooks[key] = hook
        return SimpleNamespace(remove=lambda: hooks.pop(key, None))

    def __call__(self, *args, **kwargs):
        for hook in list(self.__dict__.get("_forward_pre_hooks", {}).values()):
            out = hook(self, args)
            if out is not None:
                args = out if isinstance(out, tuple) else (out,)
        return self.forward(*args, **kwargs)


class ModuleList(Module):
    def __init__(self, mods=()):
        super().__init__()
        for k, m in enumerate(mods):
            setattr(self, str(k), m)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(ModuleList):
    def __init__(self, *mods):
        super().__init__(mods)

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


class BatchNorm(Module):  # torch.nn.modules.batchnorm._BatchNorm
    def __init__(self, track_running_stats=True):
        super().__init__()
        self._params = [Tensor(4)]
        self.track_running_stats = track_running_stats
        self.running_mean = Tensor(data=[0.0] * 4)
        self.running_var = Tensor(data=[1.0] * 4)
        self.num_batches_tracked = Tensor(esize=8, data=[0])

    def forward(self, x):
        if self.training:
            self.running_mean.data[:] = [v + 1.0 for v in self.running_mean.data]
            self.running_var.data[:] = [v * 2.0 for v in self.running_var.data]
            self.num_batches_tracked.data[0] += 1
        return x

    def state(self):
        return (list(self.running_mean.data), list(self.running_var.data),
                list(self.num_batches_tracked.data))


class Linear(Module):  # a leaf with parameters
    def __init__(self):
        super().__init__()
        self._params = [Tensor(16)]

    def forward(self, x):
        return x


class Gelu(Module):  # a leaf without parameters
    def forward(self, x):
        return x


class FakeTorch:
    Tensor = Tensor

    def __init__(self):
        ft = self
        self.grad_enabled = True
        self.cuda_available = True
        self.capturing = False
        self.compiling = False
        self.device = 3
        self.nn = SimpleNamespace(
            Module=Module, ModuleList=ModuleList, Sequential=Sequential,
            modules=SimpleNamespace(batchnorm=SimpleNamespace(_BatchNorm=BatchNorm)))
        self.cuda = SimpleNamespace(
            current_device=lambda: ft.device,
            is_available=lambda: ft.cuda_available,
            is_current_stream_capturing=lambda: ft.capturing)
        self.compiler = SimpleNamespace(is_compiling=lambda: ft.compiling)
        self.task = -1  # the backward pass's graph task in progress (-1: none)
        self.hooks = None  # the top of the saved tensor hooks' stack
        self._C = SimpleNamespace(
            _current_graph_task_id=lambda: ft.task,
            _autograd=SimpleNamespace(_top_saved_tensors_default_hooks=lambda ign: ft.hooks))

    def is_grad_enabled(self):
        return self.grad_enabled


# --------------------------------------------------------------------------
# libvmem's statistics, blocks that allocate, a checkpoint that recomputes
# --------------------------------------------------------------------------

class Stats:
    """read(device) -> (limit, in use, the last step's demand, step ends)."""

    def __init__(self, limit=64 * GiB):
        self.limit, self.in_use, self.demand, self.steps = limit, 0, 0, 0
        self.none = False
        self.reads = []  # the devices asked about
        self.log = []    # the blocks' forwards, in the order they ran

    def read(self, device):
        self.reads.append(device)
        if self.none:
            return None
        return self.limit, self.in_use, self.demand, self.steps


class Block(Module):
    """A composite block: its forward adds alloc bytes to the device's use
    and returns a tensor of out bytes (gain: alloc - out)."""

    def __init__(self, st=None, alloc=0, out=MiB, name="", bn=False):
        super().__init__()
        self.fc = Linear()
        self.act = Gelu()
        if bn:
            self.inner = Sequential(Linear(), BatchNorm())
        self.st, self.alloc, self.out, self.name = st, alloc, out, name
        self.seen = []  # (args, kwargs) of each call of the class's forward

    def forward(self, x=None, scale=1):
        self.seen.append(((x,), {"scale": scale}))
        if self.st is not None:
            self.st.in_use += self.alloc
            self.st.log.append(self.name)
        if "inner" in self._modules:
            self.inner(x)
        return out_tensor(self.out)


class OtherBlock(Block):
    pass


class Net(Module):
    """Blocks in a ModuleList, a head after them; skip: the indices the
    forward leaves out."""

    def __init__(self, blocks):
        super().__init__()
        self.layers = ModuleList(blocks)
        self.head = Linear()
        self.skip = set()

    def forward(self, x, scale=1):
        for k, b in enumerate(self.layers):
            if k not in self.skip:
                x = b(x, scale=scale)
        return self.head(x)


class FakeCheckpoint:
    """torch.utils.checkpoint.checkpoint: runs fn in the forward pass and
    keeps it; backward() calls each kept fn again, last first, as the
    backward pass's recomputation does."""

    def __init__(self, st):
        self.st = st
        self.calls = []   # one dict per call
        self.kept = []

    def __call__(self, fn, *args, use_reentrant=None, preserve_rng_state=None, **kwargs):
        start = len(self.st.log)
        out = fn(*args, **kwargs)
        self.calls.append({"names": self.st.log[start:], "args": args, "kwargs": kwargs,
                           "use_reentrant": use_reentrant,
                           "preserve_rng_state": preserve_rng_state, "out": out})
        self.kept.append((fn, args, kwargs))
        return out

    def names(self):
        return [n for c in self.calls for n in c["names"]]

    def backward(self):
        outs = []
        while self.kept:
            fn, args, kwargs = self.kept.pop()
            outs.append(fn(*args, **kwargs))
        return outs


def setup(gains_mib, limit=64 * GiB, policy="auto", margin_frac=0.05, bn=False):
    """A Net of blocks whose gains (MiB) are gains_mib, wrapped."""
    torch = FakeTorch()
    st = Stats(limit)
    blocks = [Block(st, (g + 1) * MiB, MiB, "b%d" % k, bn=bn) for k, g in enumerate(gains_mib)]
    net = Net(blocks)
    ck = FakeCheckpoint(st)
    rc = rcm.Recompute(torch, net, st.read, policy=policy, margin_frac=margin_frac,
                       checkpoint=ck)
    return torch, st, net, blocks, ck, rc


def step(st, net, ck, demand, x="x", scale=1):
    """One training step: the forward pass, the backward's recomputations,
    then the step's end with its demand.  The names checkpointed."""
    first = len(ck.calls)
    st.in_use = GiB
    net(x, scale=scale)
    ck.backward()
    st.steps += 1
    st.demand = demand
    return [n for c in ck.calls[first:] for n in c["names"]]


def chosen_after_learning(gains_mib, need, limit, **kw):
    """One uncut step to learn the gains and (at its end) need; then the
    names checkpointed in a step under limit."""
    torch, st, net, blocks, ck, rc = setup(gains_mib, **kw)
    assert step(st, net, ck, need) == []
    st.limit = limit
    return step(st, net, ck, need), rc


# --------------------------------------------------------------------------

class ModuleTest(unittest.TestCase):
    def test_the_module_tested_is_the_one_asked_for(self):
        where = os.path.dirname(os.path.realpath(rcm.__file__))
        if INSTALLED:
            self.assertNotEqual(where, os.path.realpath(HERE),
                                "imported the source tree's module, not the installed one")
        else:
            self.assertEqual(where, os.path.realpath(HERE))


class FindBlocksTest(unittest.TestCase):
    def find(self, model):
        return rcm.find_blocks(FakeTorch(), model)

    def test_the_innermost_repeated_blocks_in_registration_order(self):
        class Stage(Module):
            def __init__(self, blocks):
                super().__init__()
                self.down = Linear()
                self.blocks = Sequential(*blocks)

        bs = [Block(name="b%d" % k) for k in range(6)]
        model = Net([])
        model.stem = Linear()
        model.stages = Sequential(Stage(bs[:3]), Stage(bs[3:]))
        found = self.find(model)
        self.assertEqual([b.name for b in found], ["b0", "b1", "b2", "b3", "b4", "b5"])
        self.assertTrue(all(f is b for f, b in zip(found, bs)))

    def test_repeated_leaves_are_not_blocks(self):
        model = Net([])
        model.mlp = Sequential(Linear(), Gelu(), Linear())
        self.assertEqual(self.find(model), [])

    def test_children_without_parameters_are_not_blocks(self):
        class Act(Module):
            def __init__(self):
                super().__init__()
                self.f = Gelu()

        model = Net([])
        model.acts = Sequential(Act(), Act())
        self.assertEqual(self.find(model), [])
        model.acts = Sequential(Act(), Act(), Block(), Block())
        self.assertEqual(len(self.find(model)), 2)

    def test_only_the_class_that_repeats_within_its_container(self):
        a, b1, b2 = OtherBlock(name="a"), Block(name="b1"), Block(name="b2")
        model = Net([])
        model.body = Sequential(b1, a, b2)
        found = self.find(model)
        self.assertEqual(len(found), 2)
        self.assertIs(found[0], b1)
        self.assertIs(found[1], b2)

    def test_repeats_outside_a_container_are_not_blocks(self):
        model = Net([])
        model.enc = Block()
        model.dec = Block()
        self.assertEqual(self.find(model), [])

    def test_a_module_registered_in_two_containers_is_returned_once(self):
        shared, b2, b3 = Block(name="shared"), Block(name="b2"), Block(name="b3")
        model = Net([])
        model.first = Sequential(shared, b2)
        model.second = ModuleList([shared, b3])
        found = self.find(model)
        self.assertEqual([b.name for b in found], ["shared", "b2", "b3"])

    def test_a_module_list_of_two_blocks(self):
        bs = [Block(name="b0"), Block(name="b1")]
        found = self.find(Net(bs))
        self.assertEqual(len(found), 2)
        self.assertTrue(all(f is b for f, b in zip(found, bs)))

    def test_recompute_wraps_the_blocks_found_or_those_given(self):
        torch, st, net, blocks, ck, rc = setup([1, 2, 3])
        self.assertEqual([id(b) for b in rc.blocks], [id(b) for b in blocks])
        self.assertTrue(all("forward" in b.__dict__ for b in blocks))
        bs = [Block(st, name="b%d" % k) for k in range(3)]
        rc2 = rcm.Recompute(torch, Net(bs), st.read, blocks=[bs[2]], checkpoint=ck)
        self.assertEqual(rc2.blocks, [bs[2]])
        self.assertEqual(["forward" in b.__dict__ for b in bs], [False, False, True])


class ChoiceTest(unittest.TestCase):
    def test_nothing_is_recomputed_while_the_need_is_unknown(self):
        torch, st, net, blocks, ck, rc = setup([10, 20], limit=MiB)
        self.assertEqual(step(st, net, ck, 0), [])
        self.assertEqual(step(st, net, ck, 0), [])  # a demand of 0 teaches nothing
        self.assertIsNone(rc.need)
        self.assertEqual(ck.calls, [])

    def test_nothing_is_recomputed_at_or_above_the_need(self):
        names, rc = chosen_after_learning([10, 20], 1000 * MiB, 1000 * MiB)
        self.assertEqual((names, rc.need), ([], 1000 * MiB))
        names, rc = chosen_after_learning([10, 20], 1000 * MiB, 2000 * MiB)
        self.assertEqual(names, [])
        names, rc = chosen_after_learning([10, 20], 1000 * MiB, 1000 * MiB - 1)
        self.assertNotEqual(names, [])

    def test_every_block_while_a_gain_is_unknown(self):
        torch, st, net, blocks, ck, rc = setup([10, 20, 30, 40], margin_frac=0)
        net.skip = {2}  # block 2 does not run in the uncut step
        step(st, net, ck, 1000 * MiB)
        self.assertIsNone(rc.gain[2])
        net.skip = set()
        st.limit = 999 * MiB  # a 1 MiB cut: deficit 41 MiB, blocks 3 and 1 with all known
        self.assertEqual(step(st, net, ck, 900 * MiB), ["b0", "b1", "b2", "b3"])

    def test_policy_all_recomputes_every_block_while_cut(self):
        # (auto would take blocks 3 and 2 only: deficit 1 + 40 MiB)
        torch, st, net, blocks, ck, rc = setup([10, 20, 30, 40], policy="all", margin_frac=0)
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])  # need known, not cut
        st.limit = 999 * MiB
        self.assertEqual(step(st, net, ck, 900 * MiB), ["b0", "b1", "b2", "b3"])
        st.limit = 1000 * MiB
        self.assertEqual(step(st, net, ck, 900 * MiB), [])

    def test_auto_takes_the_largest_gains_first_until_the_cut_is_covered(self):
        # deficit: the cut (1 MiB) + the largest gain (50): 51 MiB; 50 then
        # the earlier of the two 30s covers it
        names, rc = chosen_after_learning([10, 30, 50, 30], 1000 * MiB, 999 * MiB,
                                          margin_frac=0)
        self.assertEqual(sorted(names), ["b1", "b2"])
        self.assertEqual(rc.last["deficit"], 51 * MiB)
        self.assertEqual(rc.last["covered"], 80 * MiB)
        self.assertEqual(rc.stats()["chosen"], 2)
        # a covered sum equal to the deficit is enough: 30 + 50 = 80 = 50 + 30
        names, rc = chosen_after_learning([10, 30, 50, 30], 1000 * MiB, 970 * MiB,
                                          margin_frac=0)
        self.assertEqual(sorted(names), ["b1", "b2"])
        # a larger cut takes the next
        names, rc = chosen_after_learning([10, 30, 50, 30], 1000 * MiB, 969 * MiB,
                                          margin_frac=0)
        self.assertEqual(sorted(names), ["b1", "b2", "b3"])
        # ties between the tied: the earlier index
        names, rc = chosen_after_learning([30, 30, 30], 1000 * MiB, 999 * MiB,
                                          margin_frac=0)
        self.assertEqual(sorted(names), ["b0", "b1"])

    def test_auto_leaves_out_blocks_that_leave_nothing_in_use(self):
        # block 0 leaves less than MIN_GAIN (its forward already under the
        # program's own checkpoint, say): a 200 MiB cut takes the other two
        # and stays short of the deficit rather than recompute block 0
        small = (rcm.MIN_GAIN - 1) / MiB
        names, rc = chosen_after_learning([small, 30, 50], 1000 * MiB, 800 * MiB,
                                          margin_frac=0)
        self.assertEqual(sorted(names), ["b1", "b2"])
        self.assertEqual(rc.last["covered"], 80 * MiB)
        # a block of exactly MIN_GAIN is a candidate
        names, rc = chosen_after_learning([rcm.MIN_GAIN / MiB, 30, 50], 1000 * MiB,
                                          800 * MiB, margin_frac=0)
        self.assertEqual(sorted(names), ["b0", "b1", "b2"])
        # every block under it: nothing recomputed, the cut left to the offload
        names, rc = chosen_after_learning([0, small, 0], 1000 * MiB, 500 * MiB,
                                          margin_frac=0)
        self.assertEqual(names, [])
        self.assertEqual(rc.relief(500 * MiB), 0)
        # "all" is asked for every block: it takes them
        names, rc = chosen_after_learning([0, small, 30], 1000 * MiB, 500 * MiB,
                                          policy="all")
        self.assertEqual(names, ["b0", "b1", "b2"])

    def test_auto_adds_a_margin_of_the_limit(self):
        limit = 999 * MiB
        names, rc = chosen_after_learning([10, 30, 50, 30], 1000 * MiB, limit,
                                          margin_frac=0.05)
        deficit = 1000 * MiB - limit + 50 * MiB + int(0.05 * limit)  # 100.95 MiB
        self.assertEqual(rc.last["deficit"], deficit)
        self.assertEqual(sorted(names), ["b1", "b2", "b3"])
        self.assertEqual(rc.last["covered"], 110 * MiB)

    def test_relief_is_what_the_choice_would_cover_and_decides_nothing(self):
        torch, st, net, blocks, ck, rc = setup([10, 30, 50, 30], margin_frac=0)
        self.assertEqual(rc.relief(999 * MiB), 0)  # gains and need unknown
        step(st, net, ck, 1000 * MiB)
        self.assertEqual(rc.relief(1000 * MiB), 0)  # not cut
        self.assertEqual(rc.relief(999 * MiB), 80 * MiB)  # blocks 2 and 1 (deficit 51 MiB)
        self.assertEqual(rc.relief(969 * MiB), 110 * MiB)
        self.assertEqual(rc.last["deficit"], 0)  # asked, not decided
        self.assertEqual(rc.stats()["chosen"], 0)
        st.limit = 999 * MiB  # the step that follows decides as before
        self.assertEqual(sorted(step(st, net, ck, 1000 * MiB)), ["b1", "b2"])
        rc.gain[3] = None  # a gain unknown: every block, whose bytes are not known
        self.assertEqual(rc.relief(999 * MiB), 0)
        torch, st, net, blocks, ck, rc = setup([10, 30], policy="all", margin_frac=0)
        step(st, net, ck, 1000 * MiB)
        self.assertEqual(rc.relief(999 * MiB), 40 * MiB)

    def test_an_unknown_policy_raises_before_wrapping(self):
        torch, st = FakeTorch(), Stats()
        bs = [Block(st), Block(st)]
        with self.assertRaises(ValueError):
            rcm.Recompute(torch, Net(bs), st.read, policy="some")
        self.assertFalse(any("forward" in b.__dict__ for b in bs))


class FlowTest(unittest.TestCase):
    def test_gains_are_what_a_block_leaves_in_use_less_its_output(self):
        torch, st, net, blocks, ck, rc = setup([10, 30, 0])
        blocks[2].alloc = MiB // 2  # less than its output: none
        step(st, net, ck, 0)
        self.assertEqual(rc.gain, [10 * MiB, 30 * MiB, 0])
        self.assertEqual(set(st.reads), {3})  # the current device
        self.assertEqual(rc.stats()["gains"], [10 * MiB, 30 * MiB, 0])

    def test_outputs_in_tuples_and_dicts_are_counted(self):
        torch, st = FakeTorch(), Stats()

        class Multi(Block):
            def forward(self, x=None, scale=1):
                self.st.in_use += self.alloc
                if self.name == "tuple":
                    return (out_tensor(MiB), out_tensor(2 * MiB), "not a tensor")
                return {"a": out_tensor(4 * MiB), "b": 7}

        bs = [Multi(st, 20 * MiB, name="tuple"), Multi(st, 20 * MiB, name="dict")]
        net = Net(bs)
        rc = rcm.Recompute(torch, net, st.read, checkpoint=FakeCheckpoint(st))
        net("x")
        self.assertEqual(rc.gain, [17 * MiB, 16 * MiB])

    def test_the_need_the_cut_and_the_hysteresis(self):
        torch, st, net, blocks, ck, rc = setup([10, 30, 50, 30], margin_frac=0)
        # step 1, uncut: gains learned; no step has ended, need unknown
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertEqual(rc.gain, [10 * MiB, 30 * MiB, 50 * MiB, 30 * MiB])
        self.assertIsNone(rc.need)
        # step 2, uncut: step 1 recomputed nothing, its demand is the need;
        # gains are measured again
        blocks[3].alloc = 41 * MiB
        self.assertEqual(step(st, net, ck, 1100 * MiB, scale=2), [])
        self.assertEqual(rc.need, 1000 * MiB)
        self.assertEqual(rc.gain[3], 40 * MiB)
        self.assertEqual([len(b.seen) for b in blocks], [2, 2, 2, 2])
        # cut to 30 MiB below step 2's demand, between steps: deficit 30 + 50
        st.limit = 1070 * MiB
        blocks[0].alloc = 100 * MiB  # not re-measured while cut
        blocks[2].alloc = 100 * MiB
        first = len(ck.calls)
        self.assertEqual(step(st, net, ck, 900 * MiB, scale=2), ["b2", "b3"])
        self.assertEqual(rc.need, 1100 * MiB)
        self.assertEqual(rc.gain, [10 * MiB, 30 * MiB, 50 * MiB, 40 * MiB])
        for c in ck.calls[first:]:
            self.assertIs(c["use_reentrant"], False)
            self.assertIs(c["preserve_rng_state"], True)
            self.assertEqual(c["kwargs"], {"scale": 2})
            self.assertEqual(len(c["args"]), 1)
            self.assertIsInstance(c["args"][0], Tensor)  # block 1's output
        # the blocks' own forwards got the arguments: once in the forward
        # pass, once in the backward's recomputation
        self.assertEqual(len(blocks[2].seen), 4)
        self.assertEqual(blocks[2].seen[2], blocks[2].seen[3])
        self.assertIs(blocks[2].seen[2][0][0], ck.calls[first]["args"][0])
        self.assertEqual(blocks[2].seen[2][1], {"scale": 2})
        self.assertEqual(len(blocks[1].seen), 3)
        self.assertEqual(rc.totals["recomputed_calls"], 2)
        self.assertEqual(rc.totals["recomputed_bytes"], 90 * MiB)
        self.assertEqual(rc.totals["recomputations"], 2)
        # step 4: step 3 recomputed, its lower demand does not lower the need:
        # recomputation stays on
        self.assertEqual(step(st, net, ck, 900 * MiB), ["b2", "b3"])
        self.assertEqual(rc.need, 1100 * MiB)
        self.assertEqual(rc.gain, [10 * MiB, 30 * MiB, 50 * MiB, 40 * MiB])
        self.assertEqual(rc.totals["steps_active"], 1)  # step 3, counted in step 4
        # raised to the need: plain, measured again; step 4 recomputed, so
        # the need stays until a step that did not has ended
        st.limit = 1100 * MiB
        self.assertEqual(step(st, net, ck, 1050 * MiB), [])
        self.assertEqual(rc.need, 1100 * MiB)
        self.assertEqual(rc.gain, [99 * MiB, 30 * MiB, 99 * MiB, 40 * MiB])
        self.assertEqual(rc.totals["steps_active"], 2)
        self.assertEqual(step(st, net, ck, 1050 * MiB), [])
        self.assertEqual(rc.need, 1050 * MiB)
        self.assertEqual(rc.stats()["need"], 1050 * MiB)
        self.assertEqual(rc.totals["steps_active"], 2)
        # a cut now chooses from the new gains: deficit 50 + 99, 99 + 99
        st.limit = 1000 * MiB
        self.assertEqual(step(st, net, ck, 1050 * MiB), ["b0", "b2"])

    def test_a_cut_within_a_step_acts_from_the_next_block(self):
        torch, st, net, blocks, ck, rc = setup([10, 30, 50, 30], margin_frac=0)
        step(st, net, ck, 1000 * MiB)
        step(st, net, ck, 1000 * MiB)
        self.assertEqual(rc.need, 1000 * MiB)
        orig = blocks[0].__dict__["forward"]

        def cut_then(*a, **kw):
            out = orig(*a, **kw)
            st.limit = 950 * MiB  # deficit 50 + 50: 50 + 30 + 30 (blocks 2, 1, 3)
            return out
        blocks[0].forward = cut_then
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b1", "b2", "b3"])


class RecomputationTest(unittest.TestCase):
    def cut(self, bn=True):
        torch, st, net, blocks, ck, rc = setup([10, 30], policy="all", bn=bn)
        step(st, net, ck, 1000 * MiB)
        st.limit = 500 * MiB
        return torch, st, net, blocks, ck, rc

    def test_the_recomputation_runs_the_forward_again_and_keeps_batch_norms_statistics(self):
        torch, st, net, blocks, ck, rc = self.cut()
        bn = blocks[0].inner._modules["1"]
        self.assertEqual(bn.state(), ([1.0] * 4, [2.0] * 4, [1]))  # the uncut step
        net("x")
        self.assertEqual(ck.names(), ["b0", "b1"])
        self.assertEqual(len(ck.kept), 2)
        after_forward = ([2.0] * 4, [4.0] * 4, [2])
        self.assertEqual(bn.state(), after_forward)  # the forward's update stays
        self.assertEqual(rc.totals["recomputations"], 0)
        calls = len(blocks[0].seen)
        outs = ck.backward()
        self.assertEqual(len(blocks[0].seen), calls + 1)  # ran again
        self.assertEqual(st.log[-2:], ["b1", "b0"])
        self.assertTrue(all(isinstance(o, Tensor) for o in outs))
        self.assertEqual(bn.state(), after_forward)  # not updated twice
        self.assertEqual(rc.totals["recomputations"], 2)
        self.assertEqual(rc.totals["recomputed_calls"], 2)
        # the next step's forward updates them again
        net("x")
        self.assertEqual(bn.state(), ([3.0] * 4, [8.0] * 4, [3]))

    def test_statistics_are_restored_when_the_recomputation_raises(self):
        torch, st, net, blocks, ck, rc = self.cut()
        bn = blocks[1].inner._modules["1"]
        net("x")
        after_forward = bn.state()
        orig_forward = bn.forward

        def forward(x):
            orig_forward(x)
            raise RuntimeError("in the recomputation")
        bn.forward = forward
        with self.assertRaises(RuntimeError):
            ck.backward()
        self.assertEqual(bn.state(), after_forward)


class VTensor(Tensor):
    """A tensor with torch's in-place version counter."""

    def __init__(self, n=1):
        super().__init__(n)
        self._version = 0

    def add_(self, v):
        self._version += 1
        return self


class Counting(Block):
    """A block whose forward assigns an attribute of its own (a counter)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.count = 0

    def forward(self, x=None, scale=1):
        self.count = self.count + 1
        return super().forward(x, scale)


class Lazy(Block):
    """A block whose first forward builds state (as lazy modules do)."""

    def forward(self, x=None, scale=1):
        if "table" not in self.__dict__:
            self.table = [1, 2, 3]
        return super().forward(x, scale)


class WithBuffers(Block):
    """Modules with torch's _parameters and _buffers: a batch norm whose
    running statistics change in place, and (ema=True) a buffer of the
    block's own that does too."""

    def __init__(self, *a, ema=False, **kw):
        super().__init__(*a, **kw)
        self.norm = BatchNorm()
        self.norm._buffers = {"running_mean": VTensor(4), "running_var": VTensor(4),
                              "num_batches_tracked": VTensor(1)}
        self.norm._parameters = {"weight": VTensor(4)}
        self._buffers = {"ema": VTensor(4)} if ema else {}

    def forward(self, x=None, scale=1):
        for t in self.norm._buffers.values():
            t.add_(1)
        for t in self._buffers.values():
            t.add_(1)
        return super().forward(x, scale)


def purity_setup(kinds, require_safe=False, blocks_given=False, torch=None, net_cls=None):
    """A Net (or net_cls) of blocks of the given classes (gains 10, 20, ... MiB)."""
    torch = torch or FakeTorch()
    st = Stats()
    bs = [cls(st, (10 * (k + 1) + 1) * MiB, MiB, "b%d" % k) for k, cls in enumerate(kinds)]
    net = (net_cls or Net)(bs)
    ck = FakeCheckpoint(st)
    rc = rcm.Recompute(torch, net, st.read, policy="all", checkpoint=ck, blocks=bs,
                       check=not blocks_given, require_safe=require_safe)
    return torch, st, net, bs, ck, rc


class PurityTest(unittest.TestCase):
    def run_cut(self, st, net, ck, uncut=3):
        """uncut steps (the checks), then the names recomputed in a cut one."""
        for _ in range(uncut):
            self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        st.limit = 500 * MiB
        return step(st, net, ck, 1000 * MiB)

    def test_a_block_that_assigns_in_its_forward_is_never_recomputed(self):
        torch, st, net, bs, ck, rc = purity_setup([Block, Counting, Block])
        with self.assertWarns(RuntimeWarning) as w:
            names = self.run_cut(st, net, ck)
        self.assertIn("Counting blocks are not recomputed", str(w.warning))
        self.assertIn("forward sets Counting.count", str(w.warning))
        self.assertEqual(names, ["b0", "b2"])
        self.assertEqual(rc.stats()["unsafe"], {1: "forward sets Counting.count"})
        self.assertEqual(rc.stats()["checked"], 2)
        self.assertEqual(rc.relief(500 * MiB), 40 * MiB)  # b0 and b2 only

    def test_one_warning_per_class(self):
        torch, st, net, bs, ck, rc = purity_setup([Counting, Counting])
        import warnings
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            self.run_cut(st, net, ck)
        self.assertEqual(len([g for g in got if "Counting" in str(g.message)]), 1)
        self.assertEqual(sorted(rc.stats()["unsafe"]), [0, 1])

    def test_the_first_forward_is_not_checked(self):
        torch, st, net, bs, ck, rc = purity_setup([Lazy, Lazy])
        self.assertEqual(self.run_cut(st, net, ck), ["b0", "b1"])
        self.assertEqual(rc.stats()["unsafe"], {})
        # two checked passes make a block safe: the first and one more are not enough
        torch, st, net, bs, ck, rc = purity_setup([Lazy, Lazy], require_safe=True)
        self.assertEqual(self.run_cut(st, net, ck, uncut=2), [])
        # (that cut step ran them plain: their second check)
        self.assertEqual(rc.stats()["checked"], 2)
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1"])

    def test_a_buffer_changed_in_place_is_unsafe_but_batch_norms_statistics_are_not(self):
        torch, st = FakeTorch(), Stats()
        bs = [WithBuffers(st, 11 * MiB, MiB, "b0"), WithBuffers(st, 21 * MiB, MiB, "b1", ema=True)]
        net = Net(bs)
        ck = FakeCheckpoint(st)
        rc = rcm.Recompute(torch, net, st.read, policy="all", checkpoint=ck)
        self.assertEqual(rc.blocks, bs)  # found, so checked
        with self.assertWarns(RuntimeWarning):
            names = self.run_cut(st, net, ck)
        self.assertEqual(names, ["b0"])
        self.assertEqual(rc.stats()["unsafe"], {1: "forward changes WithBuffers.ema in place"})

    def test_a_parameter_replaced_in_the_forward_is_unsafe(self):
        class Swap(WithBuffers):
            def forward(self, x=None, scale=1):
                self.norm._parameters["weight"] = VTensor(4)
                return super().forward(x, scale)

        torch, st, net, bs, ck, rc = purity_setup([Block, Swap])
        with self.assertWarns(RuntimeWarning):
            self.assertEqual(self.run_cut(st, net, ck), ["b0"])
        self.assertEqual(rc.stats()["unsafe"], {1: "forward changes BatchNorm.weight in place"})

    def test_hooks_on_a_module_of_the_block_make_it_unsafe(self):
        torch, st, net, bs, ck, rc = purity_setup([Block, Block, Block])
        bs[1].act._forward_hooks = {7: lambda *a: None}
        bs[2]._backward_hooks = {8: lambda *a: None}
        with self.assertWarns(RuntimeWarning):
            self.assertEqual(self.run_cut(st, net, ck), ["b0"])
        self.assertEqual(rc.stats()["unsafe"], {1: "Gelu has forward hooks",
                                                2: "Block has backward hooks"})

    def test_global_module_hooks_make_every_block_unsafe(self):
        torch = FakeTorch()
        torch.nn.modules.module = SimpleNamespace(_global_forward_hooks={1: lambda *a: None})
        torch, st, net, bs, ck, rc = purity_setup([Block, Block], torch=torch)
        with self.assertWarns(RuntimeWarning) as w:
            self.assertEqual(self.run_cut(st, net, ck), [])
        self.assertIn("global module hooks", str(w.warning))
        torch.nn.modules.module._global_forward_hooks = {}  # empty: no hook
        torch, st, net, bs, ck, rc = purity_setup([Block, Block], torch=torch)
        self.assertEqual(self.run_cut(st, net, ck), ["b0", "b1"])

    def test_require_safe_recomputes_only_blocks_checked(self):
        # block 1 does not run while uncut: never checked
        for require_safe, want in ((False, ["b0", "b1", "b2"]), (True, ["b0", "b2"])):
            torch, st, net, bs, ck, rc = purity_setup([Block, Block, Block],
                                                      require_safe=require_safe)
            net.skip = {1}
            for _ in range(3):
                step(st, net, ck, 1000 * MiB)
            net.skip = set()
            st.limit = 500 * MiB
            self.assertEqual(step(st, net, ck, 1000 * MiB), want, require_safe)
            self.assertEqual(rc.stats()["require_safe"], require_safe)

    def test_blocks_named_are_not_checked(self):
        torch, st, net, bs, ck, rc = purity_setup([Block, Counting], blocks_given=True,
                                                  require_safe=True)
        self.assertEqual(self.run_cut(st, net, ck), ["b0", "b1"])
        self.assertEqual(rc.stats()["unsafe"], {})
        self.assertFalse(rc.stats()["require_safe"])

    def test_a_checked_block_is_not_checked_again(self):
        torch, st, net, bs, ck, rc = purity_setup([Block])
        self.run_cut(st, net, ck)
        self.assertTrue(rc.purity[0].state)
        calls = rc.purity[0].calls
        st.limit = 64 * GiB
        step(st, net, ck, 1000 * MiB)
        self.assertEqual(rc.purity[0].calls, calls)


class Cache:
    """A key/value cache as transformers passes one to each layer: each
    forward appends to it."""

    def __init__(self):
        self.layers = []


class CacheBlock(Block):
    def forward(self, x=None, scale=1, cache=None):
        if cache is not None:
            cache.layers.append(self.name)
        return super().forward(x, scale)


class CacheNet(Net):
    """Net whose forward, like transformers' models, makes a cache for its
    layers when config.use_cache is on."""

    def __init__(self, blocks):
        super().__init__(blocks)
        self.config = SimpleNamespace(use_cache=True)
        self.caches = []
        self.after_cache = None  # called once the forward made (or not) its cache

    def forward(self, x, scale=1):
        cache = Cache() if self.config.use_cache else None
        self.caches.append(cache)
        if self.after_cache is not None:
            self.after_cache()
        for b in self.layers:
            x = b(x, scale=scale, cache=cache)
        return self.head(x)


class StatefulArgumentTest(unittest.TestCase):
    def setup(self):
        torch, st, net, bs, ck, rc = purity_setup([CacheBlock] * 3, net_cls=CacheNet)
        return torch, st, net, ck, rc

    @staticmethod
    def cut_after_cache(st, net, limit=500 * MiB):
        """The next step's limit cut within it, after the model made its
        cache (a cut during the forward): that step's chosen calls run plain."""
        def cut():
            st.limit = limit
            net.after_cache = None
        net.after_cache = cut

    def test_stateless_arguments(self):
        t = FakeTorch()
        for v in (None, 1, 2.5, "s", True, Tensor(3), (Tensor(1), None, (1, 2)), [Tensor(1)],
                  {"a": Tensor(1), "b": (None, 3)}):
            self.assertTrue(rcm._stateless(t, v), v)
        for v in (Cache(), (Tensor(1), Cache()), {"c": [Cache()]}, object(), print):
            self.assertFalse(rcm._stateless(t, v), v)
        self.assertEqual(rcm._stateful_arg(t, (Tensor(1),), {"cache": Cache()}),
                         "cache (a Cache)")
        self.assertEqual(rcm._stateful_arg(t, (Tensor(1), Cache()), {}), "argument 1 (a Cache)")
        self.assertIsNone(rcm._stateful_arg(t, (Tensor(1),), {"cache": None}))

    def test_a_cut_between_steps_recomputes_from_its_first_step_without_a_cache(self):
        torch, st, net, ck, rc = self.setup()
        for _ in range(3):
            self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertIs(net.config.use_cache, True)  # uncut: untouched
        st.limit = 500 * MiB  # set_limit between two steps
        with self.assertWarns(RuntimeWarning):
            # decided at the model's forward, before it made its cache
            self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "b2"])
        self.assertIsNone(net.caches[-1])
        self.assertEqual(rc.totals["plain_stateful_calls"], 0)
        self.assertEqual(rc.totals["recomputed_calls"], 3)
        self.assertIs(net.config.use_cache, False)
        st.limit = 64 * GiB  # raised: nothing recomputes, the cache comes back
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertIs(net.config.use_cache, True)
        self.assertIsNotNone(net.caches[-1])
        rc.remove()  # and the model's hook goes with the blocks' wrappers
        self.assertEqual(net.__dict__.get("_forward_pre_hooks"), {})

    def test_a_wrapped_models_config_is_found_and_its_cache_turned_off_before_it_is_made(self):
        class Wrapper(Module):  # DistributedDataParallel's: the model as .module
            def __init__(self, inner):
                super().__init__()
                self.module = inner

            def forward(self, *a, **kw):
                return self.module(*a, **kw)
        torch, st = FakeTorch(), Stats()
        bs = [CacheBlock(st, (10 * (k + 1) + 1) * MiB, MiB, "b%d" % k) for k in range(3)]
        inner = CacheNet(bs)
        net, ck = Wrapper(inner), FakeCheckpoint(st)
        rc = rcm.Recompute(torch, net, st.read, policy="all", checkpoint=ck, blocks=bs)
        step(st, net, ck, 1000 * MiB)
        st.limit = 500 * MiB
        with self.assertWarns(RuntimeWarning):
            self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "b2"])
        self.assertIsNone(inner.caches[-1])
        rc.remove()
        self.assertIs(inner.config.use_cache, True)

    def test_a_cache_argument_runs_plain_and_use_cache_goes_off_while_recomputing(self):
        torch, st, net, ck, rc = self.setup()
        for _ in range(3):
            self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertIs(net.config.use_cache, True)  # uncut: untouched
        self.assertEqual(rc.stats()["checked"], 3)  # the cache is not the blocks' state
        self.cut_after_cache(st, net)
        with self.assertWarns(RuntimeWarning):
            # the first cut step: the model made its cache before the choice;
            # its demand (1400 MiB) is no need to learn from
            self.assertEqual(step(st, net, ck, 1400 * MiB), [])
        self.assertEqual(rc.totals["plain_stateful_calls"], 3)
        self.assertEqual(rc.totals["recomputed_calls"], 0)
        self.assertEqual(net.caches[-1].layers, ["b0", "b1", "b2"])  # each layer once
        self.assertIs(net.config.use_cache, False)
        # from the next step no cache, and the blocks recompute
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "b2"])
        self.assertIsNone(net.caches[-1])
        self.assertEqual(rc.need, 1000 * MiB)
        self.assertEqual(rc.totals["recomputed_calls"], 3)
        st.limit = 64 * GiB  # raised: nothing recomputes, the cache comes back
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertIs(net.config.use_cache, True)
        st.limit = 500 * MiB
        step(st, net, ck, 1000 * MiB)
        self.assertIs(net.config.use_cache, False)
        rc.remove()
        self.assertIs(net.config.use_cache, True)

    def test_a_step_whose_chosen_blocks_did_not_recompute_last_step_leaves_its_plan(self):
        # vmem_step_naive (rc.step_naive) in a step whose decision chooses
        # blocks the last step ran without recomputing: its placement plan
        # comes from that step
        torch, st, net, blocks, ck, rc = setup([10, 30, 50], policy="auto", margin_frac=0)
        left = []
        rc.step_naive = left.append
        for _ in range(3):
            step(st, net, ck, 1000 * MiB)
        self.assertEqual(left, [])  # uncut
        st.limit = 990 * MiB  # between steps: blocks 1 and 2 chosen (deficit 60 MiB)
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b1", "b2"])
        self.assertEqual(left, [torch.device])  # the cut's first step, once
        for _ in range(2):
            step(st, net, ck, 1000 * MiB)
        self.assertEqual(len(left), 1)  # the same choice, recomputed last step
        st.limit = 960 * MiB  # deeper: block 0 too, which ran plain last step
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "b2"])
        self.assertEqual(len(left), 2)
        st.limit = 64 * GiB  # raised: nothing chosen
        step(st, net, ck, 1000 * MiB)
        self.assertEqual(len(left), 2)
        self.assertEqual(rc.totals["plans_left"], 2)

        def boom(dev):
            raise RuntimeError("no instance")
        rc.step_naive = boom  # an error: dropped, the step goes on
        st.limit = 990 * MiB
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b1", "b2"])
        self.assertIsNone(rc.step_naive)

    def test_a_cut_during_the_forward_leaves_two_plans_and_a_cache_always_handed_leaves_two(self):
        torch, st, net, ck, rc = self.setup()
        left = []
        rc.step_naive = left.append
        for _ in range(3):
            step(st, net, ck, 1000 * MiB)
        self.cut_after_cache(st, net)
        with self.assertWarns(RuntimeWarning):
            self.assertEqual(step(st, net, ck, 1400 * MiB), [])
        self.assertEqual(len(left), 1)  # the rest of the cut step
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "b2"])
        self.assertEqual(len(left), 2)  # its plan came from the step that ran plain
        step(st, net, ck, 1000 * MiB)
        self.assertEqual(len(left), 2)
        # a program that hands its blocks a cache whatever the config says:
        # every chosen call plain, every step; two plans left, then no more
        rc._config = None  # (out of the recomputation's reach: it cannot turn it off)
        net.config = SimpleNamespace(use_cache=True)
        st.limit = 400 * MiB
        for _ in range(5):
            self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertEqual(len(left), 4)

    def test_relief_to_come_counts_the_blocks_that_ran_without_recomputing(self):
        torch, st, net, ck, rc = self.setup()  # gains 10, 20, 30 MiB; policy all
        for _ in range(3):
            step(st, net, ck, 1000 * MiB)
        self.assertEqual(rc.relief_to_come(500 * MiB), 60 * MiB)  # none recomputed
        self.cut_after_cache(st, net)
        with self.assertWarns(RuntimeWarning):
            step(st, net, ck, 1400 * MiB)  # every block plain (the cache)
        self.assertEqual(rc.relief_to_come(500 * MiB), 60 * MiB)
        step(st, net, ck, 1000 * MiB)  # every block recomputed
        self.assertEqual(rc.relief_to_come(500 * MiB), 0)
        self.assertEqual(rc.relief_to_come(64 * GiB), 0)  # uncut: nothing to come
        torch, st, net, blocks, ck, rc = setup([10, 20, 30], policy="all")
        step(st, net, ck, 1000 * MiB)  # every gain learned
        net.skip = {1}
        step(st, net, ck, 1000 * MiB)  # uncut, block 1 not run
        self.assertEqual(rc.relief_to_come(500 * MiB), 40 * MiB)  # blocks 0 and 2

    def test_use_cache_left_alone_when_off_or_absent(self):
        torch, st, net, ck, rc = self.setup()
        net.config.use_cache = False
        for _ in range(3):
            step(st, net, ck, 1000 * MiB)
        st.limit = 500 * MiB
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "b2"])
        st.limit = 64 * GiB
        step(st, net, ck, 1000 * MiB)
        self.assertIs(net.config.use_cache, False)  # not turned on: it was off


class PlainTest(unittest.TestCase):
    def cut(self):
        torch, st, net, blocks, ck, rc = setup([10, 30], policy="all")
        step(st, net, ck, 1000 * MiB)
        st.limit = 500 * MiB
        return torch, st, net, blocks, ck, rc

    def assert_plain(self, torch, st, net, blocks, ck, rc, reads=False):
        decisions, nreads = rc.totals["decisions"], len(st.reads)
        before = [len(b.seen) for b in blocks]
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertEqual(ck.calls, [])
        self.assertEqual([len(b.seen) for b in blocks], [n + 1 for n in before])
        self.assertEqual(rc.totals["decisions"], decisions)
        if not reads:
            self.assertEqual(len(st.reads), nreads)
        self.assertEqual(rc.totals["recomputed_calls"], 0)

    def plain_while(self, on, off, reads=False):
        """on(t) makes the condition hold: the step runs plain; off(t) ends
        it: the next step recomputes again."""
        t = self.cut()
        on(t)
        self.assert_plain(*t, reads=reads)
        off(t)
        self.assertEqual(step(t[1], t[2], t[4], 1000 * MiB), ["b0", "b1"])

    def test_plain_without_gradients(self):
        self.plain_while(lambda t: setattr(t[0], "grad_enabled", False),
                         lambda t: setattr(t[0], "grad_enabled", True))

    def test_plain_in_eval_mode(self):
        self.plain_while(lambda t: t[2].eval(), lambda t: t[2].train())

    def test_plain_while_a_graph_is_captured(self):
        self.plain_while(lambda t: setattr(t[0], "capturing", True),
                         lambda t: setattr(t[0], "capturing", False))

    def test_plain_while_compiling(self):
        self.plain_while(lambda t: setattr(t[0], "compiling", True),
                         lambda t: setattr(t[0], "compiling", False))

    def program_checkpoints(self, on, off):
        """on(torch): the blocks run under the program's own checkpoint:
        plain, and not chosen again until a forward of them ran outside
        it (off): that step runs them plain too, the next recomputes."""
        t = self.cut()
        torch, st, net, blocks, ck, rc = t
        on(torch)
        self.assert_plain(*t, reads=True)
        self.assertEqual(rc.programs, [True, True])
        self.assertEqual(rc._choose(st.limit)[0], frozenset())
        off(torch)
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        self.assertEqual(rc.programs, [False, False])
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1"])

    def test_plain_inside_a_backward_pass(self):
        # the program's reentrant checkpoint runs the block's forward again
        # in its backward: not checkpointed a second time
        self.program_checkpoints(lambda torch: setattr(torch, "task", 7),
                                 lambda torch: setattr(torch, "task", -1))

    def test_plain_under_the_programs_saved_tensor_hooks(self):
        # a non-reentrant checkpoint's hooks (any but the offload's)
        def pack(t):
            return t
        self.program_checkpoints(lambda torch: setattr(torch, "hooks", (pack, pack)),
                                 lambda torch: setattr(torch, "hooks", None))

    def test_the_offloads_own_hooks_leave_blocks_to_recompute(self):
        def pack(t):
            return t
        pack.__module__ = "libvmem_offload"
        t = self.cut()
        t[0].hooks = (pack, pack)
        self.assertEqual(step(t[1], t[2], t[4], 1000 * MiB), ["b0", "b1"])
        self.assertEqual(t[5].programs, [False, False])

    def test_a_top_hooks_query_without_its_argument(self):
        t = self.cut()
        torch = t[0]

        def pack(t):
            return t
        torch._C._autograd._top_saved_tensors_default_hooks = lambda: (pack, pack)
        rc = rcm.Recompute(torch, t[2], t[1].read, policy="all", checkpoint=t[4])
        self.assertEqual(rc._plain(), "program")

    def test_a_torch_without_the_queries_is_not_plain(self):
        t = self.cut()
        del t[0]._C
        rc = rcm.Recompute(t[0], t[2], t[1].read, policy="all", checkpoint=t[4])
        self.assertIsNone(rc._task_id)
        self.assertIsNone(rc._top_hooks)
        self.assertIsNone(rc._plain())

    def test_plain_without_statistics(self):
        self.plain_while(lambda t: setattr(t[1], "none", True),
                         lambda t: setattr(t[1], "none", False), reads=True)


class RemoveTest(unittest.TestCase):
    def test_remove_gives_the_blocks_their_forward_back(self):
        torch, st, net, blocks, ck, rc = setup([10, 30], policy="all")
        own = Block(st, 2 * MiB, name="own")

        def own_forward(x=None, scale=1):
            st.log.append("own-forward")
            return out_tensor(MiB)
        own.forward = own_forward
        net.layers = ModuleList(blocks + [own])
        rc.remove()
        rc = rcm.Recompute(torch, net, st.read, policy="all", checkpoint=ck)
        self.assertEqual(len(rc.blocks), 3)
        kept = blocks[0].forward  # a wrapper held somewhere
        step(st, net, ck, 1000 * MiB)
        st.limit = 500 * MiB
        self.assertEqual(step(st, net, ck, 1000 * MiB), ["b0", "b1", "own-forward"])
        rc.remove()
        self.assertNotIn("forward", blocks[0].__dict__)
        self.assertIs(blocks[0].forward.__func__, Block.forward)
        self.assertIs(own.forward, own_forward)
        nreads = len(st.reads)
        self.assertEqual(step(st, net, ck, 1000 * MiB), [])
        kept("x")
        self.assertEqual(len(st.reads), nreads)
        self.assertEqual(st.log[-4:], ["b0", "b1", "own-forward", "b0"])

    def test_install_uninstall_and_stats(self):
        torch, st = FakeTorch(), Stats()
        saved = rcm._reader
        rcm._reader = lambda lib_mod: st.read  # libvmem's statistics: the test's
        try:
            self.assertEqual(rcm.stats(), {"installed": False})
            b1 = [Block(st, name="a%d" % k) for k in range(2)]
            b2 = [Block(st, name="b%d" % k) for k in range(3)]
            r1 = rcm.install(None, torch, Net(b1))
            s = rcm.stats()
            self.assertEqual((s["installed"], s["blocks"], s["policy"], s["need"]),
                             (True, 2, "auto", None))
            r2 = rcm.install(None, torch, Net(b2), policy="all")
            s = rcm.stats()
            self.assertEqual([m["blocks"] for m in s["models"]], [2, 3])
            rcm.uninstall(r1)
            self.assertFalse(any("forward" in b.__dict__ for b in b1))
            self.assertTrue(all("forward" in b.__dict__ for b in b2))
            self.assertEqual(rcm.stats()["policy"], "all")
            rcm.uninstall()
            self.assertFalse(any("forward" in b.__dict__ for b in b2))
            self.assertEqual(rcm.stats(), {"installed": False})
            self.assertIs(r2.enabled, False)
        finally:
            rcm._reader = saved
            rcm.uninstall()


if __name__ == "__main__":
    unittest.main()
