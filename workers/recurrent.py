"""Frontend: recurrent layers (nn.RNN, nn.LSTM, nn.GRU) as a time loop in model_linalg.mlir.

torch-mlir unrolls a recurrent layer step by step (an LSTM of 6 layers over 512 steps: ~70,000 linalg ops),
far more kernels than a compile takes. Instead, while the model is exported, each layer runs as:

  1. per layer and direction, the input projection of every time step at once (one matmul, x W_ih^T + b_ih);
  2. a scan op of this package's own (`farm::<cell>_scan[_reverse]`: torch.export keeps it whole) that
     applies the cell to each time step in turn.

torch-mlir imports each scan as a `torch.operator`; `lower_scans` calls a function of the same signature
in its place, lowers the model, and gives that function its body: an scf.for over the time steps whose
body is the cell (lowered by torch-mlir on its own) on one step's slices. The compile stage tiles the
cell's ops inside the loop, and the host runs the loop around their kernels (config.json's loops).
Every step's states are kept (states[t + 1] from states[t]; the reverse direction runs from the end), so
the loop writes each step in place and the layer's output is a slice of them.
"""
from __future__ import annotations

import contextlib
import functools
import re
import types

import torch
from torch import nn


class RecurrentError(Exception):
    """A recurrent layer this frontend does not lower (projections, packed sequences, dropout in training)."""


