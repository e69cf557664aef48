"""Recomputation of repeated blocks while a job is cut (issue 11).

A job cut below what its step needs must keep some of its saved activations
somewhere other than the device.  The offload (libvmem_offload) moves them
through the host link, out in the forward pass and back in the backward: at
about 55 GB/s each way that is some 36 ms per GB on an H100 or H200, and the
phase floor (docs/placement.md) says no schedule of copies does better.
Recomputing them instead costs one more forward pass of the blocks that
produced them: a transformer block or a ResNet bottleneck recomputes a GB of
its saved tensors in a few milliseconds.  Bytes that are never kept need not
cross the link.

This module finds a model's repeated blocks (the children of an
nn.ModuleList or nn.Sequential of which at least two share a class and are
themselves made of modules, at the innermost level where such lists occur:
a transformer's layers, a ResNet's bottlenecks, a ConvNeXt's blocks) and
wraps each one's forward.  While libvmem's limit is below what the last
uncut step needed, the wrapper runs the chosen blocks through
torch.utils.checkpoint (non-reentrant, the RNG state preserved): their
saved tensors are dropped after the forward pass and recomputed at the start
of their backward.  Which blocks: by default ("auto") the ones whose forward
left the most bytes in use in the last uncut pass, until their sum covers
what the step needed above the limit, plus the largest one's (the
recomputation itself holds one block's tensors at a time) and a margin;
"all" recomputes every block while cut.  What recomputation does not cover,
the offload and libvmem's placement still take.  When the limit is raised
back to the step's need the wrappers call the blocks as they are.

Contract: a recomputed block must compute the same thing twice from the
same inputs and RNG state (torch.utils.checkpoint's contract).  Batch
normalisation's running statistics are the one side effect handled here:
the recomputation leaves them as the forward pass set them.  Blocks found
here (not named with blocks=) are also checked while the job runs uncut: a
block is recomputed only if two of its forward passes after the first left
every attribute, parameter and buffer of its modules as they were (batch
normalisation's statistics aside), and neither it, its modules nor the
process have forward or backward hooks that a second forward would run
again (_Purity).  A block that fails is never recomputed (a warning names
its class and why); with require_safe (install_torch's default, which
found the model itself) a block not yet checked is not recomputed either.
Nothing is recomputed while gradients are off, the module is in eval mode,
a CUDA graph is being captured, or torch.compile is tracing.  A block the
program already runs under its own torch.utils.checkpoint (transformers'
gradient_checkpointing_enable, say) or other saved tensor hooks than
libvmem's offload's, or whose forward runs inside a backward pass (a
reentrant checkpoint recomputing it), runs plain and is not chosen again
until a forward of it runs outside them: a checkpoint nested in the
program's would recompute the recomputation, and a non-reentrant one must
see the same calls in its forward and its recomputation.  "auto" also
leaves out a block that left less than MIN_GAIN bytes in use in its last
uncut forward: it relieves nothing.
docs/placement.md, "Recomputation".
"""

import threading
import warnings

__all__ = ["find_blocks", "Recompute", "install", "uninstall", "stats"]


def _is_container(torch, m):
    nn = torch.nn
    return isinstance(m, (nn.ModuleList, nn.Sequential))


def _has_params(m):
    for _ in m.parameters():
        return True
    return False


def _repeated(torch, container):
    """The children of container that repeat: at least two of one class,
    each with parameters and sub-modules of its own."""
    by_class = {}
    for child in container.children():
        if _has_params(child) and any(True for _ in child.children()):
            by_class.setdefault(type(child), []).append(child)
    out = []
    for child in container.children():
        group = by_class.get(type(child))
        if group is not None and len(group) >= 2:
            out.append(child)
    return out


