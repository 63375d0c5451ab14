"""The register tile of a contraction, ``mr`` rows by ``nr`` lanes: one to three vectors of
lanes (a panel within one group for a grouped convolution, whole 8-lane statements across an
axis that is no whole number of vectors, three or five vectors for an odd number of them
with 16 registers, up to ``FMA_CHAINS`` vectors for a contraction of one row), as many rows
as keep the accumulators, the vector operands and a broadcast in the registers.
"""

from __future__ import annotations

from tvm_ext.schedules.common import (
    FMA_CHAINS,
    STACK_TILE_BYTES,
    lanes_for,
    symbolic_extent_high,
    symbolic_extent_least,
    tail_rows,
    tile_cost,
    tile_size,
    vector_registers,
)
from tvm_ext.schedules.rules.axes import Axes, static_extents
from tvm_ext.schedules.rules.fallback import static_int

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import target_cores

# The fewest rows a tile of unequal statements needs to run them in passes (see tile): each
# pass's statements times the rows are its independent FMA chains. Fewer rows run the
# statements side by side in one pass. A 1 x 1000 classifier head in panels of 40 ran in
# 47 us as a 32-lane and an 8-lane pass (two and one chains), in 35 us as five 8-lane
# statements in one pass; 1025 classes in panels of 41, 65 us in three passes, 33 us as one
# 41-lane statement (Zen 5). A 3x3 depthwise convolution of 40 channels with 4 rows, 3.5 ->
# 2.5 us the other way (Zen 5). On AVX2 the one 41-lane statement became 60 lane inserts and
# 30 shuffles an iteration: 70-73 us, as five 8-lane statements and a plain one in one pass
# 39-41 us (1025 classes, Zen 3, interleaved; 1040 classes 37-40 us).
MIN_PASS_ROWS = 3

# The fewest reduction steps for a tile past the stack (see roomy_holds).
ROOMY_MIN_STEPS = 256


def roomy_holds(block, axes: Axes, mr: int) -> bool:
    """Whether a tile of ``STACK_TILE_BYTES`` or more (TVM allocates it as a runtime
    workspace, not on the stack) stays in registers and pays: one reduction loop of at least
    ``ROOMY_MIN_STEPS`` and no predicate on its rows (a row tail's: 197 rows kept stores in
    the loop). LLVM then keeps its updates in registers across the loop, a per-call copy
    read beside it included (TVM's alias metadata tells buffers apart: 200 padded rows x
    768 x 3072 from a copy, no store in the loop); it promotes them around one loop only: a
    3x3 convolution's tile (64 channels, 56 x 56 map, 8 x 32) went to memory at every kernel
    position, 587 -> 1127 us, and a short reduction pays the workspace's zeroing and
    write-back on few steps (a 1x1 convolution of 64 channels to 256, 267 -> 315 us). Where
    it holds, 8 x 48 tiles against those within the stack: 128 x 3072 x 768 with its weight
    in panels (4 x 48) 1887 -> 1616 us, 384 x 768 x 768 (6 x 32) 1255 -> 1126, 16 x 768 x
    3072 (4 x 48) 320 -> 263 (interleaved A/B; Xeon, rocketlake, 2 threads). 197 rows padded
    to 200 for 8 x 48 tiles gained nothing over 5 x 48 and a tail (2349 -> 2319 us)."""
    dom = block.dom()
    return _one_long_reduction(block, axes) and (
        axes.row is None or tvm_api.divides(mr, dom[axes.row])
    )


def _one_long_reduction(block, axes: Axes) -> bool:
    dom = block.dom()
    steps = [static_int(dom[i]) for i in axes.reduction]
    return len(steps) == 1 and (steps[0] or 0) >= ROOMY_MIN_STEPS


def padded_row_tile(block, dom: list, axes: Axes, target) -> int:
    """The row tile symbolic rows are padded to a whole number of (``dom``: the block's
    extents, the vector axis's as padded): the tile :func:`tile_sizes` then takes, past the
    stack where :func:`roomy_holds` will hold once the rows are padded."""
    row = block.dom()[axes.row]
    holds = lambda _: _one_long_reduction(block, axes)  # noqa: E731
    return _roomy_or_stacked(dom, axes, target, row, holds, panel=_panel_of(block, axes, target))[0]


