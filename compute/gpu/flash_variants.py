"""The tensor-core forward's kernel variants: one `Config` per compiled instantiation.

A variant is written as a spec string, 'mma:D:WARPS:BN:MINB', 'wgmma:D:WG:BN:MINB[:pingpong]'
or 'ws:D:NC:BN:STAGES[:pingpong][:serial]' followed by the ws kernel's traits in WS_TRAITS
order (`Config.parse` reads it, `Config.spec` writes it). `Config.name` is the template
instantiation NVRTC compiles; for the ws kernel its last argument is the traits' bits
(kernels/ws_traits.cuh names the same bits). Variants that were measured and removed are
refused with a pointer to FLASH_NOTES.md ("Removed variants").
"""

from __future__ import annotations

from dataclasses import dataclass

# The ws kernel's traits: spec flag, Config field and bit of the kernel's MODE argument
# (kernels/ws_traits.cuh: FA_WS_PERSIST ...), in the order spec() writes them. The bits are
# those the variants were measured with, so the kernel names and their PTX stay as they were.
WS_TRAITS: tuple[tuple[str, str, int], ...] = (
    ("persist", "persistent", 4),
    ("lpt", "lpt", 8),
    ("qreg", "q_regs", 256),
    ("panelo", "panel_o", 4096),
    ("earlyq", "early_q", 131072),
    ("endq", "end_q", 262144),
    ("band", "band", 524288),
)
_WS_OVERLAP, _WS_PINGPONG = 1, 2  # FA_WS_OVERLAP, FA_WS_PINGPONG
# Spec flags of variants that were measured, lost and left the kernel (FLASH_NOTES.md).
REMOVED_FLAGS = frozenset(
    ("tmastore", "tailsplit", "mcast", "lazy", "wgrelease", "narrowtail", "padrows",
     "wgalltiles", "narrowfirst", "narrowfirstpv", "trace", "qprefetch", "sktail", "uniform")
)  # fmt: skip
_WS_FLAGS = ("serial", *(flag for flag, _, _ in WS_TRAITS))