def find_blocks(torch, model):
    """The model's repeated blocks in the order the model registers them
    (for the usual models, the order the forward pass runs them): the
    repeating children of ModuleLists and Sequentials, at the innermost
    level (a block that contains repeated blocks itself is not one)."""
    cands = []
    for m in model.modules():
        if _is_container(torch, m):
            cands.extend(_repeated(torch, m))
    chosen = set(id(c) for c in cands)
    inner = []
    for c in cands:
        if not any(id(d) in chosen for d in c.modules() if d is not c):
            inner.append(c)
    seen, out = set(), []
    for c in inner:  # a module registered twice is wrapped once
        if id(c) not in seen:
            seen.add(id(c))
            out.append(c)
    return out


def _tensor_bytes(torch, out):
    """Bytes of the tensors in a block's output (a tensor, or a tuple, list
    or dict of them, one level deep)."""
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    vals = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    n = 0
    for v in vals:
        if isinstance(v, torch.Tensor):
            n += v.numel() * v.element_size()
    return n


class _BatchNormGuard:
    """Keeps batch normalisation's running statistics (and its count of
    batches) as the forward pass left them while a block is recomputed: a
    second forward in training mode would update them twice."""

    def __init__(self, torch, block):
        base = torch.nn.modules.batchnorm._BatchNorm
        self.mods = [m for m in block.modules()
                     if isinstance(m, base) and m.track_running_stats]
        self.saved = None

    def __enter__(self):
        if self.mods:
            self.saved = [(m.running_mean.clone() if m.running_mean is not None else None,
                           m.running_var.clone() if m.running_var is not None else None,
                           m.num_batches_tracked.clone()
                           if m.num_batches_tracked is not None else None)
                          for m in self.mods]
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            for m, vals in zip(self.mods, self.saved):
                for name, v in zip(("running_mean", "running_var", "num_batches_tracked"), vals):
                    cur = getattr(m, name)
                    if v is not None and cur is not None:
                        cur.copy_(v)
            self.saved = None
        return False


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks")


class _Purity:
    """Whether a block may run its forward twice: checked on its plain
    (uncut) forward passes after the first (which may build state lazily).
    A pass that changes an attribute of one of the block's modules (a new
    object assigned), adds or removes one, or changes a parameter or buffer
    in place (its version) or by assignment, makes the block unsafe;
    batch normalisation's running statistics, which the recomputation
    restores (_BatchNormGuard), are not counted.  So do forward or backward
    hooks on its modules, or global module hooks: a second forward would run
    them again.  CHECKS clean passes make it safe; then it is not checked
    again.  state: None (unknown), True, or False with reason."""

    CHECKS = 2

    def __init__(self, torch, block, guard):
        self.torch = torch
        self.block = block
        self.skip = set()  # (module id, buffer name) the guard restores
        for m in guard.mods:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.skip.add((id(m), name))
        self.state = None
        self.reason = None
        self.calls = 0
        self.clean = 0

    def wants(self):
        """Whether the next plain forward is checked (and counted)."""
        if self.state is not None:
            return False
        self.calls += 1
        return self.calls > 1

    def _hooks(self):
        mod = getattr(getattr(self.torch.nn, "modules", None), "module", None)
        for name in _GLOBAL_HOOKS:
            if getattr(mod, name, None):
                return "global module hooks are registered (%s)" % name
        for m in self.block.modules():
            for name in _HOOKS:
                if getattr(m, name, None):
                    return "%s has %s" % (type(m).__name__, name.lstrip("_").replace("_", " "))
        return None

    def _state(self, m):
        """Module m's attributes (by identity) and its parameters and buffers
        (identity and version), the guard's aside."""
        attrs = {k: id(v) for k, v in m.__dict__.items()}
        tens = {}
        for kind in ("_parameters", "_buffers"):
            for k, t in (getattr(m, kind, None) or {}).items():
                if t is not None and (id(m), k) not in self.skip:
                    tens[(kind, k)] = (id(t), getattr(t, "_version", None))
        return attrs, tens

    def snapshot(self):
        return [(m,) + self._state(m) for m in self.block.modules()]

    def _changed(self, before):
        """What the forward changed since snapshot() gave before, or None."""
        for m, attrs, tens in before:
            now, now_tens = self._state(m)
            if now != attrs:
                keys = sorted(set(now) ^ set(attrs)) or \
                    sorted(k for k in now if now[k] != attrs.get(k))
                return "forward sets %s.%s" % (type(m).__name__, keys[0])
            moved = [k for (kind, k), v in tens.items() if now_tens.get((kind, k)) != v]
            if moved:
                return "forward changes %s.%s in place" % (type(m).__name__, moved[0])
        return None

    def check(self, before):
        """After a checked forward: compares with snapshot() taken before."""
        why = self._hooks() or self._changed(before)
        if why is not None:
            self.state, self.reason = False, why
            return
        self.clean += 1
        if self.clean >= self.CHECKS:
            self.state = True


