#!/usr/bin/env python3
"""Hold a GPU's memory as another process sharing it would: allocate device memory (through the
driver API, libcuda) until only --leave-gib GiB are free, write what is held to --ready, and
keep it until killed or --seconds pass.

kedge admits cases by the card's whole memory (cuDeviceTotalMem). With most of it held
elsewhere, cases side by side run out of device memory, which is what a shared GPU does to a
sweep: those cases must be run again alone, not reported with a verdict their neighbours caused.

    scripts/hold-device-memory.py --leave-gib 24 --ready HELD.txt [--device 0] [--seconds 900]
"""
import argparse
import ctypes
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--leave-gib", type=float, required=True, help="GiB to leave free")
p.add_argument("--ready", required=True, help="file written once the memory is held")
p.add_argument("--device", type=int, default=0)
p.add_argument("--seconds", type=float, default=900, help="hold at most this long")
a = p.parse_args()

try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    sys.exit(f"hold-device-memory: no CUDA driver ({e})")


def check(rc, what):
    if rc != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(rc, ctypes.byref(name))
        sys.exit(f"hold-device-memory: {what}: {name.value.decode() if name.value else rc}")


def mem_info():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return free.value, total.value


check(cu.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(cu.cuDeviceGet(ctypes.byref(dev), a.device), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

leave = int(a.leave_gib * (1 << 30))
held = []
chunk = 1 << 30
free, total = mem_info()
while free > leave and chunk >= (2 << 20):
    size = min(chunk, free - leave)
    if size < (2 << 20):
        break
    ptr = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
    if rc == 0:
        held.append((ptr, size))
    else:
        chunk //= 2  # out of memory at this size: smaller pieces
    free, total = mem_info()

words = (f"holding {sum(s for _, s in held) / (1 << 30):.1f} GiB of device {a.device}'s "
         f"{total / (1 << 30):.1f} GiB; {free / (1 << 30):.1f} GiB free")
print(words, flush=True)
with open(a.ready, "w") as f:
    f.write(words + "\n")

# Held until killed (the driver frees a process's memory when it ends) or the time is up.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(a.seconds)