def symbolic_panel(extent, lanes: int) -> int:
    """The panel of a symbolic vector axis (a sequence length, attention's keys): one vector
    where the assumed bounds keep ``extent`` within one, else two. The rules schedule a
    symbolic model's short lengths apart (``length_dispatch``): up to 16 tokens, Llama's
    attention scores in 32-lane panels, half of each padding, took 7.2 / 9.3 / 9.3 us at 5 /
    13 / 16 tokens, in one vector 5.5 / 6.8 / 6.8 us (alone, Zen 4, 2 threads; 12 of them
    a run, too few to show in the model's time)."""
    high = symbolic_extent_high(extent)
    return lanes if high is not None and high <= lanes else 2 * lanes


def _panel_of(block, axes: Axes, target) -> int | None:
    """:func:`symbolic_panel` of ``block``'s vector axis; None where it is static."""
    extent = block.dom()[axes.vector]
    return None if static_int(extent) is not None else symbolic_panel(extent, lanes_for(target, 32))


def _roomy_or_stacked(dom, axes: Axes, target, row, holds, odd_panels: bool = True, panel=None):
    """The roomy tile (see :func:`tile_sizes`) when it fits on the stack or ``holds(mr)``;
    else the tile within the stack."""
    mr, nr = sizes(dom, axes, target, row, True, odd_panels, panel)
    if not _past_stack(mr, nr) or holds(mr):
        return mr, nr
    return sizes(dom, axes, target, row, odd_panels=odd_panels, panel=panel)


def _past_stack(mr: int, nr: int) -> bool:
    """Whether an ``mr`` x ``nr`` fp32 tile is past the stack (see roomy_holds)."""
    return mr * nr * 4 >= STACK_TILE_BYTES


def tile_sizes(
    block, axes: Axes, target, roomy: bool = False, odd_panels: bool = True
) -> tuple[int, int]:
    """(mr, nr): ``nr`` lanes of one to three vectors (more: :func:`one_row_panel`,
    :func:`odd_vectors_panel` unless ``odd_panels`` is False), as many rows as keep the
    accumulators, the vector operands and a broadcast in the registers and the tile on the
    stack; of those, the tile with the most accumulators (independent FMA chains: a core
    needs its FMA latency x pipes of them in flight, 8 on Zen 4/5 and Golden Cove).

    Three vectors only when they divide the axis, and with 32 vector registers (on AVX2's
    16 a 4 x 24 tile would use all of them; an odd number of vectors there takes three, in
    3 x 24 or 4 x 24, see :func:`odd_vectors_panel`): BERT's M = 128 rows leave a two-vector tile 4
    rows (the seven that fit do not divide 128), 8 accumulators; 4 x 48 has 12.

    ``roomy``: past ``STACK_TILE_BYTES`` (the registers alone bound the tile) where
    :func:`roomy_holds` says LLVM keeps such a tile in registers, for the contraction's
    loop nest: BERT's 128 x 3072 x 768 then takes 8 x 48."""
    row = block.dom()[axes.row] if axes.row is not None else None
    dom, panel = static_extents(block), _panel_of(block, axes, target)
    if roomy:
        return _roomy_or_stacked(
            dom, axes, target, row, lambda mr: roomy_holds(block, axes, mr), odd_panels, panel
        )
    return sizes(dom, axes, target, row, odd_panels=odd_panels, panel=panel)