_PLAIN_TYPES = (bool, int, float, complex, str, bytes, type(None))

# "auto" leaves out a block whose last uncut forward left fewer bytes in use
# than this: it relieves nothing a recomputation would pay for (a block the
# program already runs under torch.utils.checkpoint leaves only its output).
MIN_GAIN = 1 << 20


def _plain_types(torch):
    """The argument types a second forward can take again as they are."""
    return _PLAIN_TYPES + tuple(t for t in (getattr(torch, n, None) for n in
                                            ("Tensor", "dtype", "device", "Size"))
                                if isinstance(t, type))


def _stateless(torch, v, depth=0, types=None):
    """Whether v is an argument a second forward can take again as it is:
    a tensor, None, a number, a string, a dtype or device, or a tuple, list
    or dict of those.  Anything else (a key/value cache object, say) may
    hold state the first forward changed.  types: _plain_types(torch)."""
    types = types or _plain_types(torch)
    if isinstance(v, types):
        return True
    if depth < 3 and isinstance(v, (tuple, list)):
        return all(_stateless(torch, x, depth + 1, types) for x in v)
    if depth < 3 and isinstance(v, dict):
        return all(_stateless(torch, x, depth + 1, types) for x in v.values())
    return False


def _stateful_arg(torch, args, kwargs):
    """The first argument of a call that is not _stateless, as a name, or None."""
    types = _plain_types(torch)
    for k, v in list(enumerate(args)) + list(kwargs.items()):
        if not _stateless(torch, v, 0, types):
            return "%s (a %s)" % (k if isinstance(k, str) else "argument %d" % k,
                                  type(v).__name__)
    return None


def _model_config(model):
    """The transformers-style config (one with use_cache) of model, or of
    the model a wrapper holds (DistributedDataParallel's .module,
    torch.compile's ._orig_mod); None without one."""
    for m in (model, getattr(model, "module", None), getattr(model, "_orig_mod", None)):
        cfg = getattr(m, "config", None) if m is not None else None
        if cfg is not None and hasattr(cfg, "use_cache"):
            return cfg
    return None


def _not_recomputed(chosen, ran, done):
    """Of the blocks chosen, those a step ran without recomputing (ran:
    the blocks it ran; done: those it recomputed): the bytes they left in
    use there are what recomputation takes off from now on."""
    return (chosen & ran) - done


# steps whose plans a choice leaves (Recompute._leave_plan): the one it is made
# in and the next (a cut made during a step recomputes from the next)
LEAVE_STEPS = 2


