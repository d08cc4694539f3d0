#!/usr/bin/env python3
"""A performance model of fflite's kernels from their real source (issue: ARM speed without a board).

Each kernel marks the body of its steady-state loop (FFLITE_MCA_BEGIN / FFLITE_MCA_END,
runtime/src/kernels/mca_region.h). This script compiles the kernel sources to assembly with the
compiler the build uses and the marks switched on (-DFFLITE_MCA_REGIONS), cuts out each marked
body, and runs llvm-mca on it for a list of cores. Per kernel, weight type and tokens it prints
the modelled cycles per 32 weights, the weight bytes per second a core would read at its clock,
and for the prefill kernels the share of the modelled peak of their multiply instruction.

It models the core alone with every load hitting L1 (llvm-mca has no memory hierarchy): for the
decode kernels, the rate at which one core can consume weights; whether memory keeps up is the
bandwidth's question, which the table answers next to it (four cores against the board's
bandwidth).

Usage: scripts/arm_model.py [--arch aarch64|x86] [--cxx COMPILER] [--cpus a,b] [--check]
  --check: exit non-zero (and list "problems:") when a kernel source yields no region, a region
           is not straight-line code (an inner loop the compiler did not unroll), or llvm-mca
           fails on a region.
"""

import argparse
import collections
import concurrent.futures
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "runtime", "src", "kernels")

# The kernel sources per architecture (x86: the ones the model is checked against).
SOURCES = {
    "aarch64": ["gemv_neon.cc", "value_rows_neon.cc", "qgemv_neon.cc", "qgemm_neon.cc",
                "gemm_neon.cc"],
    "x86": ["gemv_avx512.cc", "qgemv_avx512.cc", "qgemm_avx512vnni.cc", "qgemm_avx2.cc"],
}

# Cores: llvm-mca's -mcpu, the clock the table assumes (GHz), the features the core has, what it
# is for. Clocks: Raspberry Pi 5's A76 (2.4 GHz), a phone's little A55 (1.8), Snapdragon 888's
# X1 (2.84), a Neoverse N2 server core (3.0).
CORES = {
    "aarch64": [
        ("cortex-a76", 2.4, {"dotprod", "fp16"}, "Raspberry Pi 5"),
        ("cortex-a55", 1.8, {"dotprod", "fp16"}, "phone little core"),
        ("cortex-x1", 2.84, {"dotprod", "fp16"}, "phone big core"),
        ("neoverse-n2", 3.0, {"dotprod", "fp16", "i8mm", "bf16"}, "Armv9 server core"),
    ],
    "x86": [
        ("icelake-server", None, {"avx2", "avx512", "vnni"}, "the closest modelled core"),
        ("skylake-avx512", None, {"avx2", "avx512"}, "an older AVX-512 core"),
        ("znver3", None, {"avx2"}, "AMD Zen 3: AVX2 only"),
    ],
}

# What each marked kernel is: decode or prefill, the features it needs (beyond the base ISA), and
# the multiply instruction whose peak a prefill kernel is measured against.
KERNEL_INFO = {
    # aarch64
    "gemv": ("decode", set(), None),
    "value_rows": ("decode", set(), None),
    "qgemv": ("decode", set(), None),
    "qgemv_passes": ("decode", set(), None),
    "qgemm_neon": ("prefill", set(), "smull"),
    "qgemm_dot": ("prefill", {"dotprod"}, "sdot"),
    "qgemm_i8mm": ("prefill", {"i8mm"}, "smmla"),
    "gemm_neon": ("prefill", set(), None),  # fmla (f32) or bfdot (bf16): by type below
    # x86
    "qgemm_vnni": ("prefill", {"vnni"}, "vpdpbusd"),
    "qgemm_avx2": ("prefill", set(), "vpmaddubsw"),
}

# Per source file on x86: the features of its code (what a core must have to run it).
X86_SOURCE_FEATURES = {
    "gemv_avx512.cc": {"avx512"}, "qgemv_avx512.cc": {"avx512"},
    "qgemm_avx512vnni.cc": {"avx512", "vnni"}, "qgemm_avx2.cc": {"avx2"},
}

