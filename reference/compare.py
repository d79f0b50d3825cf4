#!/usr/bin/env python3
"""compare.py -- sorter's training speed beside its PyTorch twin's (make compare).

For each row (a model size and a batch size) the programs run in turn, round after round:
sorter --speed, then the twin in float64 (the same arithmetic as sorter), then the twin in
float32. Running them alternately spreads the machine's drift over all three. Each program
measures itself: training examples per second for about a second after a short warm-up. Every
row runs twice: both programs on one thread, then both on all the cores (sorter --threads N, the
twin with torch.set_num_threads(N) and OpenBLAS's N threads). The table shows the median of the
rounds and the ratio sorter / twin per round as min / median / max; then sorter's GFLOP/s as a
share of the dgemm peak of that many cores (one core's, measured here first, times N), and the
seconds of one held-out evaluation (greedy decoding) at the row's size. The twin and the peak run on the
fastest OpenBLAS kernel this CPU allows (choose_kernel), and the header says which.

Run it with a python3 that has PyTorch (make compare finds one; Debian's python3-torch is for /usr/bin/python3):
    python3 reference/compare.py [--rounds N] [--seconds S] [--rows default,mid,large] [--threads 1,N]
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path

sys.dont_write_bytecode = True  # importing the twin below must not leave a __pycache__ folder in reference/
from torch_sorter import HOW_TO_GET_TORCH, SORTER  # noqa: E402

TWIN = Path(__file__).resolve().parent / "torch_sorter.py"
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
PYTHON = sys.executable  # the twin runs on the interpreter that runs this script
# Debian's OpenBLAS, for this machine's architecture (x86_64-linux-gnu, aarch64-linux-gnu, ...)
MULTIARCH = sysconfig.get_config_var("MULTIARCH") or "none"
OPENBLAS_DIR = f"/usr/lib/{MULTIARCH}/openblas-pthread"

# name -> (d_model, heads, d_ff, layers per stack, seq_len), batch sizes
SIZES = {
    "default": ((16, 2, 32, 1, 5), (1, 32)),
    "mid": ((64, 4, 256, 2, 10), (8, 32)),
    "large": ((128, 8, 512, 4, 16), (8, 32)),
}


def model_flags(size):
    d_model, heads, d_ff, layers, seq_len = size
    return ["--d-model", str(d_model), "--heads", str(heads), "--d-ff", str(d_ff),
            "--enc-layers", str(layers), "--dec-layers", str(layers), "--seq-len", str(seq_len)]


def size_text(name, size):
    d_model, heads, d_ff, layers, seq_len = size
    return f"{name}: d_model {d_model}, heads {heads}, d_ff {d_ff}, layers {layers}+{layers}, seq_len {seq_len}"


def twin_env(threads=1, kernel=None):
    """`threads` threads everywhere, Debian's OpenBLAS when it is installed, on the kernel chosen (KERNEL)."""
    n = str(threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n,
               **(KERNEL if kernel is None else kernel))
    if Path(OPENBLAS_DIR).is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (OPENBLAS_DIR, env.get("LD_LIBRARY_PATH")) if p)
    return env


def eval_seconds_in(text):
    """The seconds of sorter's '--speed: one held-out evaluation ... in S s' line, or None."""
    found = re.search(r"^sorter --speed: one held-out evaluation .* in ([0-9.]+) s", text, re.M)
    return float(found.group(1)) if found else None


def gflops_in(text):
    """The GFLOP/s that sorter's --speed line reports for its training steps, or None."""
    found = re.search(r"^sorter --speed: .*; ([0-9.]+) GFLOP/s\)", text, re.M)
    return float(found.group(1)) if found else None


def rate_in(text, program):
    """The examples/s number of a '<program> --speed: N training examples/s' line, or None."""
    found = re.search(rf"^{program} --speed: ([0-9.,]+) training examples/s", text, re.M)
    return float(found.group(1).replace(",", "")) if found else None


def run(command, env=None):
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    return done.stdout + done.stderr


def sorter_run(size, batch, threads=1):
    """sorter --speed: (training examples/s, GFLOP/s, seconds of one held-out evaluation)."""
    text = run([str(SORTER), "--speed", *model_flags(size), "--batch", str(batch), "--threads", str(threads)])
    return rate_in(text, "sorter"), gflops_in(text), eval_seconds_in(text)


# One core's double-precision peak, as a BLAS reaches it: OpenBLAS's dgemm (torch.mm in float64,
# one thread) on square matrices, the best of three sizes, each timed for about a second; then the BLAS and its
# kernel (torch_sorter.py's blas_in_use: the script runs in reference/).
PEAK_SCRIPT = """
import time, torch
from torch_sorter import blas_in_use
torch.set_num_threads(1)
best = 0.0
for n in (256, 512, 1024):
    a, b = torch.rand(n, n, dtype=torch.float64), torch.rand(n, n, dtype=torch.float64)
    torch.mm(a, b)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        torch.mm(a, b)
        reps += 1
    best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e9)
print(f"peak {best:.1f}")
print(f"blas {blas_in_use()}")
"""


