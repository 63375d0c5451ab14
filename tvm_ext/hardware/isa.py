"""Hardware facts a lower bound may rest on: they cannot read low, unlike a probe.

A probe measures what the machine did once, on a shared host: a busy neighbour makes it read
low (a peak) or high (a latency), and a bound built on it may then be beaten. These figures
come from the instruction set and the fastest part of each microarchitecture instead, so every
real run is slower than or equal to what they allow. Each is an upper limit taken over every
x86-64 core LLVM names (Haswell to Lion Cove, Skylake-SP to Granite Rapids, Zen 1 to Zen 5),
from the vendors' optimization manuals and published instruction tables:

- at most ``FMA_PIPES`` vector multiplies or FMAs issue per cycle (two FMA/multiply pipes on
  every one of them);
- at most ``FP_PIPES`` vector floating-point instructions of any kind issue per cycle (Zen 4
  and Zen 5: two FMA and two FADD pipes; Golden Cove: three; Lion Cove: four);
- an FMA pipe is at most :func:`fma_datapath_lanes` fp32 lanes wide: Zen 1 splits 256-bit
  operations into two 128-bit halves, Zen 4 runs a 512-bit FMA through both 256-bit halves of
  its pipes (AMD, "Software Optimization Guide for the AMD Zen4 Microarchitecture", 2.11),
  every other core executes its widest vector in one pass;
- a dependent FMA takes at least ``MIN_FMA_LATENCY_CYCLES`` cycles (4 on all of them; 5 on
  Haswell and Zen 1), a dependent FP add at least ``MIN_FADD_LATENCY_CYCLES`` (2: Golden
  Cove's fast adders and Zen 5; 3-4 elsewhere), a dependent FP max or min at least
  ``MIN_FMAX_LATENCY_CYCLES`` (1: Zen 2 and Zen 3);
- at most ``LOADS_PER_CYCLE`` loads of at most ``LOAD_BYTES_PER_CYCLE`` bytes together, and
  ``STORES_PER_CYCLE`` stores of at most ``STORE_BYTES_PER_CYCLE`` bytes, issue per cycle
  (Zen 5: four loads, two 512-bit; Golden Cove: three loads, two 512-bit; two stores on every
  core the tables name, :func:`stores_per_cycle`; a gather or scatter takes one load or store
  slot per element: Intel's gathers split into one load-port uop per element (uops.info's
  Haswell port table: a 4-element ``vgatherqpd`` holds ports 2 and 3 two cycles each), and
  AMD's are microcoded and slower still, measured on Zen 5 by ``bench/gather_rate.c`` at
  1.2-1.3 elements a cycle, 512-bit and 256-bit alike, against the four the arm allows);
- every vector instruction that computes (floating-point or integer arithmetic, logic,
  shuffles, blends, compares) issues to a vector execution pipe, and no core has more than
  ``FP_PIPES`` of them (Zen 4 and Zen 5: the four pipes of the FP unit carry all SIMD
  arithmetic, stores and register transfers using two more; Golden Cove: ports 0, 1 and 5;
  Lion Cove and Skymont: four), :func:`port_limits`;
- a program holds at most ``REGISTER_BYTES`` of data in registers (what it can name: 32 zmm
  registers of 64 bytes, 16 general registers of 8, 8 mask registers of 8 and 8 x87 registers
  of 10, 2320 bytes, rounded up; renamed physical registers cannot carry a value the program
  does not name);
- no more than :func:`reorder_window` instructions are in flight (the reorder buffer);
- no core of a microarchitecture clocks above the fastest boost of its fastest part
  (``MAX_BOOST_GHZ``, keyed by LLVM's CPU name; an unknown CPU gets ``UNKNOWN_BOOST_GHZ``);
  a server die whose CPUID family and model no desktop part shares clocks no faster than its
  own fastest part (``PART_BOOST_GHZ``: an EPYC 9004 below the Ryzen 7950X's 5.7 GHz). Its
  table name is ``"<LLVM name>+<die>"`` (:func:`table_cpu`); every other table is the
  microarchitecture's.
"""

from __future__ import annotations