# A multiply instruction alone, independent, to measure its modelled peak on a core: the
# instruction text with {d} for a destination register index.
PEAK_PROBES = {
    "aarch64": {
        "fmla": "fmla v{d}.4s, v20.4s, v21.s[0]",
        "sdot": "sdot v{d}.4s, v20.16b, v21.4b[0]",
        "smmla": "smmla v{d}.4s, v20.16b, v21.16b",
        "bfdot": "bfdot v{d}.4s, v20.8h, v21.2h[0]",
        "smull": "smull v{d}.8h, v20.8b, v21.8b",
    },
    "x86": {
        "vpdpbusd": "vpdpbusd %zmm20, %zmm21, %zmm{d}",
        # AVX2 has 16 ymm registers: two hold the sources, 14 chains (PEAK_CHAINS).
        "vpmaddubsw": "vpmaddubsw %ymm14, %ymm15, %ymm{d}",
    },
}
# Independent chains per probe where not 16.
PEAK_CHAINS = {"vpmaddubsw": 14}
PEAK_FEATURES = {"sdot": "+dotprod", "smmla": "+i8mm", "bfdot": "+bf16", "fmla": "",
                 "smull": ""}


@functools.lru_cache(maxsize=None)
def parse_enum(name):
    """The enumerators of `enum class name` in kernels/types.h, in order (follows the code); read
    once per enum, not once per table row."""
    text = open(os.path.join(KERNELS, "types.h")).read()
    m = re.search(r"enum class " + name + r"\s*:\s*\w+\s*\{([^}]*)\}", text)
    return tuple(e.strip()[1:].lower() for e in m.group(1).split(",") if e.strip())


# The dtype table's names (format/dtype.cc): q5_k and q6_k are the packed forms (GGUF's sizes).
QUANT_NAMES = {"q8": "i8", "q4": "i4", "q4k": "q4_k", "q6k": "q6_k_i8", "q5k": "q5_k_i8",
               "q6kp": "q6_k", "q5kp": "q5_k", "iq4x": "iq4_xs", "q3kp": "q3_k", "q2kp": "q2_k",
               "iq4n": "iq4_nl", "mxf4": "mxfp4"}


def type_name(kernel, type_id):
    if kernel.startswith("q"):
        raw = parse_enum("QuantType")[type_id]
        return QUANT_NAMES.get(raw, raw)
    return parse_enum("FloatType")[type_id]


def find_llvm_mca():
    for v in range(20, 13, -1):
        path = shutil.which("llvm-mca-%d" % v)
        if path:
            return path, v
    path = shutil.which("llvm-mca")
    if path:
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"version (\d+)", out)
        return path, int(m.group(1)) if m else 0
    return None, 0


Region = collections.namedtuple("Region", "source kernel tokens type weights bytes lines inner_loop")

BEGIN_RE = re.compile(r"FFLITE-MCA-BEGIN (\w+) (-?\d+) (\d+) (\d+) (\d+)")
END_RE = re.compile(r"FFLITE-MCA-END (\w+)")
LABEL_RE = re.compile(r"^\s*([.\w$]+):")
# Branches: aarch64 b, b.cond / bcond (GCC writes bne), cbz, tbz; x86 jcc, jmp.
BRANCH_RE = re.compile(r"^\s*(b|b\.?(?:eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)|"
                       r"cbn?z|tbn?z|j[a-z]+)\s+(?:.*,\s*)?([.\w$]+)\s*$")


def clean(raw):
    """An assembly line without its comment, or "" (comments, preprocessor lines)."""
    line = raw.split("//")[0] if "//" in raw else raw
    if line.lstrip().startswith("#"):
        return ""
    return re.sub(r"\s#.*$", "", line).strip()


def extract_regions(asm_text, source):
    """Each marked body as the instructions one pass executes, in order of appearance.

    From each BEGIN mark the body is followed as the processor would run it when no branch inside
    it is taken: an unconditional branch is followed to its label (the compiler may lay a body
    out in pieces), a conditional one falls through. A body that comes back to an instruction it
    already ran holds an inner loop; one that returns or runs too long never reaches its END:
    both are reported rather than modelled."""
    lines = asm_text.splitlines()
    labels = {}
    for i, raw in enumerate(lines):
        m = LABEL_RE.match(clean(raw))
        if m:
            labels[m.group(1)] = i
    regions = []
    for i, raw in enumerate(lines):
        m = BEGIN_RE.search(raw)
        if not m:
            continue
        body, seen, j, inner, ok = [], set(), i + 1, False, False
        while j < len(lines) and len(body) < 20000:
            raw_j = lines[j]
            if END_RE.search(raw_j):
                ok = True
                break
            if BEGIN_RE.search(raw_j):
                break  # another body's mark before this one's end
            line = clean(raw_j)
            if not line or LABEL_RE.match(line) or line.startswith("."):
                j += 1
                continue
            if j in seen:
                inner = True
                break
            seen.add(j)
            op = line.split()[0]
            if op in ("ret", "retq", "br"):
                break
            b = BRANCH_RE.match(line)
            if b and b.group(2) in labels:
                target = labels[b.group(2)]
                if any(t in seen for t in range(target, target + 8)):
                    inner = True  # a branch back into what this pass already ran
                    break
                if op in ("b", "jmp"):
                    j = target
                    continue
            body.append(line)
            j += 1
        regions.append(Region(source, m.group(1), int(m.group(2)), int(m.group(3)),
                              int(m.group(4)), int(m.group(5)), body, inner or not ok))
    return regions