def peak_gflops(kernel=None):
    """One core's dgemm GFLOP/s (None if it could not be measured) and the OpenBLAS kernel it ran (or None)."""
    done = subprocess.run([PYTHON, "-B", "-c", PEAK_SCRIPT], capture_output=True, text=True, cwd=TWIN.parent,
                          env=twin_env(1, kernel))
    peak, ran = re.search(r"^peak ([0-9.]+)", done.stdout, re.M), re.search(r"OpenBLAS kernel (\w+)", done.stdout)
    return (float(peak.group(1)) if peak else None), (ran.group(1) if ran else None)


# OpenBLAS picks its kernel by the name the CPU gives, and on a virtual CPU that calls itself only "Intel(R) Xeon(R)
# Processor", OpenBLAS 0.3.21 falls back to its generic Prescott kernel: one core's dgemm at 9.5-15 GFLOP/s where
# SkylakeX's reached 63 on the same machine. So unless OPENBLAS_CORETYPE is set already, the twin runs on the best
# kernel this CPU's flags allow, or on OpenBLAS's own choice when that measures faster (a CPU OpenBLAS knows by
# name, such as Cooperlake, keeps its own kernel). Each kernel, with the flags it needs (as /proc/cpuinfo names them):
KERNELS = [("SkylakeX", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}), ("Haswell", {"avx2", "fma"}),
           ("Sandybridge", {"avx"})]
KERNEL = {}  # what twin_env adds: {"OPENBLAS_CORETYPE": name}, or nothing (OpenBLAS's own choice, or the user's)


def cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def choose_kernel():
    """Sets KERNEL; returns one core's dgemm peak on it, and a text saying which kernel the twin runs, and why."""
    flags = cpu_flags()
    best = next((name for name, needs in KERNELS if needs <= flags), None) if platform.machine() == "x86_64" else None
    own_peak, own = peak_gflops({})  # OpenBLAS's own choice, or the one OPENBLAS_CORETYPE names
    if own is None:
        return own_peak, "none of OpenBLAS's (the BLAS loaded is another, which chooses its own)"
    user = os.environ.get("OPENBLAS_CORETYPE")
    source = f"from OPENBLAS_CORETYPE={user} in the environment" if user else "its own choice"
    if best is None or best.lower() == own.lower():
        return own_peak, f"OpenBLAS's {own}, {source}"
    forced_peak, forced = peak_gflops({"OPENBLAS_CORETYPE": best})
    if forced != best or not forced_peak or (own_peak and forced_peak <= own_peak):
        return own_peak, (f"OpenBLAS's {own}, {source} (measured {own_peak or 0:.1f} GFLOP/s; {best}, the best this "
                          f"CPU's flags allow, {forced_peak or 0:.1f})")
    if user:  # the user's choice stays, and the header says what it costs
        return own_peak, (f"OpenBLAS's {own}, {source}; {best}, the best this CPU's flags allow, measured "
                          f"{forced_peak:.1f} GFLOP/s against {own_peak or 0:.1f}: unset OPENBLAS_CORETYPE to compare "
                          f"with it")
    KERNEL["OPENBLAS_CORETYPE"] = best
    return forced_peak, (f"OpenBLAS's {best}, the best this CPU's flags allow, set with OPENBLAS_CORETYPE={best} "
                         f"(OpenBLAS's own choice, {own}, measured {own_peak or 0:.1f} GFLOP/s)")

def twin_rate(size, batch, dtype, seconds, threads):
    command = [PYTHON, str(TWIN), "--speed", *model_flags(size), "--batch", str(batch),
               "--dtype", dtype, "--seconds", str(seconds), "--threads", str(threads)]
    text = run(command, twin_env(threads))
    rate = rate_in(text, "torch")
    if rate is None:
        raise RuntimeError(f"the twin printed no rate:\n{text}")
    return rate


def twin_blas():
    """Which BLAS library the twin loads under twin_env(), from its own --speed line."""
    text = run([PYTHON, str(TWIN), "--speed", "--seconds", "0.05"], twin_env())
    found = re.search(r"BLAS (.*)\)$", text, re.M)
    return found.group(1) if found else "unknown"


