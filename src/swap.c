/*
 * Swap windows: the mid-step moves of the placement planner's swap rule
 * (PLACE_RULE_SWAP, docs/placement.md).
 *
 * A swapped block lives on the device from its allocation while its
 * producer and first readers run, on host memory while it waits (a saved
 * activation between the forward and the backward pass), and on the device
 * again from a little before its free, when its consumer reads it.  The
 * planner says which block moves before which allocation; this file does
 * the moves, keeping each block's address (vmm, sim-vmm: the backing of the
 * range changes under it).
 *
 * A move synchronises the device first (the backend's region move): every
 * kernel queued so far, including the producer and any reader that was
 * queued, has finished, so no kernel sees the mapping change under it and
 * no write is lost.  A kernel queued after the move reads the block where it
 * now lies: from host memory if the plan guessed the consumer too late,
 * more slowly but correctly.  Moves are skipped while a CUDA graph is being
 * captured anywhere in the process (a synchronisation would break the
 * capture; a captured graph must never see a remap).
 */
#include "vmem_internal.h"

void swap_run_due(vmem_t *v)
{
    uintptr_t addr;
    uint64_t size;
    int to_host, any = 0;
    while (place_next_move(&v->place, &addr, &size, &to_host)) {
        if (backend_capturing() || !v->host_fallback) {
            place_move_done(&v->place, to_host, 0);
            continue;
        }
        bfc_moves_t m;
        vmem_status_t st = bfc_move_live(&v->dev, (const void *)addr, to_host,
                                         to_host ? vmem_host_room(v) : 0, &m);
        place_move_done(&v->place, to_host, to_host ? m.to_host : m.to_device);
        if (st < 0)
            vmem_log(v, VMEM_LOG_WARN, "swap of %llu bytes at %#llx to %s: %s",
                     (unsigned long long)size, (unsigned long long)addr,
                     to_host ? "host" : "device", vmem_strerror(st));
        any = 1;
    }
    if (any)
        v->place.stats.swap_points++;
}
