"""cache_hints.stream_global_accesses: .cs on the plain global accesses of the named kernels only."""
from __future__ import annotations

from workers.compile.cache_hints import stream_global_accesses

PTX = """//
.version 8.5
.target sm_90a
.address_size 64

.visible .entry rows(
\t.param .u64 .ptr .align 16 rows_param_0
)
{
\tld.global.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd1];
\tld.global.nc.f32 \t%f1, [%rd2];
\tld.shared.b32 \t%r5, [%r6];
\tst.global.b32 \t[%rd3], %r5;
\tret;
}
.visible .entry other(
\t.param .u64 .ptr .align 16 other_param_0
)
{
\tld.global.v2.b32 \t{%r1, %r2}, [%rd1];
\tst.global.v4.b32 \t[%rd3], {%r1, %r2, %r1, %r2};
\tret;
}
"""


def test_loads_of_the_named_kernel_only():
    out = stream_global_accesses(PTX, {"rows": "loads", "other": "none"})
    rows, other = out.split(".visible .entry other(")
    assert "ld.global.cs.v4.b32 \t{%r1" in rows and "st.global.b32 \t[%rd3]" in rows
    assert "ld.global.nc.f32" in rows and "ld.shared.b32" in rows  # an operator set already; not global
    assert ".cs" not in other and out.replace("ld.global.cs.", "ld.global.") == PTX


def test_stores_and_all():
    stores = stream_global_accesses(PTX, {"other": "stores"})
    assert stores.count(".cs") == 1 and "st.global.cs.v4.b32 \t[%rd3]" in stores
    every = stream_global_accesses(PTX, {"rows": "all", "other": "all"})
    assert every.count("global.cs.") == 4 and "ld.global.nc.f32" in every


def test_unnamed_or_none_changes_nothing():
    assert stream_global_accesses(PTX, {}) == PTX == stream_global_accesses(PTX, {"rows": "none"})
