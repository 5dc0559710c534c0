"""The frontend's own decompositions of aten ops (pure torch, traced into the exported program), where
torch-mlir's lowering of the op does not suit the compile stage: each docstring says why."""
from __future__ import annotations

import contextvars
import itertools
import math

import torch


class DecompositionLimit(Exception):
    """An op past what its decomposition here does in reasonable time or memory; the message says why."""


def var_mean_decomposition(x: torch.Tensor, dim=None, *, correction=None, keepdim: bool = False):
    """aten.var_mean in the input's own precision, in two passes (the mean, then the squared
    deviations from it), as PyTorch computes it: torch-mlir's own decomposition sums in f64, which made
    nn.LayerNorm's row kernel reduce in f64 and compute the mean a second time in f32."""
    dims = [d % x.dim() for d in dim] if dim else list(range(x.dim()))  # None or []: every dim
    count = math.prod(x.shape[d] for d in dims)
    mean = torch.mean(x, dims, keepdim=True)
    deviation = x - mean
    var = torch.sum(deviation * deviation, dims, keepdim=keepdim) / (count - (1 if correction is None else correction))
    return var, mean if keepdim else torch.squeeze(mean, dims)


def group_norm_decomposition(x: torch.Tensor, weight, bias, n: int, channels: int, hw: int, groups: int,
                             eps: float):
    """aten.native_group_norm through views and reductions: the default decomposition ends in two
    as_strided, which torch-mlir imports as gathers with an index tensor the size of the output (a
    32768 x 4096 GroupNorm needed over 10 GB to lower)."""
    grouped = x.reshape(n, groups, -1)
    mean = torch.mean(grouped, -1, keepdim=True)
    deviation = grouped - mean
    rstd = torch.rsqrt(torch.mean(deviation * deviation, -1, keepdim=True) + eps)
    out = (deviation * rstd).reshape(x.shape)
    per_channel = [1, channels] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out, mean.reshape(n, groups), rstd.reshape(n, groups)


def _scan(x: torch.Tensor, dim: int, combine, identity: float, dtype) -> torch.Tensor:
    """An inclusive scan along `dim` in ceil(log2(n)) elementwise steps (Hillis-Steele): step j combines
    each element with the one 2^j before it (`identity` before the start). torch-mlir lowers cumsum and
    cumprod to tm_tensor.scan, which no upstream pass lowers; these steps are plain linalg."""
    y = x if dtype is None else x.to(dtype)
    dim, n, step = dim % max(y.dim(), 1), y.shape[dim], 1
    while step < n:
        before = torch.full_like(y.narrow(dim, 0, step), identity)
        y = combine(y, torch.cat([before, y.narrow(dim, 0, n - step)], dim))
        step *= 2
    return y


# A scan over more than this many elements scans blocks of SCAN_BLOCK each in one reduction over a triangle
# (a sum: a matmul with a triangle of ones) and then the blocks' totals, the same way again: the log-step scan
# of a row of 32768 read and wrote the whole tensor 15 times, twice each (level1/89_cumsum at 0.04x of eager
# on the H100, level1/90_cumprod at 0.04x)
BLOCKED_SCAN_MIN = 256
SCAN_BLOCK = 32