FMA_PIPES = 2
FP_PIPES = 4
MIN_FMA_LATENCY_CYCLES = 4
MIN_FADD_LATENCY_CYCLES = 2
MIN_FMAX_LATENCY_CYCLES = 1
LOADS_PER_CYCLE = 4
LOAD_BYTES_PER_CYCLE = 128
STORES_PER_CYCLE = 2
STORE_BYTES_PER_CYCLE = 128
REGISTER_BYTES = 2560
UNKNOWN_BOOST_GHZ = 6.5  # above any shipping x86 part (Raptor Lake Refresh: 6.2 GHz)

# The highest single-core boost of any part LLVM's CPU name covers (desktop parts included:
# LLVM's "skylake" is also Comet Lake, "znver3" also the Ryzen 5950X), rounded up.
MAX_BOOST_GHZ = {
    "haswell": 4.5,
    "broadwell": 4.5,
    "skylake": 5.3,
    "skylake-avx512": 4.8,
    "cascadelake": 4.8,
    "cooperlake": 4.5,
    "icelake-client": 4.1,
    "icelake-server": 4.0,
    "tigerlake": 5.0,
    "rocketlake": 5.3,
    "alderlake": 5.5,
    "raptorlake": 6.2,
    "meteorlake": 5.1,
    "sapphirerapids": 4.8,
    "emeraldrapids": 4.2,
    "graniterapids": 4.3,
    "znver1": 4.4,
    "znver2": 4.7,
    "znver3": 5.0,
    "znver4": 5.7,
    "znver5": 5.8,
}

# Server dies by CPUID (vendor, family, model), exact: a neighbouring model may be a faster
# part of the same microarchitecture (family 25 model 24 is the 5.1 GHz Threadripper 7000).
# AMD's CPUIDs and fastest boosts: EPYC 9004 "Genoa"/"Genoa-X", CPUID A10F11 (family 25,
# model 17), fastest the 9174F at 4.4 GHz; EPYC 7003 "Milan"/"Milan-X", CPUID A00F11/A00F12
# (family 25, model 1; Ryzen 5000 is model 33, Threadripper PRO 5000 model 8), fastest the
# 72F3 at 4.1 GHz; EPYC 9005 "Turin", CPUID B00F21 (family 26, model
# 2), fastest the 9175F at 5.0 GHz. Rounded up by 0.1 GHz. A hypervisor may report another
# CPU's family and model, so the probe checks the clock it measures against the die's
# (:func:`tvm_ext.hardware.machine_probes.probe`) and prices the microarchitecture otherwise.
SERVER_DIES = {
    ("AuthenticAMD", 25, 1): ("znver3", "milan"),
    ("AuthenticAMD", 25, 17): ("znver4", "genoa"),
    ("AuthenticAMD", 26, 2): ("znver5", "turin"),
}
PART_BOOST_GHZ = {"milan": 4.2, "genoa": 4.5, "turin": 5.1}

# fp32 lanes an FMA pipe processes per pass, where narrower than the widest register: a table
# value too small would make the bound wrong, so only documented narrow datapaths are listed.
FMA_DATAPATH_LANES = {"znver1": 4, "znver4": 8}

# Reorder-buffer entries, rounded up; an unknown CPU gets the largest of any x86 core (Lion
# Cove, 576). A larger window only lowers the dependency arm.
REORDER_WINDOW = {
    "haswell": 192,
    "broadwell": 192,
    "skylake": 224,
    "skylake-avx512": 224,
    "cascadelake": 224,
    "cooperlake": 224,
    "icelake-client": 352,
    "icelake-server": 352,
    "tigerlake": 352,
    "rocketlake": 352,
    "alderlake": 512,
    "raptorlake": 512,
    "meteorlake": 512,
    "sapphirerapids": 512,
    "emeraldrapids": 512,
    "graniterapids": 512,
    "znver1": 192,
    "znver2": 224,
    "znver3": 256,
    "znver4": 320,
    "znver5": 448,
}
MAX_REORDER_WINDOW = 576


def table_cpu(llvm_cpu: str, vendor: str, family: int, model: int) -> str:
    """The tables' name for a host LLVM calls ``llvm_cpu`` with CPUID ``vendor``, ``family``
    and ``model``: ``"<llvm_cpu>+<die>"`` for a server die :data:`SERVER_DIES` lists under
    that microarchitecture, else ``llvm_cpu``."""
    arch, die = SERVER_DIES.get((vendor, family, model), (None, None))
    return f"{llvm_cpu}+{die}" if arch == llvm_cpu else llvm_cpu