def sizes(
    dom: list,
    axes: Axes,
    target,
    row_extent=None,
    roomy: bool = False,
    odd_panels: bool = True,
    panel: int | None = None,
) -> tuple[int, int]:
    """tile_sizes for the iterator extents ``dom`` (None where symbolic); ``row_extent``, the
    row axis's extent when it is symbolic (see :func:`symbolic_rows`); ``odd_panels``: whether
    an axis of an odd number of vectors may take :func:`odd_vectors_panel`; ``panel``: the
    panel of a symbolic vector axis (:func:`symbolic_panel`; two vectors when not given)."""
    lanes = lanes_for(target, 32)
    n = dom[axes.vector]
    if axes.group is not None:
        # A panel within one group (its input value is one broadcast for all its lanes).
        nr = _group_panel(axes.group, lanes)
        return _rows(dom, axes, nr, len(statements(nr, lanes)), target, row_extent, roomy), nr
    if axes.row is None and n is not None:
        nr = one_row_panel(n, lanes, vector_registers(target), target_cores(target))
        if nr is not None:
            return 1, nr
    if n is not None and n > lanes and n % lanes:
        nr = _odd_panel(n, lanes, vector_registers(target))
    else:
        if n is None:
            nr = panel or 2 * lanes
        else:
            nr = tile_size(n, 2 * lanes, lanes) if n >= lanes else n
        narrow = nr == lanes and n is not None and n > lanes
        if odd_panels and narrow and vector_registers(target) < 32:
            nr = odd_vectors_panel(n, lanes) or nr
    mr = _rows(dom, axes, nr, len(statements(nr, lanes)), target, row_extent, roomy)
    if n is not None and n % (3 * lanes) == 0 and vector_registers(target) >= 32:
        mr3 = _rows(dom, axes, 3 * lanes, 3, target, row_extent, roomy)
        if 3 * mr3 > mr * max(nr // lanes, 1):
            return mr3, 3 * lanes
    return mr, nr


def panel_rows(block, axes: Axes, target, nr: int) -> int:
    """The row tile :func:`tile_sizes` gives an ``nr``-lane panel the caller chose."""
    lanes = lanes_for(target, 32)
    return _rows(static_extents(block), axes, nr, len(statements(nr, lanes)), target)


def one_row_panel(n: int, lanes: int, registers: int, cores: int) -> int | None:
    """The panel of a contraction with no row axis (a GEMV: a classifier head, a decode
    step's matmuls), whose accumulators are the panel's statements alone, each one FMA chain
    stepping at the FMA's latency: the widest divisor of ``n`` that is two to ``FMA_CHAINS``
    whole vectors; for an axis of no whole number of vectors, :func:`whole_panel` up to
    ``FMA_CHAINS`` vectors wide; either leaving every core a panel. None where there is no
    such panel (the panels of a tile with rows then apply).

    A 1 x 1280 @ 1280 x n head + bias (Zen 3, AVX2, 2 threads, weights packed once): 1000
    classes in the one-vector panels the rule for rows takes (one chain) ran 102 us, in
    panels of 40 (five) 40 us; 1008 classes 55 -> 42 us (two vectors -> seven)."""
    for size in range(FMA_CHAINS * lanes, lanes, -lanes):
        if n % size == 0 and n // size >= cores:
            return size
    if n % lanes:
        size = whole_panel(n, lanes, registers, widest=FMA_CHAINS)
        if size is not None and n // size >= cores:
            return size
    return None


def odd_vectors_panel(n: int, lanes: int) -> int | None:
    """With 16 vector registers, the panel of an axis of an odd number of vectors (24, 40,
    120, 200 columns on AVX2), which two-vector panels do not tile: three vectors (as many
    rows as fit: 4) or else five (2 rows) where they divide it, in place of one-vector panels
    of 8 rows (each FMA a broadcast of its own). AVX2, Zen 3, 2 threads, interleaved: a 1x1
    convolution 144 -> 24 on 56 x 56 150 -> 116 us, 192 -> 40 on 28 x 28 79 -> 63 us, a 3x3
    40 -> 40 on 14 x 14 38 -> 34 us, a 200 x 200 x 256 matmul 228 -> 175 us; 480 -> 120 on
    14 x 14 149 -> 154 us (noise). None where neither divides."""
    for vectors in (3, 5):
        if n % (vectors * lanes) == 0:
            return vectors * lanes
    return None


def _group_panel(group: int, lanes: int) -> int:
    """The panel of a grouped convolution's output channels: the whole group when it is
    within three vectors (8 channels a group: 8-lane vectors), else its widest divisor that
    is (a 128-channel group in panels of 32 on AVX2)."""
    for size in range(min(group, 3 * lanes), 0, -1):
        if group % size == 0:
            return size
    return 1


def whole_panel(n: int, lanes: int, registers: int, widest: int = 3) -> int | None:
    """The panel of a vector axis that is no whole number of vectors, tiling it with no tail:
    the widest divisor of ``n`` up to three vectors that is a whole number of 8-lane
    statements (24, 40 or 120 channels, 1000 classes: panels of 24, 40, 40, 40); else, of
    the divisors between one vector and three vectors and a plain 1-3 lane statement wide
    (1025 classes on AVX2: 25, three vectors and a lane) and the whole axis where its
    statements leave two rows of accumulators in ``registers`` (they then run side by side
    in one pass: see MIN_PASS_ROWS), the one with the fewest statements per lane (1025
    classes: 41, three full vectors' worth of statements and a scalar; 33 channels: 16, 16
    and a scalar, on AVX2 8 x 4 and a scalar; 66 columns on AVX-512: four vectors and two
    lanes, not two panels of 33). None when no panel tiles it (197: a caller pads the axis,
    or accepts a tail).

    A whole axis of 65 columns (four vectors and a scalar, three rows) ran a 65 x 65 x 256
    matmul in 7.8 us, where padded to 80 lanes (a per-call copy in a parallel stage of its
    own, a write-back under a per-lane predicate) took 11.3 us, 18 us while a neighbour
    used a core (Zen 5). On AVX2 a 3x3 depthwise convolution of 33 channels (28 x 28) as
    one panel of 33 in two rows ran 8.3-9.5 us, in panels of 11 (8 + 3 lanes, two passes of
    four rows) 11.4-11.9 us, padded to 48 channels 8.3 us; 34 channels 7.9-8.0 against
    8.6-8.7 us in panels of 17 (Zen 3, interleaved, best of five rounds; 3x3 convolutions
    of 33 and 34 channels the same either way).

    ``widest``: the most whole vectors a panel takes (three, for a tile of rows; more where
    the panel is the tile's every accumulator, see :func:`one_row_panel`)."""
    for size in range(widest * lanes // 8 * 8, 7, -8):
        if n % size == 0:
            return size
    panels = [d for d in range(lanes + 1, widest * lanes + 4) if n % d == 0]
    if n > widest * lanes and _row_fit(n, len(statements(n, lanes)), registers) >= 2:
        panels.append(n)
    if not panels:
        return None
    return min(panels, key=lambda d: (len(statements(d, lanes)) / d, -d))


def _odd_panel(n: int, lanes: int, registers: int) -> int:
    """:func:`whole_panel`, else two vectors, the last panel under a per-lane predicate
    (LLVM scalarizes it: the slow case). A tail predicate on every panel costs far more: a
    33-channel depthwise convolution in 32-lane panels ran 15x slower than unscheduled."""
    return whole_panel(n, lanes, registers) or 2 * lanes


def _rows(dom, axes: Axes, nr: int, vectors: int, target, row_extent=None, roomy=False) -> int:
    """The row tile for an ``nr``-lane panel of ``vectors`` vectors (see tile_sizes). When
    the statements are unequal, a divisor of at least ``MIN_PASS_ROWS + 1`` rows, else all
    the rows that fit and a tail: 33 x 33 x 256 in tiles of 3 rows (a divisor) took 3.0 us,
    in tiles of 7 and a tail 2.2 us; a 3x3 depthwise convolution of 40 channels over 28
    columns 2.4 us in tiles of 4 (a divisor), 2.7 us in tiles of 6 and a tail (Zen 5)."""
    if axes.row is None:
        return 1
    fit = _row_fit(nr, vectors, vector_registers(target), roomy)
    if dom[axes.row] is None and row_extent is not None:
        if roomy and _past_stack(fit, nr):
            # A tile past the stack holds the most accumulators the registers do, whatever
            # rows it pads: with a weight streamed from memory (a model's) padded rows are
            # nearly free and a bigger tile pays. Padded to 8 x 48 tiles (of 4 x 48 before,
            # symbolic_rows' pick for lengths up to 16), BERT's symbolic model ran 19.8 ->
            # 17.3 ms at 13 tokens and 11.6 -> 9.7 ms at 5, 20.3 ms both at 16 and 111 ms
            # both at 128 (interleaved, Zen 4, 2 threads); 16 x 768 x 3072 with its weight
            # cold (48 copies in turn): 8-row tiles 428 us at 13 and 16 rows, 4-row 469 and
            # 492 us, alike at 2 to 5 rows. Past one tile of a range of lengths (a short
            # range of length_dispatch), the padded rows cost what the FMAs on them do: the
            # tile that runs the range's lengths in the least time (symbolic_rows). With
            # every length up to 64 padded to 8-row tiles, BERT's symbolic model ran 1.33x /
            # 1.23x / 1.13x its static build at 9 / 17 / 33 tokens (Zen 4, 2 threads).
            high = symbolic_extent_high(row_extent)
            return fit if high is None or high <= fit else symbolic_rows(row_extent, fit, vectors)
        return symbolic_rows(row_extent, fit, vectors)
    unequal = len(set(statements(nr, lanes_for(target, 32)))) > 1
    extent = dom[axes.row]
    mr = tile_size(extent, fit, least=min(fit, MIN_PASS_ROWS + 1) if unequal else 1)
    if unequal or extent is None or extent % mr == 0:
        return mr
    return tail_rows(extent, fit, vectors)


def symbolic_rows(extent, fit: int, per_row: int) -> int:
    """The row tile of a symbolic row extent (a sequence length), of ``fit`` rows at most
    (and half that at least, as for a static one), each row ``per_row`` accumulators: the
    largest that provably divides ``extent`` (rows already padded to whole tiles); else,
    where the assumed bounds put ``extent`` in a range, the tile that runs every length of
    the range in the least time (every length once, its rows padded to whole tiles, a row
    costing ``1 + TILE_STEP_ROWS / mr`` at the fraction of the peak the tile's
    ``FMA_CHAINS`` allow). BERT's 768 x 3072 matmul at lengths up to 16 took tiles of 5
    rows when as many rows as fit was the rule (20 rows computed at 16: 180 us, the static
    length's tiles of 4 rows 141 us); in the tiles of 4 this takes, 149 us. Else, with no
    highest length, as many rows as fit (past 64 rows the pad is under 10 %)."""
    least = max(2, -(-fit // 2))
    candidates = range(fit, least - 1, -1)
    for mr in candidates:
        if tvm_api.divides(mr, extent):
            return mr
    high = symbolic_extent_high(extent)
    if high is None:
        return fit
    low = min(symbolic_extent_least(extent), high)

    def cost(mr: int) -> float:
        return tile_cost(_padded_rows(high, mr) - _padded_rows(low - 1, mr), mr, per_row)

    return min(candidates, key=cost)  # the first, the most rows, among equals


def _padded_rows(top: int, mr: int) -> int:
    """The rows computed for every length 1..``top`` once, each padded to whole ``mr``-row
    tiles: the sum of ``ceil(n / mr) * mr`` (in closed form: a declared range may be long)."""
    whole, rest = divmod(max(top, 0), mr)
    return mr * mr * whole * (whole + 1) // 2 + rest * (whole + 1) * mr


def _row_fit(nr: int, vectors: int, registers: int, roomy: bool = False) -> int:
    """The most rows an ``nr``-lane tile of ``vectors`` vectors keeps in ``registers``
    (and on the stack, see STACK_TILE_BYTES, unless ``roomy``)."""
    fit = min((registers - vectors - 1) // vectors, 8)
    return fit if roomy else min(fit, (STACK_TILE_BYTES - 1) // (4 * nr))


def statement_width(nr: int, lanes: int) -> int:
    """The lanes of one vector statement of an ``nr``-lane tile row: ``lanes`` when they divide
    ``nr``, else the largest power of two that does (an ``nr`` of 24 as three 8-lane
    statements: a 24-lane one is no register size, and LLVM's split of it ran a 1x1
    convolution to 24 channels at 21 GFLOP/s, three 8-lane ones at 210); ``nr`` itself when
    no power of two of at least 4 lanes divides it (a 7-lane tile stays one statement)."""
    width = lanes
    while width > 1 and nr % width:
        width //= 2
    return width if width >= 4 else nr


def statements(nr: int, lanes: int) -> list[int]:
    """The lanes of each vector statement of an ``nr``-lane tile row, in order: ``nr //
    width`` statements of :func:`statement_width` when that is a whole vector or ``nr`` is
    within one; else whole vectors of ``lanes`` first, then the rest in the widest powers of
    two of at least 4 lanes, then one plain statement of the last 1-3 lanes (40 lanes on a
    16-lane target: 16, 16, 8, where five 8-lane statements ran a 40-channel depthwise
    convolution at 1.5x the time of a 48-channel one; 33: 16, 16, 1, where one 33-lane
    statement was scalarized whole)."""
    width = statement_width(nr, lanes)
    if width == lanes or nr <= lanes:
        return [width] * (nr // width)
    pieces, rest = [lanes] * (nr // lanes), nr % lanes
    width = lanes // 2
    while rest:
        if width < 4:
            pieces.append(rest)
            break
        if rest >= width:
            pieces.append(width)
            rest -= width
        else:
            width //= 2
    return pieces


def statement_runs(nr: int, lanes: int) -> list[tuple[int, int]]:
    """The vector statements of a tile row (:func:`statements`) as runs of (width, count);
    the caller runs unequal runs in passes from ``MIN_PASS_ROWS`` rows, side by side in one
    pass under that (see MIN_PASS_ROWS)."""
    pieces = statements(nr, lanes)
    return [(w, pieces.count(w)) for w in dict.fromkeys(pieces)]


__all__ = [
    "MIN_PASS_ROWS",
    "ROOMY_MIN_STEPS",
    "padded_row_tile",
    "panel_rows",
    "roomy_holds",
    "sizes",
    "statement_runs",
    "symbolic_panel",
    "statement_width",
    "statements",
    "tile_sizes",
    "whole_panel",
]