def _sum_within_blocks(blocks: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    return torch.matmul(blocks, upper.to(blocks.dtype))


def _product_within_blocks(blocks: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    # [..., k, j]: element k of the block where it counts in prefix j, else 1; the product over k
    return torch.where(upper, blocks.unsqueeze(-1), torch.ones((), dtype=blocks.dtype)).prod(-2)


def _blocked_scan(rows: torch.Tensor, combine, identity: float, within_blocks) -> torch.Tensor:
    """The inclusive scan of `rows` along their last dim: each block of SCAN_BLOCK scanned by
    `within_blocks` (one reduction over k <= j), then the blocks' totals scanned (blocked again while they
    are long), and each block combined with the totals of the blocks before it."""
    n = rows.shape[-1]
    if n <= BLOCKED_SCAN_MIN:
        return _scan(rows, -1, combine, identity, None)
    padded = torch.nn.functional.pad(rows, (0, -n % SCAN_BLOCK), value=identity)  # changes no prefix
    blocks = padded.reshape(*padded.shape[:-1], -1, SCAN_BLOCK)
    index = torch.arange(SCAN_BLOCK)
    within = within_blocks(blocks, index[:, None] <= index[None, :])  # upper[k, j]: k counts in prefix j
    totals = _blocked_scan(within[..., -1], combine, identity, within_blocks)
    before = torch.cat([torch.full_like(totals[..., :1], identity), totals[..., :-1]], -1)  # exclusive
    return combine(within, before.unsqueeze(-1)).reshape(padded.shape)[..., :n]


def _cumulative(x: torch.Tensor, dim: int, dtype, combine, identity: float, within_blocks) -> torch.Tensor:
    y = x if dtype is None else x.to(dtype)
    if y.dim() == 0 or y.shape[dim] <= BLOCKED_SCAN_MIN or not y.is_floating_point():
        return _scan(y, dim, combine, identity, None)
    return _blocked_scan(y.movedim(dim, -1), combine, identity, within_blocks).movedim(-1, dim)


def cumsum_decomposition(x: torch.Tensor, dim: int, *, dtype=None) -> torch.Tensor:
    return _cumulative(x, dim, dtype, torch.add, 0.0, _sum_within_blocks)


def cumprod_decomposition(x: torch.Tensor, dim: int, *, dtype=None) -> torch.Tensor:
    return _cumulative(x, dim, dtype, torch.mul, 1.0, _product_within_blocks)


ROUNDS_TOPK_MAX = 64  # up to this k, topk takes k reductions over the row; past it, the row's sort


def topk_decomposition(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """torch.topk as k rounds along `dim` of a max, the max's first position, and a mask over the element
    taken, or for k past ROUNDS_TOPK_MAX the first k of the row's sort (_sort): torch-mlir lowers topk to
    tm_tensor.sort, which no upstream pass lowers; these are plain linalg reductions and elementwise ops.
    Values come out sorted (largest first), as sorted=True asks; among equal values the indices may differ
    from torch's."""
    dim = dim % max(x.dim(), 1)
    if k > ROUNDS_TOPK_MAX:
        values, indices = _sort(x, dim, descending=largest)
        return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)
    work = x if largest else -x
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    positions = torch.arange(x.shape[dim], device=x.device).reshape(shape)
    values, indices = [], []
    for _ in range(k):  # max and then its first position: two one-accumulator reductions (no argmax pair)
        value = torch.amax(work, dim, keepdim=True)
        index = torch.amin(torch.where(work == value, positions, x.shape[dim]), dim, keepdim=True)
        values.append(value)
        indices.append(index)
        work = torch.where(positions == index, torch.full_like(work, -math.inf), work)
    value = torch.cat(values, dim)
    return (value if largest else -value), torch.cat(indices, dim)


def index_put_decomposition(x: torch.Tensor, indices, values: torch.Tensor, accumulate: bool = False):
    """Two forms of index_put, which torch-mlir lowers through tm_tensor ops that no upstream pass lowers:
    x[mask] = v (one boolean mask of x's shape, one value) as an elementwise select; x[..., rows, ...] = v
    (one integer index tensor, along any dim) as a gather: each position along the dim takes the value of
    the last index naming it, or keeps x's (index_add where accumulate). Other forms are left to torch-mlir."""
    given = [(d, index) for d, index in enumerate(indices) if index is not None]
    if len(given) > 1:
        return _index_put_merged(x, given, values, accumulate)
    if not given:
        return NotImplemented
    (dim, index), = given
    if index.dtype == torch.bool:
        if dim or index.shape != x.shape or values.numel() != 1:
            return NotImplemented
        value = values.reshape(()).to(x.dtype)
        return torch.where(index, x + value if accumulate else value, x)
    if index.dim() != 1:
        return NotImplemented
    n = x.shape[dim]
    index = torch.where(index < 0, index + n, index)
    source = values.to(x.dtype).expand(*x.shape[:dim], index.shape[0], *x.shape[dim + 1:])
    if accumulate:
        return index_add_decomposition(x, dim, index, source)
    hits = index.unsqueeze(1) == torch.arange(n, device=x.device)  # [indices, positions along dim]
    order = torch.arange(index.shape[0], device=x.device).unsqueeze(1)
    last = torch.amax(torch.where(hits, order, -1), 0)  # the last index naming each position, -1 for none
    shape = [n if d == dim else 1 for d in range(x.dim())]
    return torch.where((last >= 0).reshape(shape), source.index_select(dim, last.clamp(min=0)), x)


def _index_put_merged(x: torch.Tensor, given: list, values: torch.Tensor, accumulate: bool):
    """x[..., rows, cols, ...] = v, 1-D integer indices of adjacent dims: one index into those dims merged
    (row-major), as index_put_decomposition puts along one dim. NotImplemented for other forms (indices of
    dims apart put their broadcast dim first; index tensors of more dims or of different lengths)."""
    dims = [d for d, _ in given]
    if dims != list(range(dims[0], dims[0] + len(dims))) or any(
            i.dtype == torch.bool or i.dim() != 1 or i.shape != given[0][1].shape for _, i in given):
        return NotImplemented
    first, sizes = dims[0], [x.shape[d] for d in dims]
    merged = torch.zeros_like(given[0][1])
    for (_, index), size in zip(given, sizes):
        merged = merged * size + torch.where(index < 0, index + size, index)
    flat = x.reshape(*x.shape[:first], math.prod(sizes), *x.shape[dims[-1] + 1:])
    put = index_put_decomposition(flat, [None] * first + [merged], values, accumulate)
    return put if put is NotImplemented else put.reshape(x.shape)


def _hits_along(x: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor | None:
    """Each index compared with every position of x along `dim` (dim already normalized): index's dims with x's
    positions after `dim`. None unless index has x's shape but along `dim` (a gate's top-k slots, a GNN's
    targets expanded over the features): other forms are left to torch-mlir."""
    if index.dim() != x.dim() or any(index.shape[d] != x.shape[d] for d in range(x.dim()) if d != dim):
        return None
    positions = torch.arange(x.shape[dim], device=x.device).reshape([1] * (dim + 1) + [-1] + [1] * (x.dim() - dim - 1))
    return index.unsqueeze(dim + 1) == positions


def _sources_at(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """src cut to index's shape, in x's type, broadcast along the positions of _hits_along."""
    return src[tuple(slice(0, n) for n in index.shape)].unsqueeze(dim + 1).to(x.dtype)


def scatter_decomposition(x: torch.Tensor, dim: int, index: torch.Tensor, src) -> torch.Tensor:
    """x.scatter(dim, index, src) (src a tensor or a number) as a comparison of each index with every position
    along `dim` and a select: torch-mlir lowers scatter to tm_tensor.scatter, which no upstream pass lowers.
    Where an index repeats, the sources are summed (torch leaves which one wins undefined)."""
    dim = dim % max(x.dim(), 1)
    hits = _hits_along(x, dim, index)
    if hits is None:
        return NotImplemented
    source = _sources_at(x, dim, index, src) if isinstance(src, torch.Tensor) else \
        torch.full((), src, dtype=x.dtype, device=x.device)
    value = torch.where(hits, source, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim)
    return torch.where(hits.any(dim), value, x)


def scatter_add_decomposition(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """x.scatter_add(dim, index, src) (a GNN's aggregation of edge messages into nodes) as scatter_decomposition's
    comparisons, the matching sources summed onto x (tm_tensor.scatter in torch-mlir)."""
    dim = dim % max(x.dim(), 1)
    hits = _hits_along(x, dim, index)
    if hits is None:
        return NotImplemented
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    return x + torch.where(hits, _sources_at(x, dim, index, src), zero).sum(dim)


def index_add_decomposition(x: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *,
                            alpha=1) -> torch.Tensor:
    """x.index_add(dim, index, source) as a matmul of the one-hot matrix of `index` with `source`: row p of the
    result gains every source slice i with index[i] == p. torch-mlir lowers index_add to tm_tensor.scatter,
    which no upstream pass lowers. Floating point only (integers are left to torch-mlir)."""
    if not x.is_floating_point():
        return NotImplemented
    dim = dim % max(x.dim(), 1)
    one_hot = (torch.arange(x.shape[dim], device=x.device).unsqueeze(1) == index.unsqueeze(0)).to(x.dtype)
    moved = source.to(x.dtype).movedim(dim, 0)
    gathered = (one_hot @ moved.reshape(moved.shape[0], -1)).reshape(x.shape[dim], *moved.shape[1:])
    return x + alpha * gathered.movedim(0, dim)


RANK_SORT_MAX = 4096  # rows up to this long sort by ranks (every pair of a row compared), longer ones bitonically
MAX_SORT = 1 << 17  # a bitonic sort of 2^17 takes 153 passes over the rows


def _sort(x: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A stable sort along `dim` (NaN counting as the largest, as in torch). torch-mlir lowers sort to
    tm_tensor.sort, which no upstream pass lowers; these are comparisons, selects and sums.

    Rows up to RANK_SORT_MAX sort by ranks: an element's rank is the number of elements that sort before it
    (smaller, or larger when descending; an equal one earlier in the row), and output position r takes the
    element of rank r (two reductions over the row per element). Longer rows: _bitonic_sort."""
    dim = dim % max(x.dim(), 1)
    n = x.shape[dim]
    if n > MAX_SORT:
        raise DecompositionLimit(f"a sort of rows of {n} takes a pass over the rows per step of a bitonic sort "
                                 f"here, past the {MAX_SORT} elements a row that this compile stage takes")
    if n > RANK_SORT_MAX:
        return _bitonic_sort(x, dim, descending)
    row = x.movedim(dim, -1)
    mine, other = row.unsqueeze(-1), row.unsqueeze(-2)  # [..., i, 1] and [..., 1, j]
    before = other > mine if descending else other < mine
    equal = other == mine
    if x.is_floating_point():
        mine_nan, other_nan = torch.isnan(mine), torch.isnan(other)
        before = before | (other_nan & ~mine_nan if descending else mine_nan & ~other_nan)
        equal = equal | (mine_nan & other_nan)
    positions = torch.arange(n, device=x.device)
    earlier = positions.unsqueeze(0) < positions.unsqueeze(1)  # [i, j]: j comes before i in the row
    rank = (before | (equal & earlier)).sum(-1)
    taken = rank.unsqueeze(-2) == positions.unsqueeze(-1)  # [..., r, i]: element i goes to position r
    values = torch.where(taken, row.unsqueeze(-2), torch.zeros((), dtype=x.dtype, device=x.device)).sum(-1)
    indices = torch.where(taken, positions, 0).sum(-1)
    return values.to(x.dtype).movedim(-1, dim), indices.movedim(-1, dim)


def _bitonic_sort(x: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """_sort of long rows as a bitonic sorting network over the row padded to a power of two, 2^m: m (m + 1) / 2
    passes, each comparing every element i with element i xor j and keeping the pair in the order of its run
    of k elements (ascending where i & k is 0). Elements order by (class, value, position): the
    class puts NaNs where torch does and the padding last; the position makes the order total, so the sort
    is stable and the padding is cut off at the end."""
    row = x.movedim(dim, -1)
    n, lead = row.shape[-1], row.shape[:-1]
    size = 1 << (n - 1).bit_length()
    values = torch.nn.functional.pad(row, (0, size - n))
    positions = torch.arange(size, device=x.device).expand(*lead, size)
    nan_class, number_class, padding_class = (0, 1, 2) if descending else (1, 0, 2)  # NaN: the largest

    def order_class(v: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        nan = torch.isnan(v) if x.is_floating_point() else torch.zeros_like(i, dtype=torch.bool)
        return torch.where(i >= n, padding_class, torch.where(nan, nan_class, number_class))

    def before(va, ia, vb, ib) -> torch.Tensor:  # a sorts before b
        ca, cb = order_class(va, ia), order_class(vb, ib)
        first = (va > vb) if descending else (va < vb)
        tie = (va == vb) | (ca != number_class)  # NaNs and padding: by position
        return (ca < cb) | ((ca == cb) & (first | (tie & (ia < ib))))

    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            # each element beside its partner (i xor j, the pair's other half flipped in), as [groups, 2, j]
            v, i = (t.reshape(*lead, size // (2 * j), 2, j) for t in (values, positions))
            pv, pi = v.flip(-2), i.flip(-2)
            first_half = (torch.arange(2, device=x.device) == 0).reshape(2, 1)
            ascending = ((torch.arange(size // (2 * j), device=x.device) * 2 * j) & k == 0).reshape(-1, 1, 1)
            in_order = torch.where(first_half, before(v, i, pv, pi), before(pv, pi, v, i))  # the pair as it stands
            keep = in_order == ascending
            values = torch.where(keep, v, pv).reshape(*lead, size)
            positions = torch.where(keep, i, pi).reshape(*lead, size)
            j //= 2
        k *= 2
    return values[..., :n].movedim(-1, dim), positions[..., :n].movedim(-1, dim)


def sort_decomposition(x: torch.Tensor, dim: int = -1, descending: bool = False, *, stable=None):
    return _sort(x, dim, descending)


def argsort_decomposition(x: torch.Tensor, dim: int = -1, descending: bool = False, *, stable=None):
    return _sort(x, dim, descending)[1]


def _tap_indices(taps: list[list[int]], kernel) -> torch.Tensor:
    """The flat positions in a kernel of the taps of every combination of `taps` (per dim, evenly spaced),
    row-major: as arithmetic on aranges, since a tensor of the values (torch.tensor) cannot be made in a
    decomposition."""
    flat = torch.zeros([], dtype=torch.int64)
    for i, along in enumerate(taps):
        step = along[1] - along[0] if len(along) > 1 else 0
        positions = (torch.arange(len(along)) * step + along[0]) * math.prod(kernel[i + 1:])
        flat = flat.unsqueeze(-1) + positions
    return flat.reshape(-1)


def _phases_along(s: int, p: int, d: int, k: int, length: int) -> list:
    """Per output offset r along one dim of a transposed conv: (its taps, descending, the order in which their
    inputs rise, by d / gcd(d, s) a tap; the input offsets of the first tap and the last; its outputs'
    count), or None where no tap reaches an output."""
    phases = []
    for r in range(s):
        taps = [t for t in reversed(range(k)) if (r + p - t * d) % s == 0]
        count = -(-(length - r) // s)
        phases.append((taps, ((r + p - taps[0] * d) // s, (r + p - taps[-1] * d) // s), count)
                      if taps and count > 0 else None)
    return phases


def conv_transpose_decomposition(x: torch.Tensor, weight: torch.Tensor, bias, stride, padding, dilation,
                                 transposed: bool, output_padding, groups: int):
    """A transposed conv of stride s > 1 as one conv per output phase (sub-pixel convolution): along a dim,
    the outputs o = r + s n of one offset r take only the taps t with (r + p - t d) divisible by s, each at
    input n + (r + p - t d) / s: a plain conv of the input (padded once for every phase) with those taps,
    reversed, dilated by their spacing. The phases' outputs are then interleaved. torch-mlir lowers a
    transposed conv as one conv over the input with s - 1 zeros inserted between elements, which multiplies
    zeros in s^dims - 1 of s^dims products (7 of 8 for a 3-D stride 2). Of stride 1: one phase, a conv."""
    dims = len(stride)
    batch, in_channels, *lengths = x.shape
    out_per_group, kernel = weight.shape[1], weight.shape[2:]
    out_channels = out_per_group * groups
    out_lengths = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1
                   for n, s, p, d, k, op in zip(lengths, stride, padding, dilation, kernel, output_padding)]
    # the weight in a conv's layout, [out, in / groups, taps]
    w = weight.reshape(groups, in_channels // groups, out_per_group, math.prod(kernel)).transpose(1, 2) \
        .reshape(out_channels, in_channels // groups, math.prod(kernel))
    phases = [_phases_along(*along) for along in zip(stride, padding, dilation, kernel, out_lengths)]
    used = [[phase for phase in per_r if phase] for per_r in phases]
    left = [max([-first for _, (first, _), _ in runs] + [0]) for runs in used]
    right = [max([count + last - n for _, (_, last), count in runs] + [0]) for runs, n in zip(used, lengths)]
    padded = torch.nn.functional.pad(x, [v for i in reversed(range(dims)) for v in (left[i], right[i])])
    most = [-(-length // s) for length, s in zip(out_lengths, stride)]  # outputs of the longest phase
    spacing = [d // math.gcd(s, d) for s, d in zip(stride, dilation)]  # between a phase's taps' inputs
    pieces = []
    for offsets in itertools.product(*[range(s) for s in stride]):
        per_dim = [phases[i][r] for i, r in enumerate(offsets)]
        if any(phase is None for phase in per_dim):
            pieces.append(x.new_zeros([batch, out_channels, *most]))
            continue
        # the phase's taps gathered into a weight of their own: a view of them would not be contiguous, and a
        # conv through img2col collapses its weight to a matrix, which bufferization then copied on the host
        ws = w.index_select(2, _tap_indices([taps for taps, _, _ in per_dim], kernel)).reshape(
            out_channels, in_channels // groups, *[len(taps) for taps, _, _ in per_dim])
        xs = padded
        for i, (_, (first, last), count) in enumerate(per_dim):
            xs = xs.narrow(2 + i, left[i] + first, count + last - first)
        token = _TRACING_PHASES.set(any(s > 1 for s in stride))
        try:
            y = torch.ops.aten.convolution(xs, ws, None, [1] * dims, [0] * dims, spacing, False, [0] * dims, groups)
        finally:
            _TRACING_PHASES.reset(token)
        pieces.append(torch.nn.functional.pad(
            y, [v for i in reversed(range(dims)) for v in (0, most[i] - y.shape[2 + i])]))
    if len(pieces) == 1:  # stride 1: nothing to interleave (the interleave of one piece was a copy of it)
        out = pieces[0]
    else:  # [offsets..., batch, channels, most...] -> [batch, channels, most_0, s_0, most_1, s_1, ...]
        out = torch.stack(pieces).reshape(*stride, batch, out_channels, *most)
        out = out.permute([dims, dims + 1, *[v for i in range(dims) for v in (dims + 2 + i, i)]])
        out = out.reshape(batch, out_channels, *[m * s for m, s in zip(most, stride)])
        out = out[(slice(None), slice(None), *[slice(0, length) for length in out_lengths])]
    # the bias once, after the interleave (fused into it): each phase's conv starts from zeros of its own,
    # where a bias broadcast shared by the phases' convs as their init would be copied for each on the host
    return out if bias is None else out + bias.reshape(1, -1, *[1] * dims)


# v0 takes a 2-D conv through img2col where its output channels fill at least one of img2col's blocks
# (schedule.templates.IMG2COL_CHANNELS_PER_BLOCK; fewer measured faster direct) in whole thread tiles
# (IMG2COL_CHANNELS_PER_THREAD): only such convs are made 2-D. The frontend does not import the compile stage
# (its MLIR bindings are not torch-mlir's): a test keeps these equal to the templates'
IMG2COL_OUTPUT_CHANNELS = 64
IMG2COL_CHANNELS_PER_THREAD = 8


# set while conv_transpose_decomposition traces the convs of a strided transposed conv's phases, which
# convolution_decomposition decomposes in turn: a 3-D phase is not stacked (a copy of the input per phase for
# convs of 1-2 taps a dim, and the phases' transposed outputs, written into one tensor.empty, were copied on
# the host)
_TRACING_PHASES = contextvars.ContextVar("tracing_phases", default=False)


def conv_as_2d_decomposition(x: torch.Tensor, weight: torch.Tensor, bias, stride, padding, dilation,
                              groups: int):
    """A 1-D or 3-D conv as a 2-D conv, which the compile stage lowers through img2col (upstream's
    `convert_conv2d_to_img2col` takes 2-D convs only; a direct 3-D conv of 32 channels ran at 0.07x of cuDNN, a
    1-D conv of 64 at 0.15x). A 1-D conv is a 2-D conv of height 1 (a view). A 3-D conv's depth taps become
    input channels and its output depths a batch: one gather of the padded input writes
    stacked[n * Do + o, c * KD + t] = x[n, c, o * stride + t * dilation] (KD times the input), and the 2-D conv's
    output is transposed back to [n, f, o, ...]. For convs that _takes_img2col_as_2d."""
    if len(stride) == 1:
        y = torch.ops.aten.convolution(x.unsqueeze(2), weight.unsqueeze(2), bias, [1, stride[0]], [0, padding[0]],
                                       [1, 1], False, [0, 0], groups)
        return y.squeeze(2)
    batch, channels, depth = x.shape[:3]
    taps = weight.shape[2]
    depths = (depth + 2 * padding[0] - dilation[0] * (taps - 1) - 1) // stride[0] + 1
    # padded in every dim here, on the input: padded by the 2-D conv, the stacked copy would be copied again
    padded = torch.nn.functional.pad(x, [v for p in reversed(padding) for v in (p, p)])
    # the gather's channel index into [n, c * Dp + d, h, w] puts each output depth's slab in the 2-D conv's
    # layout at once (a gather, then a transpose, wrote the stacked input twice)
    planes = (torch.arange(depths).reshape(-1, 1, 1) * stride[0] + torch.arange(channels).reshape(-1, 1)
              * padded.shape[2] + torch.arange(taps) * dilation[0]).reshape(-1)
    stacked = padded.reshape(batch, -1, *padded.shape[3:]).index_select(1, planes) \
        .reshape(batch * depths, channels * taps, *padded.shape[3:])
    y = torch.ops.aten.convolution(stacked, weight.reshape(weight.shape[0], -1, *weight.shape[3:]), None,
                                   stride[1:], [0, 0], [1, 1], False, [0, 0], groups)
    y = y.reshape(batch, depths, *y.shape[1:]).transpose(1, 2)
    # the bias added by the transpose's kernel: as the conv's init, its broadcast was a kernel of its own
    return y if bias is None else y + bias.reshape(1, -1, 1, 1, 1)


def _takes_img2col_as_2d(out_channels: int, dilation, groups: int) -> bool:
    """Whether a 1-D or 3-D conv made 2-D would take img2col: undilated along the 2-D conv's dims, ungrouped, its
    output channels filling img2col's blocks. Else it would stay a direct conv, which gains nothing from the
    copies."""
    return list(dilation[-2:]) == [1] * len(dilation[-2:]) and groups == 1 \
        and out_channels >= IMG2COL_OUTPUT_CHANNELS and out_channels % IMG2COL_CHANNELS_PER_THREAD == 0


def convolution_decomposition(x: torch.Tensor, weight: torch.Tensor, bias, stride, padding, dilation,
                              transposed: bool, output_padding, groups: int):
    """Transposed convs of stride > 1 as conv_transpose_decomposition's phases, whose convs come back here (a 1-D
    phase is made 2-D, a 3-D one stays: _TRACING_PHASES); 1-D and 3-D convs that _takes_img2col_as_2d as
    conv_as_2d_decomposition's 2-D conv, transposed ones of stride 1 through their one phase first; a 2-D conv
    that _takes_img2col_as_2d with its bias added after it. Other convs are left to torch-mlir."""
    if transposed and any(s > 1 for s in stride):
        return conv_transpose_decomposition(x, weight, bias, stride, padding, dilation, True, output_padding, groups)
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if len(stride) == 2 and bias is not None and _takes_img2col_as_2d(out_channels, dilation, groups):
        # the bias added after the conv, in its elementwise epilogue: as the init of a conv that img2col takes
        # (whose matmul fuses no producer), its broadcast was a kernel of its own, writing the output's size
        # for the matmul to read back (level2/1: a broadcast, the matmul, the epilogue over 1 GB each)
        y = torch.ops.aten.convolution(x, weight, None, stride, padding, dilation, transposed, output_padding, groups)
        return y + bias.reshape(1, -1, 1, 1)
    if len(stride) == 2 or not _takes_img2col_as_2d(out_channels, dilation, groups) \
            or len(stride) == 3 and _TRACING_PHASES.get():
        return NotImplemented
    if transposed:
        return conv_transpose_decomposition(x, weight, bias, stride, padding, dilation, True, output_padding, groups)
    return conv_as_2d_decomposition(x, weight, bias, stride, padding, dilation, groups)


def avg_pool3d_decomposition(x: torch.Tensor, kernel_size, stride=(), padding=0, ceil_mode: bool = False,
                             count_include_pad: bool = True, divisor_override=None):
    """A 3-D average pooling that counts its padding (the default) as a conv of each channel alone with a
    kernel of 1 / its size: torch-mlir lowers avg_pool3d to pooling_ndhwc_sum between two
    transposes of the whole tensor (level1/46 at 0.24x of eager), the conv stays NCDHW. Other forms (and 16-bit
    floats) are left to torch-mlir."""
    kernel = list(kernel_size) * (3 // len(kernel_size))
    stride = list(stride or kernel) * (3 // len(stride or kernel))
    padding = [padding] * 3 if isinstance(padding, int) else list(padding) * (3 // len(padding))
    if ceil_mode or not count_include_pad or divisor_override is not None or x.dim() != 5 \
            or x.dtype != torch.float32:  # a 16-bit conv would sum in 16 bits
        return NotImplemented
    batch, channels = x.shape[:2]
    # the mean's weights in the kernel: a divide after the conv would be a kernel of its own (the unit channel
    # dim, folded away in it, puts a reshape between the two); torch-mlir takes no grouped 3-D conv
    weights = torch.full((1, 1, *kernel), 1 / math.prod(kernel), dtype=x.dtype, device=x.device)
    y = torch.ops.aten.convolution(x.reshape(batch * channels, 1, *x.shape[2:]), weights, None, stride, padding,
                                   [1, 1, 1], False, [0, 0, 0], 1)
    return y.reshape(batch, channels, *y.shape[2:])


def decomposition_table() -> dict:
    """torch-mlir's decompositions, with the project's in place of some."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    return {**get_decomposition_table(), torch.ops.aten.var_mean.correction: var_mean_decomposition,
            torch.ops.aten.native_group_norm.default: group_norm_decomposition,
            torch.ops.aten.cumsum.default: cumsum_decomposition, torch.ops.aten.cumprod.default: cumprod_decomposition,
            torch.ops.aten.topk.default: topk_decomposition,
            torch.ops.aten.index_put.default: index_put_decomposition,
            torch.ops.aten.scatter.src: scatter_decomposition, torch.ops.aten.scatter.value: scatter_decomposition,
            torch.ops.aten.scatter_add.default: scatter_add_decomposition,
            torch.ops.aten.index_add.default: index_add_decomposition,
            torch.ops.aten.sort.default: sort_decomposition, torch.ops.aten.sort.stable: sort_decomposition,
            torch.ops.aten.argsort.default: argsort_decomposition, torch.ops.aten.argsort.stable: argsort_decomposition,
            torch.ops.aten.convolution.default: convolution_decomposition,
            torch.ops.aten.avg_pool3d.default: avg_pool3d_decomposition}
