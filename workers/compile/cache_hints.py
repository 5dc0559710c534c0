"""Cache operators on a kernel's global loads and stores, set in its PTX.

LLVM's NVPTX back end of the bundled bindings emits every global access with the default operator (.ca
loads, .wb stores) and drops `nontemporal`, so the schedule's choice is written into the PTX here, the
one edit of the generated code after LLVM. PTX's cache operators are performance hints only (PTX ISA,
"Cache Operators"): the edit never changes what a kernel computes, only where its lines stay in L1 and L2.
"""
from __future__ import annotations

import re

# the schedule's cache_streaming -> the accesses that get .cs ("cache streaming, likely accessed once":
# lines evicted first from L1 and L2, as Inductor's evict_first loads)
STREAMED = {"none": (), "loads": ("ld",), "stores": ("st",), "all": ("ld", "st")}
_ENTRY = re.compile(r"^\.visible \.entry (\w+)\(", re.M)
# a global access with no cache operator yet: .global is followed by the vector width or the type
_PLAIN_ACCESS = re.compile(r"\b(ld|st)\.global\.(?=(?:v[248]\.)?[bsuf]\d+\s)")


def stream_global_accesses(ptx: str, kernels: dict[str, str]) -> str:
    """`ptx` with .cs on the plain global loads and/or stores of each kernel named in `kernels` (kernel ->
    its schedule's cache_streaming: "none", "loads", "stores" or "all")."""
    pieces, done = [], 0
    for entry in _ENTRY.finditer(ptx):
        streamed = STREAMED[kernels.get(entry.group(1), "none")]
        if not streamed:
            continue
        end = ptx.index("\n}\n", entry.end())  # a function's body closes at the first `}` of a line
        pieces += [ptx[done:entry.start()],
                   _PLAIN_ACCESS.sub(lambda m: f"{m.group(1)}.global.cs." if m.group(1) in streamed else m.group(0),
                                     ptx[entry.start():end])]
        done = end
    return "".join(pieces) + ptx[done:]
