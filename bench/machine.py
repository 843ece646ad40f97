"""The machine a benchmark ran on, one line for every table: CPU, its vector extensions, cores, and
the BLAS and oneDNN the reference (Debian's python3-torch, /usr/bin/python3) computes with, as
loaded (Debian's torch and LibTorch both call BLAS through the libblas.so.3 alternative, so ours
runs on the same one; train_mnist says its own at start-up, and run_all.py prints that too).
"""
import os
import subprocess

TORCH_PYTHON = "/usr/bin/python3"

# Run by the reference interpreter: which file sgemm_ comes from once torch is imported, and what
# that library says of itself.
_PROBE = r"""
import ctypes, os, torch
blas = next((l.split()[-1] for l in open("/proc/self/maps") if "libblas.so" in l), "")
text = "none loaded"
if blas:
    real = os.path.realpath(blas)
    lib = ctypes.CDLL(blas)
    folder = os.path.basename(os.path.dirname(real))
    if hasattr(lib, "openblas_get_config"):
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        words = lib.openblas_get_config().decode().split()
        text = "%s, %s kernels" % (" ".join(words[:2]), lib.openblas_get_corename().decode())
    elif folder.startswith("blis"):
        text = "BLIS (%s)" % folder
    elif folder == "blas":
        text = "the reference BLAS (netlib)"
    else:
        text = "an unrecognised BLAS"
    text += " (%s)" % real
print(text + "; oneDNN " + ("on" if torch.backends.mkldnn.is_available() else "off"))
"""


# Run by the reference interpreter on every core: the best rate over ~1 s each of sgemm (torch.mm
# of 2048x2048 floats, through the BLAS) and of the MNIST net's conv2 forward (batch 100, 20 -> 20
# channels, 5x5, 14x14, channels-last: oneDNN), in GFLOP/s.
_PEAKS = r"""
import os, time, torch
torch.set_num_threads(os.cpu_count() or 1)
def best(f, flop):
    f()
    rate = 0.0
    for _ in range(4):
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < 0.25:
            f(); n += 1
        rate = max(rate, flop * n / (time.perf_counter() - start) / 1e9)
    return rate
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
x = torch.randn(100, 20, 14, 14).contiguous(memory_format=torch.channels_last)
conv = torch.nn.Conv2d(20, 20, 5, padding=2).to(memory_format=torch.channels_last)
with torch.no_grad():
    print(best(lambda: torch.mm(a, b), 2 * 2048 ** 3),
          best(lambda: conv(x), 100 * 14 * 14 * 20 * 20 * 25 * 2))
"""


def peaks():
    """{"sgemm": GFLOP/s, "conv": GFLOP/s} on every core, or {} when they cannot be measured."""
    try:
        out = subprocess.run([TORCH_PYTHON, "-c", _PEAKS], capture_output=True, text=True,
                             timeout=300)
        sgemm, conv = (float(x) for x in out.stdout.split())
        return {"sgemm": sgemm, "conv": conv}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return " ".join(x for x in ("avx2", "fma", "avx512f") if x in flags)
    return ""


def blas():
    """The reference's BLAS line, or why it is not known."""
    try:
        out = subprocess.run([TORCH_PYTHON, "-c", _PROBE], capture_output=True, text=True,
                             timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return "unknown (%s)" % e
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else "unknown (the probe failed)"


def describe():
    """'AMD EPYC (avx2 fma avx512f), 2 cores; BLAS: OpenBLAS 0.3.21, Haswell kernels (...)'."""
    return "%s (%s), %d cores; BLAS: %s" % (cpu_model(), cpu_flags(), os.cpu_count() or 1, blas())


if __name__ == "__main__":
    print(describe())