def compile_source(cxx, flags, arch, source, workdir):
    out = os.path.join(workdir, source + ".s")
    cmd = [cxx] + flags + ["-DFFLITE_MCA_REGIONS", "-I", os.path.join(ROOT, "runtime", "include"),
                           "-I", os.path.join(ROOT, "runtime", "src"), "-S",
                           os.path.join(KERNELS, source), "-o", out]
    subprocess.run(cmd, check=True)
    return open(out).read()


POST_INDEX_STORE_RE = re.compile(r"^(st[rp1][a-z0-9]*\s+.*\[(x\d+)\]),\s*#?(-?\d+)$")


def split_post_index_stores(lines):
    """A post-indexed store (str q0, [x3], 16) as a store and an add of its base register.

    llvm-mca issues a store when its data and address are both ready, so the written-back base
    of a post-indexed store waits for the data: when the data ends a long chain (an output
    accumulated in the loop), the next pass's loads from the new address wait for that whole
    chain, a dependency the cores do not have (they issue a store's address and its data
    separately). Writing the update as its own add keeps llvm-mca from inventing it."""
    out = []
    for line in lines:
        m = POST_INDEX_STORE_RE.match(line)
        if m:
            out.append(m.group(1))
            out.append("add %s, %s, #%s" % (m.group(2), m.group(2), m.group(3)))
        else:
            out.append(line)
    return out


def run_mca(mca, arch, cpu, mattr, lines, iterations=300):
    triple = "aarch64-linux-gnu" if arch == "aarch64" else "x86_64-linux-gnu"
    cmd = [mca, "-mtriple=" + triple, "-mcpu=" + cpu, "-iterations=%d" % iterations,
           "-resource-pressure=false", "-instruction-info=false"]
    if mattr:
        cmd.append("-mattr=" + mattr)
    if arch == "aarch64":
        lines = split_post_index_stores(lines)
    text = "\n".join(lines) + "\n"
    if arch == "x86":
        text = ".att_syntax\n" + text
    p = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[0] if p.stderr.strip() else "llvm-mca failed"
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", p.stdout).group(1))
    its = int(re.search(r"Iterations:\s+(\d+)", p.stdout).group(1))
    return cycles / its, None


def model_name(mca, arch, cpu):
    """Which scheduling model llvm-mca uses for the core (the prefix of its resource names)."""
    triple = "aarch64-linux-gnu" if arch == "aarch64" else "x86_64-linux-gnu"
    probe = "add x0, x0, x1\n" if arch == "aarch64" else "addq %rax, %rbx\n"
    p = subprocess.run([mca, "-mtriple=" + triple, "-mcpu=" + cpu], input=probe,
                       capture_output=True, text=True)
    m = re.search(r"\[\d+(?:\.\d+)?\]\s+-\s+([A-Za-z0-9]+?)(?:Unit|Port|P\d)", p.stdout)
    return m.group(1) if m else "?"


def peak_cycles(mca, arch, cpu, instr):
    """Modelled cycles per instruction of `instr` issued back to back, 16 independent chains
    (PEAK_CHAINS: fewer)."""
    template = PEAK_PROBES[arch][instr]
    lines = [template.format(d=d) for d in range(PEAK_CHAINS.get(instr, 16))]
    mattr = PEAK_FEATURES.get(instr, "") if arch == "aarch64" else ""
    c, err = run_mca(mca, arch, cpu, mattr, lines, iterations=200)
    return None if c is None else c / len(lines)


def count_instr(lines, instr):
    return sum(1 for line in lines if line.split()[0] == instr)