def microarchitecture(cpu: str) -> str:
    """``cpu`` without its server die: the name the pipe and window tables know."""
    return cpu.partition("+")[0]


def named(cpu: str) -> bool:
    """Whether the tables name ``cpu``'s microarchitecture (else the unknown-CPU branch)."""
    return microarchitecture(cpu) in MAX_BOOST_GHZ


def max_boost_hz(cpu: str) -> float:
    """The fastest clock any core of ``cpu`` (an LLVM CPU name, or :func:`table_cpu`'s
    name of a server die) can run at, in Hz."""
    arch, _, die = cpu.partition("+")
    ghz = MAX_BOOST_GHZ.get(arch, UNKNOWN_BOOST_GHZ)
    return min(ghz, PART_BOOST_GHZ.get(die, ghz)) * 1e9


def fma_datapath_lanes(cpu: str, lanes: int) -> int:
    """fp32 lanes one FMA pipe of ``cpu`` completes per cycle with ``lanes``-wide vectors."""
    return min(lanes, FMA_DATAPATH_LANES.get(microarchitecture(cpu), lanes))


def fma_lanes_per_cycle(cpu: str, lanes: int) -> int:
    """fp32 multiply(-add) lanes one core of ``cpu`` completes per cycle with ``lanes``-wide
    vectors. A CPU the tables do not name may be a Skymont E-core (four 128-bit FMA pipes):
    narrow vectors then get four pipes."""
    if named(cpu):
        return FMA_PIPES * fma_datapath_lanes(cpu, lanes)
    return max(FMA_PIPES * lanes, 4 * min(lanes, 4))


def fp32_peak_ceiling(cpu: str, cores: int, lanes: int) -> float:
    """FLOP/s no fp32 code can exceed on ``cores`` cores of ``cpu`` with ``lanes``-wide vectors:
    :func:`fma_lanes_per_cycle` FMA lanes (2 FLOPs each) per cycle at the maximum boost clock."""
    return cores * fma_lanes_per_cycle(cpu, lanes) * 2.0 * max_boost_hz(cpu)


def fma_latency_floor_s(cpu: str) -> float:
    """Seconds no dependent FMA step can beat on ``cpu``."""
    return MIN_FMA_LATENCY_CYCLES / max_boost_hz(cpu)


def fadd_latency_floor_s(cpu: str) -> float:
    """Seconds no dependent floating-point add can beat on ``cpu``."""
    return MIN_FADD_LATENCY_CYCLES / max_boost_hz(cpu)


def fmax_latency_floor_s(cpu: str) -> float:
    """Seconds no dependent floating-point max or min can beat on ``cpu``."""
    return MIN_FMAX_LATENCY_CYCLES / max_boost_hz(cpu)


def stores_per_cycle(cpu: str) -> int:
    """Stores ``cpu`` issues per cycle at most: ``STORES_PER_CYCLE`` on the cores the tables
    name; a CPU they do not name may be a later E-core with more store ports, so twice that."""
    return STORES_PER_CYCLE if named(cpu) else 2 * STORES_PER_CYCLE


def port_limits(cpu: str) -> tuple[float, float, float, float, float]:
    """Per cycle, the most loads, load bytes, stores, store bytes and computing vector
    instructions one core of ``cpu`` issues (the order of
    :data:`tvm_ext.built_code.machine_blocks.RESOURCES`). A CPU the tables do not name may be a
    later core with wider ports: twice each."""
    scale = 1 if named(cpu) else 2
    return (LOADS_PER_CYCLE * scale, LOAD_BYTES_PER_CYCLE * scale, stores_per_cycle(cpu),
            STORE_BYTES_PER_CYCLE * scale, FP_PIPES * scale)  # fmt: skip


def reorder_window(cpu: str) -> int:
    """Instructions ``cpu`` can hold in flight (its reorder buffer), rounded up."""
    return REORDER_WINDOW.get(microarchitecture(cpu), MAX_REORDER_WINDOW)