class Recompute:
    """The wrapped blocks of one model and the rule that chooses which of
    them recompute.

    read(device) -> (limit, device bytes in use, the last step's demand:
    device plus host bytes at its maximum, step ends so far) or None:
    libvmem's statistics (tests pass their own).  policy: "auto" (enough
    blocks to cover the cut, by the bytes each left in use) or "all".
    check (default: blocks is None): check each block's forward (_Purity)
    and never recompute one that fails.  require_safe: recompute only
    blocks the check passed.  checkpoint: torch.utils.checkpoint.checkpoint's
    stand-in (tests)."""

    def __init__(self, torch, model, read, blocks=None, policy="auto", margin_frac=0.05,
                 checkpoint=None, check=None, require_safe=False):
        if policy not in ("auto", "all"):
            raise ValueError("recompute policy %r: expected \"auto\" or \"all\"" % (policy,))
        self.torch = torch
        self.read = read
        self.checkpoint = checkpoint  # None: torch.utils.checkpoint.checkpoint
        self.policy = policy
        self.margin_frac = margin_frac
        self.blocks = list(blocks) if blocks is not None else find_blocks(torch, model)
        self.gain = [None] * len(self.blocks)  # bytes a block left in use, uncut
        self.guards = [_BatchNormGuard(torch, b) for b in self.blocks]
        if check is None:
            check = blocks is None
        self.require_safe = bool(require_safe and check)
        self.purity = [_Purity(torch, b, g) if check else None
                       for b, g in zip(self.blocks, self.guards)]
        self._warned = set()
        # the backward pass's task in progress (-1: none), the top of the
        # saved tensor hooks' stack; None: not known here
        c = getattr(torch, "_C", None)
        self._task_id = getattr(c, "_current_graph_task_id", None)
        self._top_hooks = getattr(getattr(c, "_autograd", None),
                                  "_top_saved_tensors_default_hooks", None)
        import libvmem_offload  # the offload's own reading of that top
        self._read_top = libvmem_offload.top_hooks
        # blocks last seen under the program's own checkpoint (_plain)
        self.programs = [False] * len(self.blocks)
        # transformers' models fill a key/value cache in the forward when
        # config.use_cache is on (GPT-2's default): a cache a recomputed
        # block would fill twice.  While blocks recompute it is turned off,
        # as transformers' own gradient checkpointing does, and given back
        # when they stop; calls that still get a cache object run plain.
        self._config = _model_config(model)
        self._cache_off = False
        # ... and the choice is made before the model's own forward starts,
        # where it makes that cache: a cut between steps then recomputes
        # from its first step instead of running it plain (_before_model)
        self._pre_hook = None
        if self._config is not None and hasattr(model, "register_forward_pre_hook"):
            self._pre_hook = model.register_forward_pre_hook(self._before_model)
        self.need = None       # the demand of the last step with nothing recomputed
        self.enabled = True
        self.lock = threading.Lock()
        self._key = None       # (step ends, limit, need) the chosen set was decided for
        self._chosen = frozenset()
        self._step_calls = 0   # blocks recomputed in the step in progress
        self._step_ran = set()   # blocks run in the step in progress (training)
        self._step_done = set()  # of them, those recomputed (not run plain)
        self._prev_ran, self._prev_done = set(), set()  # the same of the last step
        # step_naive(device): libvmem's vmem_step_naive (install sets it).
        # Called where a decision chooses blocks that ran in the last step
        # without recomputing: the step's placement plan comes from that
        # step, whose allocations recomputation now changes (a cut's first
        # steps, a deeper cut), so the rest of the step goes by naive
        # placement, as the offload does at a cut
        self.step_naive = None
        self._left = [None, 0]  # (limit, chosen) the plans were left for, how many times
        self._steps = None
        self.totals = {"recomputed_calls": 0, "recomputed_bytes": 0, "recomputations": 0,
                       "steps_active": 0, "decisions": 0, "plain_stateful_calls": 0,
                       "plans_left": 0}
        self.last = {"chosen": 0, "deficit": 0, "covered": 0, "need": None, "limit": None}
        self._orig = []
        for k, b in enumerate(self.blocks):
            self._orig.append(b.__dict__.get("forward"))
            b.forward = self._wrapper(k, b, b.forward)

    # -- the decision ----------------------------------------------------

    def _choose(self, limit):
        """The blocks to recompute under limit, from the learned need and
        gains: (indices, deficit, covered), the last two None where the
        choice did not weigh gains."""
        if self.need is None or limit >= self.need:
            return frozenset(), None, None
        cand = [k for k in range(len(self.blocks)) if self._may(k)]
        if self.policy == "auto":  # blocks that leave (next to) nothing: not worth it
            cand = [k for k in cand if self.gain[k] is None or self.gain[k] >= MIN_GAIN]
        known = [self.gain[k] for k in cand if self.gain[k] is not None]
        if not cand:
            return frozenset(), None, None
        if self.policy == "all" or len(known) < len(cand):
            return frozenset(cand), None, None
        deficit = self.need - limit + max(known) + int(self.margin_frac * limit)
        order = sorted(cand, key=lambda k: (-self.gain[k], k))
        chosen, covered = [], 0
        for k in order:
            if covered >= deficit:
                break
            chosen.append(k)
            covered += self.gain[k]
        return frozenset(chosen), deficit, covered

    def _may(self, k):
        """Whether block k may be recomputed, as far as its check goes (and
        the program does not checkpoint it itself)."""
        if self.programs[k]:
            return False
        p = self.purity[k]
        if p is None:
            return True
        return p.state is True or (p.state is None and not self.require_safe)

    def _use_cache(self, recomputing):
        """config.use_cache off while blocks recompute, back on after."""
        cfg = self._config
        if cfg is None:
            return
        if recomputing and not self._cache_off and getattr(cfg, "use_cache", None) is True:
            cfg.use_cache = False
            self._cache_off = True
            if "use_cache" not in self._warned:
                self._warned.add("use_cache")
                warnings.warn("libvmem: the model's config.use_cache is off while blocks "
                              "recompute (a key/value cache filled in the forward cannot be "
                              "recomputed; transformers' gradient checkpointing does the same)",
                              RuntimeWarning, stacklevel=4)
        elif not recomputing and self._cache_off:
            cfg.use_cache = True
            self._cache_off = False

    def _relieving(self, limit):
        """The blocks whose gains recomputation would take off a step under
        limit (the lock held); None while a gain is unknown."""
        try:
            self._observe(self.torch.cuda.current_device())  # the last step's need
        except Exception:  # no device to read: what is known already
            pass
        if any(self.gain[k] is None for k in range(len(self.blocks)) if self._may(k)):
            return None
        return self._choose(limit)[0]

    def relief(self, limit):
        """The bytes recomputation will take off a step under limit: the
        gains of the blocks it would choose (0 while any is unknown, or
        uncut).  The offload starts a cut's first budget from the demand
        less them (libvmem_offload.Offload.relief)."""
        with self.lock:
            chosen = self._relieving(limit)
            return sum(self.gain[k] for k in chosen) if chosen else 0

    def relief_to_come(self, limit):
        """At a step end: the bytes recomputation will take off the next
        step under limit that it did not take off the step that ended: the
        gains of the blocks it would choose that ran in that step without
        recomputing (not chosen then, or run plain: in a cut's first step a
        transformers model may have made its cache already).  A block the
        step did not run left nothing to take off.  The offload learns its
        next budget from the step that ended less these
        (Offload.relief_next)."""
        with self.lock:
            ran, done = self._step_ran, self._step_done  # (a step end starts new sets)
            chosen = self._relieving(limit)
            if not chosen:
                return 0
            return sum(self.gain[k] for k in _not_recomputed(chosen, ran, done))

    def _before_model(self, module, args):
        """The model's forward pre-hook (a model with a config): decides
        for the step before the model reads config.use_cache, so that a
        step under a new cut makes no key/value cache its blocks would have
        to run plain for, and the first step after a raise makes it again."""
        if (not self.enabled or not getattr(module, "training", False) or
                (getattr(self._config, "use_cache", None) is not True and
                 not self._cache_off) or
                self._plain() is not None):
            return None
        try:
            dev = self.torch.cuda.current_device()
        except Exception:  # no device: the blocks decide when they run
            return None
        with self.lock:
            self._decide(dev)
        return None

    def _observe(self, device):
        """Reads the statistics; the first read after a step end learns the
        need from that step if it recomputed nothing.  The read, or None."""
        s = self.read(device)
        if s is None:
            return None
        limit, in_use, demand, steps = s
        if steps != self._steps:  # a step ended since the last look
            if self._steps is not None:
                if self._step_calls == 0 and demand > 0:
                    self.need = demand  # a step with nothing recomputed: what it needs
                elif self._step_calls:
                    self.totals["steps_active"] += 1
            self._steps = steps
            self._step_calls = 0
            self._prev_ran, self._prev_done = self._step_ran, self._step_done
            self._step_ran = set()
            self._step_done = set()
        return s

    def _decide(self, device):
        s = self._observe(device)
        if s is None:
            return None
        limit, steps = s[0], s[3]
        key = (steps, limit, self.need)
        if key != self._key:
            self._key = key
            self._chosen, deficit, covered = self._choose(limit)
            self._use_cache(bool(self._chosen))
            if self._chosen and self.step_naive is not None and \
                    _not_recomputed(self._chosen, self._prev_ran, self._prev_done):
                self._leave_plan(device, limit)
            if deficit is not None:
                self.last.update(deficit=deficit, covered=covered)
            self.totals["decisions"] += 1
            self.last.update(chosen=len(self._chosen), need=self.need, limit=limit)
        return s

    def _leave_plan(self, device, limit):
        """step_naive for this step (the lock held), at most LEAVE_STEPS
        times under one limit and choice: a step whose chosen calls run
        plain every time (the program hands them a cache itself) keeps
        its plans after that."""
        what = (limit, self._chosen)
        if self._left[0] != what:
            self._left = [what, 0]
        if self._left[1] >= LEAVE_STEPS:
            return
        self._left[1] += 1
        self.totals["plans_left"] += 1
        try:
            self.step_naive(device)
        except Exception:  # no libvmem instance to tell: the plan stays
            self.step_naive = None

    # -- the wrapper -----------------------------------------------------

    def _plain(self):
        """Why a block's call now runs as it is: None (it may recompute),
        True, or "program" (inside the program's own checkpoint or saved
        tensor hooks, or a backward pass)."""
        torch = self.torch
        if not torch.is_grad_enabled():
            return True
        comp = getattr(torch, "compiler", None)
        if comp is not None and getattr(comp, "is_compiling", None) and comp.is_compiling():
            return True
        cuda = torch.cuda
        if cuda.is_available() and cuda.is_current_stream_capturing():
            return True
        # inside a backward pass: the program's own reentrant checkpoint
        # running the block again (its first forward ran without gradients)
        task = self._task_id
        if task is not None and task() != -1:
            return "program"
        # saved tensor hooks other than the offload's: a non-reentrant
        # checkpoint (or the program's own offload) has the saved tensors
        if self._top_hooks is not None:
            top = self._read_top(self._top_hooks)
            if top is not None:
                mod = getattr(top[0], "__module__", None) or ""
                if mod.rsplit(".", 1)[-1] != "libvmem_offload":
                    return "program"
        return None

    def _wrapper(self, k, block, forward):
        guard = self.guards[k]

        def wrapped(*args, **kwargs):
            if not self.enabled or not block.training:
                return forward(*args, **kwargs)
            why = self._plain()
            if why is not None:
                if why == "program" and not self.programs[k]:
                    self.programs[k] = True
                    self._key = None  # decided again without it
                return forward(*args, **kwargs)
            torch = self.torch
            dev = torch.cuda.current_device()
            with self.lock:
                s = self._decide(dev)
                chosen = s is not None and k in self._chosen
                if chosen:
                    self._step_calls += 1
                self._step_ran.add(k)
            if s is None:
                return forward(*args, **kwargs)
            if chosen:
                why = _stateful_arg(torch, args, kwargs)
                if why is not None:  # state a second forward would change: plain
                    with self.lock:  # (still counted in _step_calls: a cut step
                        # does not teach the need)
                        self.totals["plain_stateful_calls"] += 1
                    self._warn(k, "it was called with %s, which a second forward could "
                                  "change" % why, key="arg:" + type(block).__name__)
                    return forward(*args, **kwargs)
            if not chosen:
                if self.programs[k]:  # outside the program's checkpoint again
                    self.programs[k] = False
                    self._key = None
                measure = self.need is None or s[0] >= self.need
                before = s[1]
                pur = self.purity[k]
                snap = pur.snapshot() if pur is not None and pur.wants() else None
                out = forward(*args, **kwargs)
                if snap is not None:
                    pur.check(snap)
                    if pur.state is False:
                        self._warn(k, pur.reason)
                if measure:  # uncut: the bytes this block leaves in use
                    after = self.read(dev)
                    if after is not None:
                        self.gain[k] = max(0, after[1] - before - _tensor_bytes(torch, out))
                return out
            calls = [0]

            def run(*a, **kw):
                calls[0] += 1
                if calls[0] == 1:
                    return forward(*a, **kw)
                self.totals["recomputations"] += 1
                with guard:
                    return forward(*a, **kw)
            self.totals["recomputed_calls"] += 1
            with self.lock:
                self._step_done.add(k)
            if self.gain[k]:
                self.totals["recomputed_bytes"] += self.gain[k]
            ck = self.checkpoint
            if ck is None:
                from torch.utils.checkpoint import checkpoint as ck
            return ck(run, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)
        wrapped.__wrapped__ = forward
        return wrapped

    def _warn(self, k, reason, key=None):
        name = type(self.blocks[k]).__name__
        if (key or name) in self._warned:
            return
        self._warned.add(key or name)
        warnings.warn("libvmem: %s blocks are not recomputed while the job is cut: %s "
                      "(libvmem.recompute(model, blocks=[...]) names blocks to recompute "
                      "regardless; docs/embedding.md)" % (name, reason), RuntimeWarning,
                      stacklevel=3)

    def remove(self):
        """Gives each block its own forward back."""
        for b, orig in zip(self.blocks, self._orig):
            if orig is None:
                b.__dict__.pop("forward", None)
            else:
                b.forward = orig
        self.enabled = False
        if self._pre_hook is not None:
            self._pre_hook.remove()
            self._pre_hook = None
        self._use_cache(False)

    def stats(self):
        out = {"installed": True, "blocks": len(self.blocks), "policy": self.policy,
               "need": self.need, "chosen": len(self._chosen),
               "gains": list(self.gain),
               "checked": sum(1 for p in self.purity if p is not None and p.state is True),
               "unsafe": {k: p.reason for k, p in enumerate(self.purity)
                          if p is not None and p.state is False},
               "require_safe": self.require_safe}
        out.update(self.totals)
        out["last"] = dict(self.last)
        return out