# A Raspberry Pi 5 as the model sees it: four Cortex-A76 at 2.4 GHz sharing about 10 GB/s of
# memory bandwidth (what users measure). The shapes: a Llama-3-8B-size FFN stack (32 SwiGLU
# layers of 4096 / 14336) and qwen3-30b-a3b's experts (48 layers of 128 experts of 2048 / 768,
# 8 routed per token: the weights one token reads).
PI5_BANDWIDTH_GBS = 10.0
PI5_CORES = 4
SHAPES = [("Llama-8B FFN stack", 32 * 3 * 4096 * 14336),
          ("qwen3-30b-a3b experts (8 of 128)", 48 * 8 * 3 * 2048 * 768)]


def print_pi5(res, ghz):
    """Decode ms per token and prefill tokens/s from the A76 rows: the decode kernel fflite runs
    at one token (float weights: gemv; quantised: int8 activations with sdot), each core's rate
    capped by its share of the bandwidth; prefill from the widest tile of the dot-product kernel
    (compute-bound: each weight panel is read from memory once per call and stays in cache while
    the tiles pass over it)."""
    print("\n## Raspberry Pi 5, predicted by the model (4 x cortex-a76 at %.1f GHz, %.0f GB/s): "
          "FFN weights only" % (ghz, PI5_BANDWIDTH_GBS))
    print("%-6s %-34s %12s %10s %12s %14s" % ("dtype", "shape", "bytes/token", "bound",
                                                  "decode ms", "prefill tok/s"))
    for tname in ["f16", "bf16", "i8", "i4", "q4_k", "q5_k", "q6_k"]:
        quant = tname not in ("f16", "bf16", "f32")
        dec = res.get(("qgemm_dot", tname, 1) if quant else ("gemv", tname, 1))
        if dec is None:
            continue
        cyc, weights, nbytes = dec
        bpw = nbytes / weights
        core_gbs = nbytes * ghz / cyc
        pre = None
        if quant:
            widest = max((t for (k, n, t) in res if k == "qgemm_dot" and n == tname), default=0)
            if widest:
                c2, w2, _ = res[("qgemm_dot", tname, widest)]
                pre = w2 * widest / c2 * ghz * 1e9 * PI5_CORES  # weight-token products per s
        for shape, w in SHAPES:
            total = w * bpw
            rate = min(PI5_CORES * core_gbs, PI5_BANDWIDTH_GBS)
            bound = "memory" if PI5_CORES * core_gbs >= PI5_BANDWIDTH_GBS else "cores"
            pre_s = ("%14.1f" % (pre / w)) if pre else "%14s" % "XNNPACK"
            print("%-6s %-34s %10.2f GB %10s %12.0f %s" % (tname, shape, total / 1e9, bound,
                                                          total / (rate * 1e9) * 1e3, pre_s))


