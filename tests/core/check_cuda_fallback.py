"""cuda=auto with a toolkit whose runtime the loader cannot find: meson setup
must build without CUDA and say why (issue 13), instead of producing binaries
that do not start.  The toolkit is a fake made here: a header declaring
cudaRuntimeGetVersion and a libcudart.so whose soname (libcudart.so.99) is
nowhere on the loader path.

    python3 check_cuda_fallback.py MESON SOURCE_ROOT
"""
import os
import shutil
import subprocess
import sys
import tempfile

meson, src = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="vmem-cuda-fallback.")
try:
    tk = os.path.join(tmp, "toolkit")
    os.makedirs(os.path.join(tk, "include"))
    os.makedirs(os.path.join(tk, "lib64"))
    with open(os.path.join(tk, "include", "cuda_runtime_api.h"), "w") as f:
        f.write("#define CUDART_VERSION 12080\n"
                "typedef int cudaError_t;\n#define cudaSuccess 0\n"
                "cudaError_t cudaRuntimeGetVersion(int *v);\n")
    stub = os.path.join(tmp, "stub.c")
    with open(stub, "w") as f:
        f.write("int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }\n")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-Wl,-soname,libcudart.so.99",
                    "-o", os.path.join(tk, "lib64", "libcudart.so"), stub], check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_ROOT", "LD_LIBRARY_PATH", "LD_PRELOAD", "MESON_TESTTHREADS")}
    env["CUDA_PATH"] = tk
    build = os.path.join(tmp, "build")
    r = subprocess.run([meson, "setup", build, src, "-Dtests=false", "-Dbench=false",
                        "-Dcjson=disabled"], capture_output=True, text=True, env=env, timeout=240)
    out = r.stdout + r.stderr
    ok = (r.returncode == 0 and "building WITHOUT CUDA" in out and "libcudart.so.99" in out
          and "CUDA            : False" in out)
    if not ok or r.returncode != 0:
        print(out[-3000:])
    found = [l for l in out.splitlines() if "CUDA" in l]
    print("\n".join(found))
    print("fallback to a CPU build: %s" % ("yes" if ok else "NO"))
    sys.exit(0 if ok else 1)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