_rc = []


def _reader(lib_mod):
    import libvmem_offload
    read = libvmem_offload._stats_reader(lib_mod)

    def r(device):
        s = read(device)
        if s is None:
            return None
        return s.limit, s.device_in_use, s.step_device_max + s.step_host_max, s.steps
    return r


def install(lib_mod, torch, model, blocks=None, policy="auto", require_safe=False):
    """Wraps model's repeated blocks (or blocks=) for recomputation while cut;
    returns the Recompute."""
    rc = Recompute(torch, model, _reader(lib_mod), blocks=blocks, policy=policy,
                   require_safe=require_safe)
    rc.step_naive = getattr(lib_mod, "step_naive", None)
    _rc.append(rc)
    import libvmem_offload
    off = libvmem_offload._off
    if off is not None and off.relief is None:  # the offload's first budget under a cut
        off.relief = rc.relief
        off.relief_next = rc.relief_to_come  # and the budget learned at a step end
    return rc


def uninstall(rc=None):
    """Unwraps rc's blocks (every model's when rc is None)."""
    import libvmem_offload
    off = libvmem_offload._off
    for r in list(_rc):
        if rc is None or r is rc:
            r.remove()
            _rc.remove(r)
            if off is not None and getattr(off.relief, "__self__", None) is r:
                off.relief = None
                off.relief_next = None


def stats():
    """Counters of every wrapped model ({"installed": False} without one)."""
    if not _rc:
        return {"installed": False}
    if len(_rc) == 1:
        return _rc[0].stats()
    return {"installed": True, "models": [r.stats() for r in _rc]}