def region_info(r, arch):
    """A region's kind (decode, prefill), the CPU features its kernel needs, the multiply
    instruction whose peak a prefill kernel is measured against, and its type's name."""
    kind, needs, instr = KERNEL_INFO.get(r.kernel, ("decode", set(), None))
    if arch == "x86":
        needs = needs | X86_SOURCE_FEATURES.get(r.source, set())
    tname = type_name(r.kernel, r.type)
    if r.kernel == "gemm_neon":
        instr = "bfdot" if tname == "bf16" else "fmla"
        if tname == "bf16":
            needs = {"bf16"}
    return kind, needs, instr, tname


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="aarch64", choices=["aarch64", "x86"])
    ap.add_argument("--cxx", default=None)
    ap.add_argument("--flags", default="-O3 -DNDEBUG -std=c++17",
                    help="the build's compile flags for the kernels (default: Release)")
    ap.add_argument("--cpus", default=None, help="comma-separated llvm-mca -mcpu names")
    ap.add_argument("--llvm-mca", default=None, help="the llvm-mca to run (default: the newest "
                    "llvm-mca-N on PATH)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--iterations", type=int, default=300,
                    help="llvm-mca's iterations per region (the test, which checks the marks and "
                    "not the figures, runs 30: a third less time)")
    args = ap.parse_args()

    arch = args.arch
    cxx = args.cxx or ("aarch64-linux-gnu-g++" if arch == "aarch64" else "g++")
    if shutil.which(cxx) is None:
        print("arm_model: compiler %s not found" % cxx, file=sys.stderr)
        return 2
    mca, mca_version = find_llvm_mca()
    if args.llvm_mca:
        mca = args.llvm_mca
        out = subprocess.run([mca, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"version (\d+)", out)
        mca_version = int(m.group(1)) if m else 0
    if mca is None:
        print("arm_model: llvm-mca not found (Debian: apt-get install llvm-16 or llvm)",
              file=sys.stderr)
        return 2
    cores = CORES[arch]
    if args.cpus:
        wanted = args.cpus.split(",")
        cores = [c for c in cores if c[0] in wanted] + [
            (c, None, {"dotprod", "fp16", "i8mm", "bf16", "avx2", "avx512", "vnni"}, "")
            for c in wanted if c not in [x[0] for x in CORES[arch]]]

    problems = []
    regions = []
    results = {}
    # The compiles and llvm-mca's runs are independent processes: run on every core (the kernels'
    # compiles were most of the test's minute on one core).
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    with tempfile.TemporaryDirectory() as work:
        texts = pool.map(lambda s: compile_source(cxx, args.flags.split(), arch, s, work),
                         SOURCES[arch])
        for source, text in zip(SOURCES[arch], texts):
            found = extract_regions(text, source)
            if not found:
                problems.append("%s: no marked region in the assembly" % source)
            regions.extend(found)

    # One region per (kernel, type, tokens): the main path (most weights per pass; the others
    # are the tails of a matrix), the first copy of it.
    best = {}
    for r in regions:
        if r.tokens <= 0:
            continue  # a body whose token count is not known at compile time
        key = (r.kernel, r.type, r.tokens, r.source)
        if key not in best or r.weights > best[key].weights:
            best[key] = r
    for key, r in list(best.items()):
        if r.inner_loop:
            del best[key]
            problems.append("%s %s %s t=%d: the marked body is not straight-line code (an inner "
                            "loop, or no path to its end without a taken branch)" % (r.source, r.kernel,
                                                        type_name(r.kernel, r.type), r.tokens))

    print("fflite kernel model: llvm-mca %d (%s), compiler %s %s" % (mca_version, mca, cxx,
                                                                     args.flags))
    print("Every load hits L1 (llvm-mca has no memory model): decode figures are the rate a core")
    print("can consume weights, to compare with the memory bandwidth per core.")
    for cpu, ghz, features, what in cores:
        mname = model_name(mca, arch, cpu)
        clock = ("%.2f GHz" % ghz) if ghz else "cycles only"
        print("\n## %s (%s; %s; llvm-mca's scheduling model: %s)" % (cpu, what, clock, mname))
        print("%-13s %-6s %6s %8s %10s %10s %s" % ("kernel", "type", "tokens", "cyc/iter",
                                                   "cyc/32w", "GB/s/core", "peak share"))
        peaks = {}
        # Each region's llvm-mca run, started on every core in the table's order; read in order.
        order = sorted(best, key=lambda k: (k[3], k[0], k[1], k[2]))
        runs = {}
        for key in order:
            r = best[key]
            _, needs, _, _ = region_info(r, arch)
            if needs <= features:
                mattr = ",".join("+" + f for f in sorted(needs)) if arch == "aarch64" else ""
                runs[key] = pool.submit(run_mca, mca, arch, cpu, mattr, r.lines, args.iterations)
        for key in order:
            if key not in runs:
                continue
            r = best[key]
            kind, needs, instr, tname = region_info(r, arch)
            cyc, err = runs[key].result()
            label = r.kernel
            if cyc is None:
                problems.append("%s %s %s t=%d on %s: %s" % (r.source, r.kernel, tname,
                                                             r.tokens, cpu, err))
                continue
            per32 = cyc * 32.0 / r.weights
            gbs = ("%10.2f" % (r.bytes * ghz / cyc)) if ghz else "%10s" % "-"
            share = ""
            if kind == "prefill" and instr:
                if instr not in peaks:
                    peaks[instr] = peak_cycles(mca, arch, cpu, instr)
                n = count_instr(r.lines, instr)
                if peaks[instr] and n:
                    share = "%3.0f%% of %s peak (%d per iter)" % (
                        100.0 * n * peaks[instr] / cyc, instr, n)
            print("%-13s %-6s %6d %8.1f %10.2f %s %s" % (label[:13], tname, r.tokens, cyc,
                                                         per32, gbs, share))
            results.setdefault(cpu, {})[(r.kernel, tname, r.tokens)] = (cyc, r.weights, r.bytes)
    if arch == "aarch64" and "cortex-a76" in results:
        print_pi5(results["cortex-a76"], dict((c[0], c[1]) for c in cores)["cortex-a76"])
    if problems:
        print("\nproblems:")
        for p in problems:
            print("  " + p)
    return 1 if (args.check and problems) else 0


if __name__ == "__main__":
    sys.exit(main())