@dataclass(frozen=True)
class Config:
    """One compiled kernel variant (see the module docstring for its spec string)."""

    kernel: str  # "mma", "wgmma" or "ws"
    d: int
    # mma: warps per CTA (16 query rows each); wgmma: warpgroups (64 rows each);
    # ws: consumer warpgroups (64 rows each; one producer warpgroup comes on top)
    warps: int
    block_n: int
    min_blocks: int = 1  # mma / wgmma: CTAs per SM asked of the compiler; ws: always 1
    # wgmma (two warpgroups) and ws: the warpgroups take turns at the tensor cores
    # (FA3's inter-warpgroup overlap; FLASH_NOTES.md)
    ping_pong: bool = False
    stages: int = 2  # ws: depth of the K and V rings in shared memory
    overlap: bool = True  # ws: issue S_{j+1} before the softmax of tile j (intra-warpgroup)
    persistent: bool = False  # ws: one CTA per SM drawing work items from a ticket counter
    lpt: bool = False  # ws, causal: heaviest query blocks of a few heads first
    q_regs: bool = False  # ws: Q's A fragments held in registers for the S GEMM
    # ws, persistent: O staged one 64-column panel at a time, so 176-key tiles fit at d = 128
    panel_o: bool = False
    early_q: bool = False  # ws, persistent: Q released after each item's last S GEMM
    end_q: bool = False  # ws, causal: query blocks end at N_q (the partial block is first)
    # ws: a band (sliding window) from the launch's layout instead of the causal flag; each
    # query block reads only the key tiles its band touches (kernels/ws_traits.cuh)
    band: bool = False

    @property
    def block_m(self) -> int:
        return self.warps * (16 if self.kernel == "mma" else 64)

    @property
    def threads(self) -> int:
        if self.kernel == "ws":
            return (self.warps + 1) * 128
        return self.warps * (32 if self.kernel == "mma" else 128)

    def smem_bytes(self) -> int:
        if self.kernel == "mma":
            return (self.block_m + 4 * self.block_n) * self.d * 2
        if self.kernel == "ws":
            # Q + `stages` of K and of V (+ an O staging tile when persistent, one 64-column
            # panel wide with ':panelo') + the mbarriers, the ticket slot and 16 spare bytes
            # (kernels/ws_pipeline.cuh, FaSmem), plus 1 KB for the 1024-byte alignment.
            staging = 0
            if self.persistent:
                staging = self.block_m * (64 if self.panel_o else self.d) * 2
            rows = self.block_m + 2 * self.stages * self.block_n
            return rows * self.d * 2 + staging + 8 * (3 + 4 * self.stages) + 16 + 1024
        # wgmma: Q + 2 stages of K and V, plus 1 KB so the base can be aligned to 1024 bytes.
        return (self.block_m + 4 * self.block_n) * self.d * 2 + 1024

    def ws_mode(self) -> int:
        """The ws kernel's MODE argument: the bits of its traits (kernels/ws_traits.cuh)."""
        mode = _WS_OVERLAP * int(self.overlap) | _WS_PINGPONG * int(self.ping_pong)
        return mode | sum(bit for _, field, bit in WS_TRAITS if getattr(self, field))

    def name(self, dt: int) -> str:
        """The template instantiation NVRTC compiles for dtype code dt (0 fp16, 1 bf16)."""
        if self.kernel == "mma":
            return f"flash_fwd_mma<{dt},{self.d},{self.warps},{self.block_n},{self.min_blocks}>"
        if self.kernel == "ws":
            args = f"{dt},{self.d},{self.warps},{self.block_n},{self.stages},{self.ws_mode()}"
            return f"flash_fwd_ws<{args}>"
        return (
            f"flash_fwd_wgmma<{dt},{self.d},{self.warps},{self.block_n},{self.min_blocks},"
            f"{int(self.ping_pong)}>"
        )

    def spec(self) -> str:
        """This variant's spec string (parse() reads it back)."""
        fifth = self.stages if self.kernel == "ws" else self.min_blocks
        text = f"{self.kernel}:{self.d}:{self.warps}:{self.block_n}:{fifth}"
        text += ":pingpong" if self.ping_pong else ""
        text += ":serial" if self.kernel == "ws" and not self.overlap else ""
        return text + "".join(f":{flag}" for flag, field, _ in WS_TRAITS if getattr(self, field))

    @classmethod
    def parse(cls, spec: str) -> Config:
        """The variant a spec() string names; ValueError with one sentence if it names none."""
        parts = spec.split(":")
        removed = sorted(REMOVED_FLAGS.intersection(p.rstrip("0123456789") for p in parts))
        if removed:
            raise ValueError(
                f"{spec!r}: ':{removed[0]}' is a removed variant (its measurements are in "
                "compute/gpu/FLASH_NOTES.md, 'Removed variants')"
            )
        flags = set()
        while parts and parts[-1] in ("pingpong", *_WS_FLAGS):
            flags.add(parts.pop())
        if (
            parts[0] not in ("mma", "wgmma", "ws")
            or len(parts) != 5
            or not all(p.isdigit() for p in parts[1:])
            or (bool(flags & set(_WS_FLAGS)) and parts[0] != "ws")
        ):
            optional = "".join(f"[:{flag}]" for flag, _, _ in WS_TRAITS)
            raise ValueError(
                f"{spec!r} is not a kernel spec like 'wgmma:128:2:64:2[:pingpong]' "
                f"or 'ws:128:2:128:2[:pingpong][:serial]{optional}'"
            )
        if "earlyq" in flags and ("persist" not in flags or "serial" in flags):
            raise ValueError(
                f"{spec!r}: ':earlyq' releases Q early on the persistent grid, so it needs "
                "':persist' and the overlap, without ':serial'"
            )
        if "band" in flags and ({"lpt", "endq"} & flags):
            raise ValueError(
                f"{spec!r}: ':band' keeps the default work order, so it takes neither ':lpt' "
                "nor ':endq' (causal's orderings)"
            )
        d, warps, block_n, fifth = (int(p) for p in parts[1:])
        if parts[0] == "ws":
            traits = {field: flag in flags for flag, field, _ in WS_TRAITS}
            return cls(
                "ws", d, warps, block_n, 1, "pingpong" in flags, fifth, "serial" not in flags,
                **traits,
            )  # fmt: skip
        return cls(parts[0], d, warps, block_n, fifth, "pingpong" in flags)
