"""Hardware facts a lower bound may rest on: they cannot read low, unlike a probe.

A probe measures what the machine did once, on a shared host: a busy neighbour makes it read
low (a peak) or high (a latency), and a bound built on it may then be beaten. These figures
come from the instruction set and the fastest part of each microarchitecture instead, so every
real run is slower than or equal to what they allow:

- at most ``FMA_PIPES`` vector FMA instructions issue per cycle on any x86 core here (Haswell
  to Raptor Lake, Skylake-SP to Emerald Rapids, Zen 1 to Zen 5: two FMA pipes; Zen 4 runs a
  512-bit FMA through both 256-bit halves, so counting two full-width FMAs overstates it);
- a dependent FMA takes at least ``MIN_FMA_LATENCY_CYCLES`` cycles (4 on all of them; 5 on
  Haswell and Zen 1);
- no core of a microarchitecture clocks above the fastest boost of its fastest part
  (``MAX_BOOST_GHZ``, keyed by LLVM's CPU name; an unknown CPU gets ``UNKNOWN_BOOST_GHZ``).
"""

from __future__ import annotations

FMA_PIPES = 2
MIN_FMA_LATENCY_CYCLES = 4
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


def max_boost_hz(cpu: str) -> float:
    """The fastest clock any core of LLVM CPU ``cpu`` can run at, in Hz."""
    return MAX_BOOST_GHZ.get(cpu, UNKNOWN_BOOST_GHZ) * 1e9


def fp32_peak_ceiling(cpu: str, cores: int, lanes: int) -> float:
    """FLOP/s no fp32 code can exceed on ``cores`` cores of ``cpu`` with ``lanes``-wide vectors:
    ``FMA_PIPES`` FMAs (2 FLOPs a lane) per cycle at the maximum boost clock."""
    return cores * FMA_PIPES * lanes * 2.0 * max_boost_hz(cpu)


def fma_latency_floor_s(cpu: str) -> float:
    """Seconds no dependent FMA step can beat on ``cpu``."""
    return MIN_FMA_LATENCY_CYCLES / max_boost_hz(cpu)