def cpu_model():
    """The CPU's name: Linux's /proc/cpuinfo, macOS's sysctl, else what Python knows, else "unknown CPU"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        found = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    return platform.processor() or "unknown CPU"


def ratio_text(ratios):
    if not ratios:
        return "n/a"
    return f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}"


def measure_row(size, batch, rounds, seconds, has_sorter, threads):
    """Alternate the three programs for `rounds` rounds. Returns medians and per-round ratios."""
    ours, gflops, evals, f64, f32 = [], [], [], [], []
    for _ in range(rounds):
        if has_sorter:
            rate, flops, eval_s = sorter_run(size, batch, threads)
            ours.append(rate)
            gflops.append(flops)
            evals.append(eval_s)
        f64.append(twin_rate(size, batch, "float64", seconds, threads))
        f32.append(twin_rate(size, batch, "float32", seconds, threads))
    ratios64 = [a / b for a, b in zip(ours, f64) if a is not None]  # None: sorter printed no rate
    ratios32 = [a / b for a, b in zip(ours, f32) if a is not None]

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None
    return median(ours), median(gflops), median(evals), median(f64), median(f32), ratios64, ratios32


def print_header(args, torch_version, has_sorter, peak, kernel, blas):
    threads = "".join(f"{k}={v} " for k, v in KERNEL.items()) + "OPENBLAS_NUM_THREADS=N OMP_NUM_THREADS=N"
    if Path(OPENBLAS_DIR).is_dir():
        threads = f"LD_LIBRARY_PATH={OPENBLAS_DIR} {threads}"
    print(f"compare: training examples/s (draw, forward, backward, SGD), sorter beside its PyTorch twin; "
          f"median of {args.rounds} round(s), the programs run in turn in each round")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} processors online; each program runs on N threads, "
          f"N = {' and '.join(map(str, args.threads))} (the column threads)")
    print(f"twin: PyTorch {torch_version}, torch.set_num_threads(N), {threads}; BLAS loaded: {blas}")
    print(f"kernel, the twin's and the peak's: {kernel}")
    if not has_sorter:
        print(f"sorter: {SORTER} has no --speed or --threads yet (or is missing): its columns are n/a")
    peak_text = f"{peak:.1f} GFLOP/s" if peak else "not measured"
    print(f"peak: one core's dgemm (OpenBLAS through torch.mm, float64, one thread, best of n = 256, 512, 1024): "
          f"{peak_text}")
    for name in args.rows:
        print("  " + size_text(name, SIZES[name][0]))
    print()
    print(f"{'row':<18} {'threads':>7} {'sorter':>8} {'twin f64':>9} {'twin f32':>9}  {'sorter/f64 min/med/max':>22} "
          f"{'sorter/f32 min/med/max':>22}  {'GFLOP/s':>7} {'of peak':>7}  {'eval s':>6}")


def parse_args(argv):
    p = argparse.ArgumentParser(description="sorter's training speed beside its PyTorch twin's.")
    p.add_argument("--rounds", type=int, default=3, help="alternations of the programs per row (default 3)")
    p.add_argument("--seconds", type=float, default=1.0, help="the twin's measuring time per run (default 1)")
    p.add_argument("--rows", default="default,mid,large", help="comma-separated: default, mid, large")
    p.add_argument("--threads", default=f"1,{CORES}",
                   help=f"comma-separated thread counts, each row run at each (default 1,{CORES}: one, and all cores)")
    args = p.parse_args(argv)
    try:
        args.threads = list(dict.fromkeys(int(t) for t in args.threads.split(",") if t))
    except ValueError:
        p.error(f"--threads {args.threads}: expected whole numbers separated by commas, such as 1,{CORES}")
    if not args.threads or min(args.threads) < 1 or max(args.threads) > 256:
        p.error(f"--threads: each count must be from 1 to 256 (sorter's limit), such as 1,{CORES}")
    args.rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in args.rows if r not in SIZES]
    if unknown:
        p.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    return args


def main(argv):
    args = parse_args(argv)
    probe = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"compare.py: skipped, '{PYTHON} -c \"import torch\"' failed. {HOW_TO_GET_TORCH}")
        return 0
    has_sorter = SORTER.exists() and sorter_run(SIZES["default"][0], 1)[0] is not None
    blas = twin_blas()
    if "/blas/libblas" in blas:  # Debian's reference BLAS, which then answers every product: plain loops
        print(f"compare.py: the twin would run on the reference BLAS ({blas}), plain loops far slower than this CPU "
              f"allows; install OpenBLAS (Debian or Ubuntu: sudo apt-get install libopenblas0-pthread), or make it "
              f"the system's (sudo update-alternatives --config libblas.so.3-{MULTIARCH}), and run make "
              f"compare again")
        return 2
    peak, kernel = choose_kernel()
    print_header(args, probe.stdout.strip(), has_sorter, peak, kernel, twin_blas())  # the BLAS on that kernel
    for threads in args.threads:
        for name in args.rows:
            size, batches = SIZES[name]
            for batch in batches:
                print_row(name, batch, threads, peak, measure_row(size, batch, args.rounds, args.seconds, has_sorter,
                                                                  threads))
    print("GFLOP/s: sorter's matrix-product arithmetic per second of training; of peak: that over the peak above, "
          "times the threads.\neval s: sorter's held-out evaluation (1000 sequences decoded greedily) of a model of "
          "the row's size.")
    return 0


def print_row(name, batch, threads, peak, measured):
    ours, gflops, eval_s, f64, f32, r64, r32 = measured
    shown = f"{ours:8,.0f}" if ours is not None else f"{'n/a':>8}"
    flops = f"{gflops:7.1f}" if gflops is not None else f"{'n/a':>7}"
    share = f"{100 * gflops / peak / threads:6.0f}%" if gflops is not None and peak else f"{'n/a':>7}"
    evals = f"{eval_s:6.2f}" if eval_s is not None else f"{'n/a':>6}"
    print(f"{name + ', batch ' + str(batch):<18} {threads:>7} {shown} {f64:9,.0f} {f32:9,.0f}  "
          f"{ratio_text(r64):>22} {ratio_text(r32):>22}  {flops} {share}  {evals}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
