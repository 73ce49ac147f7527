"""What the ws kernel's pipelined key-tile loop compiles to, per variant, without a GPU.

Run where nvcc (12.8 or later, for sm_90a) and cuobjdump are (cuobjdump also comes in the
`nvidia-cuda-cuobjdump` wheel, which this finds in the running Python's site-packages):

    python -m compute.gpu.lab.sass_loop ws:128:2:128:2:pingpong:persist:earlyq \\
        ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq [--dtype float16] [--json F]

Each spec's instantiation is compiled to a cubin as flash.py's NVRTC build does (sm_90a,
FA_FORCE_WGMMA), and its SASS is searched for the innermost loop that issues a wgmma and a
softmax (the steady-state step that runs once per key tile). For that loop it prints the
instruction count, the wgmmas, the R2UR moves and the instructions of the uniform datapath
(wgmma descriptors and stage addresses are warp-uniform: when the compiler cannot prove a
value that feeds them uniform, it computes them per thread and moves them across,
FLASH_NOTES v14), the MUFU and FFMA of the softmax, and ptxas's spill bytes for the whole
kernel. A static look: it says what each step issues, not how long it takes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ..flash import Config
from ..sources import KERNEL_DIR

# One instruction line of cuobjdump -sass: /*addr*/  [@P0] OPCODE operands ;
_INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def _opcode(text: str) -> str:
    """The opcode of an instruction's text, its predicate guard dropped."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


# A key-tile step's softmax takes one exp2 per score a thread holds (64 for 128-key tiles):
# loops with wgmmas but fewer (a warpgroup past its diagonal that only keeps the pipeline's
# protocol, say) are not the steady state.
_MIN_EXP = 16


def innermost_wgmma_loop(sass: str) -> list[str] | None:
    """The instructions (text, in order) of the smallest backward-branch loop of one
    function's SASS that holds a wgmma (HGMMA) and a softmax (at least _MIN_EXP MUFU), or
    None if no loop does."""
    ins = [
        (int(m.group(1), 16), m.group(2)) for m in map(_INSTRUCTION.match, sass.splitlines()) if m
    ]
    index = {addr: i for i, (addr, _) in enumerate(ins)}
    best = None
    for i, (addr, text) in enumerate(ins):
        m = _BRANCH_TARGET.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < addr and target in index:
            body = [t for _, t in ins[index[target] : i + 1]]
            ops = [_opcode(t) for t in body]
            has_softmax = sum(op.startswith("MUFU") for op in ops) >= _MIN_EXP
            if has_softmax and any(op.startswith("HGMMA") for op in ops):
                if best is None or len(body) < len(best):
                    best = body
    return best


def loop_stats(body: list[str]) -> dict[str, int]:
    """Counts over a loop's instructions: all, wgmmas, R2UR moves, uniform-datapath
    instructions (opcodes starting with U), MUFU, FFMA and barrier syncs."""
    ops = [_opcode(t) for t in body]

    def count(prefix: str) -> int:
        return sum(op.startswith(prefix) for op in ops)

    return {
        "instructions": len(ops),
        "hgmma": count("HGMMA"),
        "r2ur": count("R2UR"),
        "uniform": count("U"),
        "mufu": count("MUFU"),
        "ffma": count("FFMA"),
        "bar_sync": count("BAR.SYNC"),
    }


def _functions(sass: str) -> dict[str, str]:
    """cuobjdump -sass text split into {mangled name: body}."""
    parts = re.split(r"\n\s+Function : ", sass)
    return {p.split("\n", 1)[0].strip(): p for p in parts[1:]}


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    wheel = Path(sysconfig.get_paths()["purelib"]) / "nvidia"
    return next((str(p) for p in sorted(wheel.glob("cu*/bin/cuobjdump"))), None)


def _instantiation(name: str) -> str:
    """flash.Config.name()'s template as the kernel file's own FA_WS_INST(...) line."""
    return "FA_WS_INST(" + name.split("<", 1)[1].rstrip(">") + ")\n"


def compile_and_measure(specs: list[str], dt: int) -> list[dict]:
    """Compile each spec's ws instantiation (dtype code dt) to one cubin and measure its
    loop; raises RuntimeError with one sentence when a tool is missing or fails."""
    nvcc, cuobjdump = shutil.which("nvcc"), _cuobjdump()
    if nvcc is None or cuobjdump is None:
        missing = "nvcc" if nvcc is None else "cuobjdump"
        raise RuntimeError(
            f"{missing} was not found: install the CUDA toolkit (and `pip install "
            "nvidia-cuda-cuobjdump` for cuobjdump) or run this on the GPU machine"
        )
    configs = [Config.parse(s) for s in specs]
    if any(c.kernel != "ws" for c in configs):
        raise RuntimeError("sass_loop reads the ws kernel's variants only")
    names = [c.name(dt) for c in configs]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "inst.cu"
        src.write_text(
            '#include "flash_fwd_ws.cu"\n' + "".join(map(_instantiation, dict.fromkeys(names)))
        )
        cubin = Path(tmp) / "inst.cubin"
        cmd = [nvcc, "-std=c++17", "-arch=sm_90a", "-cubin", "-DFA_FORCE_WGMMA", "-Xptxas", "-v"]
        cmd += ["-I", str(KERNEL_DIR), "-o", str(cubin), str(src)]
        built = subprocess.run(cmd, capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"nvcc failed: {built.stderr.strip().splitlines()[-1]}")
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True)
    spills = _spills(built.stderr)
    functions = _functions(sass.stdout)
    rows = []
    for spec, name in zip(specs, names, strict=True):
        mangled = _mangled_key(name)
        body = next((b for f, b in functions.items() if mangled in f), None)
        loop = innermost_wgmma_loop(body) if body else None
        row = {"spec": spec, "kernel": name, "spill_bytes": spills.get(mangled)}
        row.update(loop_stats(loop) if loop else {"instructions": None})
        rows.append(row)
    return rows


def _mangled_key(name: str) -> str:
    """The part of the Itanium-mangled name that identifies flash_fwd_ws<a,b,...>."""
    args = re.findall(r"-?\d+", name.split("<", 1)[1])
    return "flash_fwd_wsI" + "".join(f"Li{a}E" for a in args) + "Ev"


def _spills(ptxas_log: str) -> dict[str, int]:
    """{mangled key: spill store bytes} from nvcc -Xptxas -v output."""
    out, current = {}, None
    for line in ptxas_log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = next(iter(re.findall(r"flash_fwd_wsI(?:Li-?\d+E)+Ev", m.group(1))), None)
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and current:
            out[current] = int(m.group(1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="+", help="ws kernel specs (flash.Config.parse)")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    try:
        rows = compile_and_measure(args.spec, 0 if args.dtype == "float16" else 1)
    except (RuntimeError, ValueError) as exc:
        print(f"sass_loop: {exc}", file=sys.stderr)
        return 2
    cols = ("instructions", "hgmma", "r2ur", "uniform", "mufu", "ffma", "bar_sync", "spill_bytes")
    print("spec".ljust(56) + "".join(c.rjust(13) for c in cols))
    for row in rows:
        print(row["spec"].ljust(56) + "".join(str(row.get(c)).rjust(13) for c in cols))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": "python -m compute.gpu.lab.sass_loop "
                    + " ".join(argv if argv is not None else sys.argv[1:]),
                    "dtype": args.dtype,
                    "rows": rows,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
