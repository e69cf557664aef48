#!/bin/bash
# held/live on the vmm backend: new library (build-gpu) and 73d8ff2's (.carry/oldlib)
nvidia-smi --query-gpu=name --format=csv,noheader
for t in bert vit gpt2accum seg; do
  f=.carry/traces/trace_$t.txt.gz; [ -f $f ] || f=tests/data/trace_$t.txt.gz
  for lib in new old; do
    b=build-gpu/bench/vmem-replay; [ $lib = old ] && b=.carry/oldlib/bench/vmem-replay
    printf "%s %s " $t $lib
    $b --backend vmm --repeat 2 $f | python3 -c 'import json,sys;d=json.loads(sys.stdin.readline());print(d["backend"], d["frag"], d["peak_reserved"], d["peak_live"], d["warm_region_allocs"], d["ns_per_op"])'
  done
done