def lstm_cell(x, h, c, w_hh, b_hh):
    """One LSTM step from the step's input projection `x` (gates i, f, g, o)."""
    i, f, g, o = (x + h @ w_hh.T + b_hh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def gru_cell(x, h, w_hh, b_hh):
    """One GRU step (gates r, z, n; the reset gate scales the hidden projection with its bias)."""
    x_r, x_z, x_n = x.chunk(3, -1)
    h_r, h_z, h_n = (h @ w_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    n = torch.tanh(x_n + r * h_n)
    return ((1 - z) * n + z * h,)


def rnn_tanh_cell(x, h, w_hh, b_hh):
    return (torch.tanh(x + h @ w_hh.T + b_hh),)


def rnn_relu_cell(x, h, w_hh, b_hh):
    return (torch.relu(x + h @ w_hh.T + b_hh),)


# cell name -> (step function, states it carries)
CELLS = {"lstm": (lstm_cell, 2), "gru": (gru_cell, 1), "rnn_tanh": (rnn_tanh_cell, 1), "rnn_relu": (rnn_relu_cell, 1)}


def scan(cell: str, reverse: bool, xproj, *states_and_weights):
    """The eager meaning of a scan op: (outputs [T, B, H], final states...)."""
    step, n_states = CELLS[cell]
    states, weights = list(states_and_weights[:n_states]), states_and_weights[n_states:]
    outputs = [None] * xproj.shape[0]
    for t in (reversed(range(xproj.shape[0])) if reverse else range(xproj.shape[0])):
        states = step(xproj[t], *states, *weights)
        outputs[t] = states[0]
    return (torch.stack(outputs), *states)


def op_name(cell: str, reverse: bool) -> str:
    return f"{cell}_scan{'_reverse' if reverse else ''}"


def _scan_shapes(n_states: int, xproj, *states_and_weights):
    """A scan's results as torch.export traces them: their shapes alone."""
    states = states_and_weights[:n_states]
    return (xproj.new_empty(*xproj.shape[:2], states[0].shape[-1]), *[s.new_empty(s.shape) for s in states])


def _define_scan_ops() -> tuple[dict, torch.library.Library]:
    """farm::<cell>_scan[_reverse] for each cell: scan() when run, _scan_shapes under torch.export."""
    library = torch.library.Library("farm", "FRAGMENT")
    ops = {}
    for cell, (_, n_states) in CELLS.items():
        for reverse in (False, True):
            name = op_name(cell, reverse)
            states = ", ".join(f"Tensor s{i}" for i in range(n_states))
            library.define(f"{name}(Tensor xproj, {states}, Tensor w_hh, Tensor b_hh) -> "
                           f"({', '.join(['Tensor'] * (1 + n_states))})")
            library.impl(name, functools.partial(scan, cell, reverse), "CompositeExplicitAutograd")
            torch.library.register_fake(f"farm::{name}", functools.partial(_scan_shapes, n_states), lib=library)
            ops[name] = getattr(torch.ops.farm, name).default
    return ops, library


SCAN_OPS, _LIBRARY = _define_scan_ops()


def _cell_name(layer: nn.RNNBase) -> str:
    return {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}[layer.mode]


def scanned_forward(layer: nn.RNNBase, input, hx=None):
    """nn.RNN/LSTM/GRU.forward in terms of input projections and scan ops (same results, same parameters)."""
    if isinstance(input, nn.utils.rnn.PackedSequence):
        raise RecurrentError("a recurrent layer over a PackedSequence is not lowered: pad the batch instead")
    if layer.proj_size:
        raise RecurrentError("an LSTM with proj_size is not lowered")
    if layer.training and layer.dropout:
        raise RecurrentError("dropout between recurrent layers in training mode is not lowered")
    cell = _cell_name(layer)
    n_states = CELLS[cell][1]
    batched = input.dim() == 3
    x = input if batched else input.unsqueeze(1)
    if batched and layer.batch_first:
        x = x.transpose(0, 1)
    directions = 2 if layer.bidirectional else 1
    shape = (layer.num_layers * directions, x.shape[1], layer.hidden_size)
    if hx is None:
        hx = [x.new_zeros(shape)] * n_states
    else:
        hx = list(hx) if n_states > 1 else [hx]
        hx = [s if batched else s.unsqueeze(1) for s in hx]
    finals = [[] for _ in range(n_states)]
    for number in range(layer.num_layers):
        outputs = []
        for direction in range(directions):
            suffix = f"_l{number}{'_reverse' if direction else ''}"
            w_ih, w_hh = getattr(layer, "weight_ih" + suffix), getattr(layer, "weight_hh" + suffix)
            b_ih = getattr(layer, "bias_ih" + suffix) if layer.bias else w_ih.new_zeros(w_ih.shape[0])
            b_hh = getattr(layer, "bias_hh" + suffix) if layer.bias else w_hh.new_zeros(w_hh.shape[0])
            states = [s[number * directions + direction] for s in hx]
            result = SCAN_OPS[op_name(cell, bool(direction))](x @ w_ih.T + b_ih, *states, w_hh, b_hh)
            outputs.append(result[0])
            for final, state in zip(finals, result[1:]):
                final.append(state)
        x = torch.cat(outputs, -1) if directions > 1 else outputs[0]
    if batched and layer.batch_first:
        x = x.transpose(0, 1)
    finals = [torch.stack(f) if batched else torch.stack(f).squeeze(1) for f in finals]
    return (x if batched else x.squeeze(1)), (tuple(finals) if n_states > 1 else finals[0])


@contextlib.contextmanager
def scanned_layers(model: nn.Module):
    """Within the block, the model's recurrent layers run scanned_forward (their parameters untouched)."""
    layers = [m for m in model.modules() if isinstance(m, nn.RNNBase)]
    for layer in layers:
        layer.forward = types.MethodType(scanned_forward, layer)
    try:
        yield bool(layers)
    finally:
        for layer in layers:
            del layer.forward


# ---------------------------------------------------------------------------------------------
# From the imported torch dialect to linalg: each scan a function with a time loop.

_OPERATOR = re.compile(r'(?P<results>%[\w#]+(?::\d+)?) = torch\.operator "torch\.farm\.(?P<op>\w+)"'
                       r'\((?P<operands>[^)]*)\) : \((?P<types>[^)]*)\) -> (?P<result_types>.*)')
_TENSOR = re.compile(r"tensor<(?P<dims>(?:\d+x)+)(?P<dtype>\w+)>")
_SCAN_FUNCTION = re.compile(r"farm_(?P<cell>\w+?)_scan(?P<reverse>_reverse)?_\d+")  # calls_for_scans' names


def calls_for_scans(torch_text: str) -> tuple[str, list[str]]:
    """The imported module's text with each scan operator a call of a private function of its own
    (@farm_<op>_<n>), and those functions' names."""
    declarations, names = [], []

    def call(found: re.Match) -> str:
        name = f"farm_{found['op']}_{len(names)}"
        names.append(name)
        result_types = found["result_types"].strip()
        results = result_types if result_types.startswith("(") else f"({result_types})"
        declarations.append(f"  func.func private @{name}({found['types']}) -> {results}\n")
        return f"{found['results']} = func.call @{name}({found['operands']}) : ({found['types']}) -> {results}"

    text = _OPERATOR.sub(call, torch_text)
    at = text.index("  func.func")
    return text[:at] + "".join(declarations) + text[at:], names


def _shape(tensor_type: str) -> tuple[list[int], str]:
    found = _TENSOR.fullmatch(tensor_type.strip())
    return [int(d) for d in found["dims"].rstrip("x").split("x")], found["dtype"]


def scan_body(name: str, arg_types: list[str], cell_function: str) -> str:
    """The definition of scan function `name` (farm_<cell>_scan[_reverse]_<n>) with arguments of
    `arg_types` (xproj [T, B, G], states [B, H]..., w_hh, b_hh), stepping `cell_function`.

    Every step's states go into one tensor of rows [(T + 1) * states * B, H], the loop's only carried value:
    each step writes its states' rows in place, slices of the states' own rank (the schedule's
    structured.insert_slice_to_copy builds an invalid copy for a rank-reducing insert). Two carried tensors
    made alike (from one zero constant) would be merged by CSE into one buffer, which bufferization splits
    again with a copy on the host: each scan's tensor is marked with the scan's name, so none is like another.
    A step reads its states through a copy of their own (a kernel): a kernel fused into the one writing the
    new states would otherwise read and write one buffer, which bufferization resolves with a copy on the host."""
    scan = _SCAN_FUNCTION.fullmatch(name)
    reverse = scan["reverse"] is not None
    n_states = CELLS[scan["cell"]][1]
    (steps, batch, gates), dtype = _shape(arg_types[0])
    hidden = _shape(arg_types[1])[0][1]
    step_type, state_type = f"tensor<{batch}x{gates}x{dtype}>", f"tensor<{batch}x{hidden}x{dtype}>"
    rows_type = f"tensor<{(steps + 1) * n_states * batch}x{hidden}x{dtype}>"
    all_type = f"tensor<{steps + 1}x{n_states}x{batch}x{hidden}x{dtype}>"
    out_type = f"tensor<{steps}x{batch}x{hidden}x{dtype}>"
    states_types = ", ".join([state_type] * n_states)
    state_rows = n_states * batch  # rows of one step's states

    def rows(at: str) -> str:  # the rows of a state, from its first row
        return f"[{at}, 0] [{batch}, {hidden}] [1, 1]"

    def first_row(step: str, s: int, indent: str) -> list[str]:  # %row<s> = step * state_rows + s * batch
        return [f"{indent}%at{s} = arith.muli {step}, %state_rows : index",
                f"{indent}%row{s} = arith.addi %at{s}, %c{s * batch} : index"]

    # forward: step t + 1's states from step t's, the initial states at step 0; reverse: t's from t + 1's
    first, step, read, write = (steps, "%t", "%next", "%t") if reverse else (0, "%i", "%i", "%next")
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    lines = [f"  func.func private @{name}({args}) -> ({out_type}, {states_types}) {{",
             "    %c0 = arith.constant 0 : index", "    %c1 = arith.constant 1 : index",
             *(f"    %c{s * batch} = arith.constant {s * batch} : index" for s in range(1, n_states)),
             f"    %state_rows = arith.constant {state_rows} : index",
             f"    %steps = arith.constant {steps} : index", f"    %last = arith.constant {steps - 1} : index",
             f"    %init = tensor.empty() {{farm.scan = \"{name}\"}} : {rows_type}"]
    for s in range(n_states):
        lines.append(f"    %init{s + 1} = tensor.insert_slice %a{1 + s} into %init{s or ''}"
                     f"{rows(str(first * state_rows + s * batch))} : {state_type} into {rows_type}")
    lines.append(f"    %states = scf.for %i = %c0 to %steps step %c1 iter_args(%all = %init{n_states}) -> ({rows_type}) {{")
    if reverse:
        lines.append("      %t = arith.subi %last, %i : index")
    lines.append(f"      %next = arith.addi {step}, %c1 : index")
    lines.append(f"      %x = tensor.extract_slice %a0[{step}, 0, 0] [1, {batch}, {gates}] [1, 1, 1] "
                 f": {arg_types[0]} to {step_type}")
    for s in range(n_states):
        lines += first_row(read, s, "      ")
        lines.append(f"      %read{s} = tensor.extract_slice %all{rows(f'%row{s}')} : {rows_type} to {state_type}")
        lines.append(f"      %fresh{s} = tensor.empty() : {state_type}")
        lines.append(f"      %s{s} = linalg.copy ins(%read{s} : {state_type}) outs(%fresh{s} : {state_type}) -> {state_type}")
    operands = ", ".join(["%x", *(f"%s{s}" for s in range(n_states)),
                          *(f"%a{i}" for i in range(1 + n_states, len(arg_types)))])
    lines.append(f"      %new:{n_states} = func.call @{cell_function}({operands}) : "
                 f"({', '.join([step_type, *[state_type] * n_states, *arg_types[1 + n_states:]])}) -> ({states_types})")
    for s in range(n_states):
        lines += [line.replace(f"%at{s}", f"%put_at{s}").replace(f"%row{s}", f"%put_row{s}")
                  for line in first_row(write, s, "      ")]
        lines.append(f"      %put{s + 1} = tensor.insert_slice %new#{s} into {f'%put{s}' if s else '%all'}"
                     f"{rows(f'%put_row{s}')} : {state_type} into {rows_type}")
    lines.append(f"      scf.yield %put{n_states} : {rows_type}")
    lines.append("    }")
    outputs_at, final_at = (0, 0) if reverse else (1, steps)
    lines.append(f"    %all = tensor.expand_shape %states [[0, 1, 2], [3]] output_shape "
                 f"[{steps + 1}, {n_states}, {batch}, {hidden}] : {rows_type} into {all_type}")
    lines.append(f"    %out = tensor.extract_slice %all[{outputs_at}, 0, 0, 0] [{steps}, 1, {batch}, {hidden}] "
                 f"[1, 1, 1, 1] : {all_type} to {out_type}")
    for s in range(n_states):
        lines.append(f"    %final{s} = tensor.extract_slice %states{rows(str(final_at * state_rows + s * batch))} "
                     f": {rows_type} to {state_type}")
    finals = ", ".join(f"%final{s}" for s in range(n_states))
    lines.append(f"    return %out, {finals} : {out_type}, {states_types}")
    lines.append("  }")
    return "\n".join(lines) + "\n"


class _Cell(nn.Module):
    def __init__(self, cell: str):
        super().__init__()
        self.step = CELLS[cell][0]

    def forward(self, *args):
        return self.step(*args)


_TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}


def lower_cell(cell: str, name: str, arg_types: list[str], decompositions: dict) -> str:
    """The text of private function `name`: one step of `cell` on (x [B, G], states [B, H]..., w_hh, b_hh)
    of `arg_types`, lowered by torch-mlir to linalg on tensors."""
    from torch_mlir import fx
    from torch_mlir.compiler_utils import OutputType

    examples = [torch.zeros(*shape, dtype=_TORCH_DTYPES[dtype]) for shape, dtype in map(_shape, arg_types)]
    with torch.no_grad():
        module = fx.export_and_import(_Cell(cell), *examples, output_type=OutputType.LINALG_ON_TENSORS,
                                      func_name=name, decomposition_table=decompositions)
    text = "\n".join(str(op) for op in module.body.operations)
    return text.replace(f"func.func @{name}(", f"func.func private @{name}(")


# torch-mlir's linalg backend pipeline ends by verifying that no call of an undefined function is left
_CONTRACT_CHECK = ",torch-verify-linalg-on-tensors-backend-contract"


def torch_backend(program, decompositions: dict) -> tuple:
    """A torch.export program whose recurrent layers ran scanned_forward -> (a torch-mlir module in the torch
    backend form, in a context of its own, each scan a call of a declared function; those functions' names)."""
    from torch_mlir import fx, ir
    from torch_mlir.compiler_utils import OutputType, run_pipeline_with_repro_report

    raw = fx.export_and_import(program, output_type=OutputType.RAW, func_name="forward",
                               decomposition_table=decompositions)
    text, names = calls_for_scans(str(raw))
    with raw.context:
        module = ir.Module.parse(text)
    run_pipeline_with_repro_report(
        module, "builtin.module(func.func(torch-match-quantized-custom-ops), "
        "torchdynamo-export-to-torch-backend-pipeline{ extra-library=})", "Lowering TorchFX IR -> Torch Backend IR")
    return module, names


def lower_scans(program, decompositions: dict):
    """A torch.export program whose recurrent layers ran scanned_forward -> a torch-mlir module of linalg on
    tensors (in a context of its own), each scan inlined as its time loop."""
    from torch_mlir import ir
    from torch_mlir.compiler_utils import run_pipeline_with_repro_report
    from torch_mlir.passmanager import PassManager

    module, names = torch_backend(program, decompositions)
    with module.context:
        to_linalg = str(PassManager.parse(
            "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=True})"))
        if not to_linalg.endswith(_CONTRACT_CHECK + ")"):
            raise RuntimeError(f"torch-mlir's linalg backend pipeline no longer ends with its contract check: {to_linalg}")
        run_pipeline_with_repro_report(module, to_linalg.replace(_CONTRACT_CHECK, ""),
                                       "Lowering Torch Backend IR -> Linalg-on-Tensors Backend IR")
        declarations = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value in names}
        cells: dict[tuple, str] = {}
        definitions = []
        for name in names:
            declaration = declarations[name]
            arg_types = [str(t) for t in ir.FunctionType(ir.TypeAttr(declaration.attributes["function_type"]).value).inputs]
            cell = _SCAN_FUNCTION.fullmatch(name)["cell"]
            (_, batch, gates), dtype = _shape(arg_types[0])
            step_types = (f"tensor<{batch}x{gates}x{dtype}>", *arg_types[1:])
            if (cell, step_types) not in cells:
                cells[(cell, step_types)] = f"farm_{cell}_cell_{len(cells)}"
                definitions.append(lower_cell(cell, cells[(cell, step_types)], list(step_types), decompositions))
            definitions.append(scan_body(name, arg_types, cells[(cell, step_types)]))
            declaration.operation.erase()
        parsed = ir.Module.parse("module {\n" + "\n".join(definitions) + "\n}")  # owns them until moved
        for op in list(parsed.body.operations):
            op.operation.detach_from_parent()
            module.body.append(op.operation)
        run_pipeline_with_repro_report(module, "builtin.module(inline, symbol-dce, canonicalize, cse, "
                                       "func.func(loop-invariant-code-motion))", "Inlining the recurrent layers' time loops")
        _fresh_inits_in_loops(module)
        run_pipeline_with_repro_report(module, "builtin.module(" + _CONTRACT_CHECK.lstrip(",") + ")",
                                       "Checking the linalg-on-tensors backend contract")
    return module


