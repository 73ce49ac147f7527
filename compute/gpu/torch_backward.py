"""The op's backward for one signature with almost no host work per call (the eager path).

``BackwardCall.build(...)`` runs once per signature of the eager autograd Function's
backward (the forward's checked call, the upstream gradient's strides, the deterministic
flag): it decides the work (the kernel's own GQA group loop, or ``torch_op``'s spread:
each K/V head a batch of `group` query heads with K and V broadcast by the tensor maps),
works out the gradients' shapes and strides (those ``torch_op._backward`` gives, so eager,
the library op and its fakes agree), gets the ws backward's cached launch plan
(``torch_launch.backward_plan``) for the tensors the kernels see, and, for the spread,
the byte offsets of each batch's views. ``run(...)`` then allocates the gradients (one
``empty_strided`` each; the spread's dK and dV are halves of one tensor and its
per-query-head gradients one more), queues the plan's launches on addresses computed from
the saved tensors' (no view objects, no checks beyond the upstream gradient's strides and
alignment), and for the spread sums the per-query-head gradients over the group in one
reduction. What it does not take (no plan, K/V maps the driver refuses, split or windowed
masks the forward handled otherwise) returns None from build and runs torch_op's general
path, which gives the same values.
"""

from __future__ import annotations

from typing import Any


class BackwardCall:
    """One signature's backward: allocation specs, the launch plan, per-batch offsets."""

    __slots__ = ("device", "do_stride", "dq", "dt", "grads", "offsets", "per", "plan", "spread")

    @classmethod
    def build(
        cls, torch: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool,
        scale: float, deterministic: bool, band: tuple[int, int] | None,
    ) -> BackwardCall | None:  # fmt: skip
        """The call for tensors as the forward's fast path saved them (every key seen, no
        split, every tensor read in place), or None where the general path must run."""
        from . import torch_launch
        from .torch_op import _group_outer, _like_strides, _spread_group

        b, h, n_q, d = q.shape
        hk, n_k = k.shape[1], k.shape[2]
        call = cls()
        call.dt, call.device, call.do_stride = q.dtype, q.device, do.stride()
        call.dq = (q.shape, _like_strides(torch, q.shape, q.stride()))
        sk, sv = (_like_strides(torch, t.shape, t.stride()) for t in (k, v))
        call.spread = _spread_group(q, k, causal)
        if call.spread and not (torch_launch.heads_broadcast_ok() and sk == sv):
            return None  # the general path repeats K and V, or sums dK and dV apart
        kw = {"band": band} if band is not None else {}
        dq = torch.empty_strided(*call.dq, dtype=q.dtype, device=q.device)
        if not call.spread:
            call.grads = ((k.shape, sk), (v.shape, sv))
            dk, dv = (torch.empty_strided(*g, dtype=q.dtype, device=q.device) for g in call.grads)
            call.plan = torch_launch.backward_plan(q, k, v, o, do, lse, (dq, dk, dv), causal,
                                                   scale, deterministic, **kw)  # fmt: skip
            return call if call.plan is not None else None
        group, size = h // hk, k.numel()
        call.grads = ((2, *k.shape), (size, *sk))
        call.per = _group_outer(torch, k, group)
        per = torch.empty_strided(*call.per, dtype=q.dtype, device=q.device)
        fold = [t[0].view(hk, group, *t.shape[2:]) for t in (q, o, do, dq)]
        kv = [t[0][:, None].expand(hk, group, n_k, d) for t in (k, v)]
        lse0 = lse[0].view(hk, group, n_q)
        call.plan = torch_launch.backward_plan(
            fold[0], *kv, fold[1], fold[2], lse0, (fold[3], per[0, 0], per[1, 0]), causal, scale,
            deterministic, **kw,
        )  # fmt: skip
        if call.plan is None:
            return None
        es = q.element_size()
        steps = [t.stride(0) * es for t in (q, k, v, o, do)] + [h * n_q * 4, dq.stride(0) * es]
        steps += [per.stride(1) * es] * 2  # dK's and dV's halves of the per-head gradients
        call.offsets = [[i * s for s in steps] for i in range(b)]
        for offs in call.offsets:
            offs[8] += per.stride(0) * es  # dV's half starts after dK's
        return call

    def run(self, torch: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple:
        """(dQ, dK, dV) of these saved tensors and upstream gradient (build's signature)."""
        dt, dev = self.dt, self.device
        dq = torch.empty_strided(*self.dq, dtype=dt, device=dev)
        ins = [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(),
               lse.data_ptr(), dq.data_ptr()]  # fmt: skip
        if not self.spread:
            dk, dv = (torch.empty_strided(*g, dtype=dt, device=dev) for g in self.grads)
            self.plan.run(torch, [*ins, dk.data_ptr(), dv.data_ptr()])
            return dq, dk, dv
        pair = torch.empty_strided(*self.grads, dtype=dt, device=dev)
        per = torch.empty_strided(*self.per, dtype=dt, device=dev)
        base = [*ins, per.data_ptr(), per.data_ptr()]
        for offs in self.offsets:
            self.plan.run(torch, [p + off for p, off in zip(base, offs, strict=True)])
        torch.sum(per, 3, out=pair)
        dk, dv = pair.unbind(0)
        return dq, dk, dv
