#!/usr/bin/env python3
"""Compile kernels/dgemm.cu the way the crate does (NVRTC, common.cuh spliced in textually,
`--gpu-architecture=sm_XY --std=c++17`) and print ptxas resource usage per entry.
Usage: nvrtc_check.py [libnvrtc.so] [sm_90 sm_80 sm_75 ...]   (needs only libnvrtc, no GPU)"""
import ctypes, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "..", ".."))
args = sys.argv[1:]
lib = args.pop(0) if args and args[0].endswith((".so", ".so.12", ".so.13")) or (args and "/" in args[0]) else "libnvrtc.so"
archs = args or ["sm_90", "sm_80", "sm_75"]
nv = ctypes.CDLL(lib)
common = open(os.path.join(root, "kernels", "common.cuh")).read()
src = open(os.environ.get("DGEMM_SRC", os.environ.get("DGEMM_SRC", os.environ.get("DGEMM_SRC", os.environ.get("DGEMM_SRC", os.path.join(root, "kernels", "dgemm.cu")))))).read().replace('#include "common.cuh"', common)
assert "#include" not in src.replace("#include \"common.cuh\"", ""), "stray include"
bad = 0
for arch in archs:
    prog = ctypes.c_void_p()
    assert nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"dgemm.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"--ptxas-options=-v"]
    carr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nv.nvrtcCompileProgram(prog, len(opts), carr)
    n = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    print(f"== {arch}: nvrtc rc={rc}")
    if rc != 0:
        print(text); bad = 1; continue
    fn = None
    rows = []
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m: fn = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text.split(f"'{fn}'")[1].split("Compiling")[0])
            rows.append((fn, int(m.group(1)), spill.group(0) if spill else "?"))
        if "spill" in line and not line.strip().startswith("0 bytes spill") and "0 bytes spill stores, 0 bytes spill loads" not in line:
            print("  SPILL:", fn, line.strip()); bad = 1
    if os.environ.get("CUBIN_DIR"):
        nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        nv.nvrtcGetCUBIN(prog, buf)
        open(os.path.join(os.environ["CUBIN_DIR"], f"dgemm_{arch}.cubin"), "wb").write(buf.raw)
    for fn, r, s in rows:
        print(f"  {fn:40s} regs={r:3d}  {s}")
    print(f"  entries: {len(rows)}")
sys.exit(bad)