def _ops(root, keep) -> list:
    """The ops inside `root` (itself included) for which keep(op), in walk order."""
    from torch_mlir import ir

    found = []
    root.operation.walk(lambda op: (found.append(op) if keep(op) else None) or ir.WalkResult.ADVANCE)
    return found


def _outside(op, loop) -> bool:
    parent = op.operation.parent
    while parent is not None and parent != loop.operation:
        parent = parent.parent
    return parent is None


def _fresh_inits_in_loops(module) -> None:
    """Loop-invariant code motion takes the weights' transposes out of the time loops, and with them the
    tensor.empty and linalg.fill that ops inside the loop write into (a matmul's zeroed accumulator): each
    step writing into a tensor from before the loop makes bufferization copy it on the host every step.
    Each such init is made again right before the op inside the loop that writes into it."""
    from torch_mlir import ir

    for loop in _ops(module, lambda op: op.name == "scf.for"):
        for op in _ops(loop, lambda op: op.name.startswith("linalg.") and len(op.results)):
            for i in range(len(op.operands) - len(op.results), len(op.operands)):  # its inits
                init = op.operands[i].owner
                if isinstance(init, ir.Block) or not _outside(init, loop):
                    continue
                at = ir.InsertionPoint(op)
                if init.name == "tensor.empty":
                    op.operands[i] = init.operation.clone(at).results[0]
                elif init.name == "linalg.fill" and init.operands[1].owner.name == "tensor.empty":
                    empty = init.operands[1].owner.operation.clone(at)
                    fill = init.operation.clone(at)
                    fill.operands[1] = empty.results[0]
                    op.operands[i] = fill.results[0]
