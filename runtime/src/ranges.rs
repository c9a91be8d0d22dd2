//! Packet ranges the program proved itself. An XDP program may read the
//! packet only after comparing a pointer into it with `data_end`; the
//! kernel's verifier accepts the access because of that comparison. This
//! pass follows the same reasoning, forward over the control-flow graph, so
//! that the JIT can leave out its own bounds check where the program's
//! comparison already bounds the access.
//!
//! A packet pointer is tracked as (id, off, low): the pointer is base(id) +
//! off, and `low` says base(id) >= data. Pointers derived by adding
//! constants share an id; adding an unknown value, or two paths meeting
//! with different ids or offsets, makes a new id. A comparison of
//! base(id) + k with data_end proves base(id) + k <= data_end on one of its
//! edges: range(id) >= k. An access through (id, off) at offset o of size s
//! is then inside the packet when `low`, off + o >= 0 and
//! off + o + s <= range(id).
//!
//! Everything is forgotten at a call that may move the packet (any call but
//! the helpers known not to), and a pointer that goes through the stack
//! comes back unknown: the analysis is conservative, never clever.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::insn::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Val {
    Unknown,
    /// The context (R1 at the program's entry).
    Ctx,
    /// A scalar known to be at least 0 as a signed 64-bit value.
    NonNeg,
    Const(i64),
    Pkt { id: u32, off: i64, low: bool },
    End,
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct State {
    regs: [Val; 11],
    /// range(id): bytes from base(id) proven to lie before data_end.
    ranges: BTreeMap<u32, i64>,
}

/// The id of ctx->data itself: base(DATA) = data.
const DATA: u32 = 0;

/// Helpers that leave the packet where it is (the kernel's verifier keeps
/// packet pointers across them too).
const KEEP_PACKET: &[i32] = &[1, 2, 3, 4, 5, 6, 7, 8, 23, 28, 51, 69, 125, 130, 131, 132, 133];

impl State {
    fn entry(ctx_regs: u16) -> State {
        let mut regs = [Val::Unknown; 11];
        for (r, v) in regs.iter_mut().enumerate() {
            if ctx_regs & (1 << r) != 0 {
                *v = Val::Ctx;
            }
        }
        State { regs, ranges: BTreeMap::new() }
    }

    fn range(&self, id: u32) -> i64 {
        self.ranges.get(&id).copied().unwrap_or(0)
    }

    fn prove(&mut self, v: Val) {
        if let Val::Pkt { id, off, .. } = v {
            let r = self.ranges.entry(id).or_insert(0);
            *r = (*r).max(off);
        }
    }

    fn forget_packet(&mut self) {
        for v in self.regs.iter_mut() {
            if matches!(v, Val::Pkt { .. } | Val::End) {
                *v = Val::Unknown;
            }
        }
        self.ranges.clear();
    }

    /// Where two paths meet: what both agree on. Pointers that differ get
    /// a new id; pointers whose ids pair up and whose offsets differ by the
    /// same amount on both paths keep their distance under one new id.
    /// Named after the meeting point and the first register, ids stay the
    /// same from one pass to the next.
    fn join(&self, o: &State, at: usize) -> State {
        let mut regs = [Val::Unknown; 11];
        let mut ranges = BTreeMap::new();
        // (id here, id there, offset here - offset there) -> (new id, shift
        // here, shift there), where new base = old base + shift.
        let mut pairs: HashMap<(u32, u32, i64), (u32, i64, i64)> = HashMap::new();
        for r in 0..11 {
            regs[r] = match (self.regs[r], o.regs[r]) {
                (Val::Pkt { id: i1, off: o1, low: l1 }, Val::Pkt { id: i2, off: o2, low: l2 }) => {
                    let (id, s1, _) = *pairs.entry((i1, i2, o1 - o2)).or_insert_with(|| {
                        let m = o1.min(o2);
                        let (s1, s2) = (o1 - m, o2 - m);
                        let id = if i1 == i2 && s1 == 0 && s2 == 0 { i1 } else { fresh(at, r) };
                        ranges.insert(id, (self.range(i1) - s1).min(o.range(i2) - s2));
                        (id, s1, s2)
                    });
                    Val::Pkt { id, off: o1 - s1, low: l1 && l2 }
                }
                (a, b) if a == b => a,
                (Val::Const(a), Val::Const(b)) if a >= 0 && b >= 0 => Val::NonNeg,
                (Val::Const(a), Val::NonNeg) | (Val::NonNeg, Val::Const(a)) if a >= 0 => Val::NonNeg,
                _ => Val::Unknown,
            };
        }
        ranges.retain(|_, v| *v > 0);
        State { regs, ranges }
    }
}

fn fresh(at: usize, reg: usize) -> u32 {
    1 + (at as u32) * 11 + reg as u32
}

fn new_id(at: usize, reg: usize) -> u32 {
    // Ids made by arithmetic at an instruction, distinct from those of
    // meeting points.
    0x8000_0000 | fresh(at, reg)
}

/// For each instruction of the function [start, end) of `insns`, whether
/// its packet access is proven inside the packet. `ctx_regs` are the
/// registers that hold the context at `start`.
pub fn packet_proven(insns: &[Insn], start: usize, end: usize, ctx_regs: u16) -> Vec<bool> {
    let mut proven = vec![false; insns.len()];
    let mut at: HashMap<usize, State> = HashMap::new();
    let mut work: VecDeque<usize> = VecDeque::new();
    at.insert(start, State::entry(ctx_regs));
    work.push_back(start);
    // Every instruction's state can only lose facts; a bound on the
    // passes keeps a pathological program from costing compile time.
    let mut budget = (end - start) * 64 + 1024;
    while let Some(pc) = work.pop_front() {
        if budget == 0 {
            // Out of patience: prove nothing at all.
            return vec![false; insns.len()];
        }
        budget -= 1;
        let mut s = at[&pc].clone();
        let ins = insns[pc];
        let mut succ: Vec<(usize, State)> = Vec::new();
        let next = pc + if ins.is_ld_imm64() { 2 } else { 1 };
        match ins.class() {
            CLASS_JMP | CLASS_JMP32 => {
                let op = ins.code & 0xf0;
                match op {
                    0x90 => {} // exit
                    0x80 => {
                        if ins.src() != 0 || !KEEP_PACKET.contains(&ins.imm) {
                            s.forget_packet();
                        }
                        for r in 0..=5 {
                            s.regs[r] = Val::Unknown;
                        }
                        succ.push((next, s));
                    }
                    0x00 => {
                        let off = if ins.class() == CLASS_JMP32 { ins.imm as i64 } else { ins.off as i64 };
                        succ.push(((pc as i64 + 1 + off) as usize, s));
                    }
                    _ => {
                        let target = (pc as i64 + 1 + ins.off as i64) as usize;
                        let (mut taken, mut fall) = (s.clone(), s);
                        if ins.class() == CLASS_JMP && ins.code & 0x08 != 0 {
                            let (a, b) = (taken.regs[ins.dst()], taken.regs[ins.src() as usize]);
                            match (op, a, b) {
                                // a > end, a >= end: the fall-through has a <= end.
                                (0x20 | 0x30, Val::Pkt { .. }, Val::End) => fall.prove(a),
                                // a < end, a <= end: taken.
                                (0xa0 | 0xb0, Val::Pkt { .. }, Val::End) => taken.prove(a),
                                // end > b, end >= b: taken.
                                (0x20 | 0x30, Val::End, Val::Pkt { .. }) => taken.prove(b),
                                // end < b, end <= b: the fall-through.
                                (0xa0 | 0xb0, Val::End, Val::Pkt { .. }) => fall.prove(b),
                                _ => {}
                            }
                        }
                        succ.push((target, taken));
                        succ.push((next, fall));
                    }
                }
            }
            CLASS_LDX => {
                let src = ins.src() as usize;
                if ins.code & 0xe0 == MODE_MEM {
                    if let Val::Pkt { id, off, low } = s.regs[src] {
                        let o = off + ins.off as i64;
                        if low && o >= 0 && o + ins.size() as i64 <= s.range(id) {
                            proven[pc] = true;
                        }
                    }
                }
                s.regs[ins.dst()] = match (s.regs[src], ins.size(), ins.off, ins.code & 0xe0 == MODE_MEM) {
                    (Val::Ctx, 4, 0, true) => Val::Pkt { id: DATA, off: 0, low: true },
                    (Val::Ctx, 4, 4, true) => Val::End,
                    (_, 1 | 2 | 4, _, true) => Val::NonNeg,
                    _ => Val::Unknown,
                };
                succ.push((next, s));
            }
            CLASS_ST | CLASS_STX => {
                if ins.code & 0xe0 == MODE_MEM {
                    if let Val::Pkt { id, off, low } = s.regs[ins.dst()] {
                        let o = off + ins.off as i64;
                        if low && o >= 0 && o + ins.size() as i64 <= s.range(id) {
                            proven[pc] = true;
                        }
                    }
                } else if ins.code & 0xe0 == MODE_ATOMIC {
                    // A fetching atomic writes a register (R0 for cmpxchg).
                    if ins.imm & 1 != 0 || ins.imm == 0xf1 {
                        s.regs[ins.src() as usize] = Val::Unknown;
                    }
                    if ins.imm == 0xf1 {
                        s.regs[0] = Val::Unknown;
                    }
                }
                succ.push((next, s));
            }
            CLASS_LD => {
                s.regs[ins.dst()] = if ins.is_ld_imm64() && ins.src() == 0 && pc + 1 < insns.len() {
                    Val::Const(((ins.imm as u32 as u64) | ((insns[pc + 1].imm as u32 as u64) << 32)) as i64)
                } else {
                    Val::Unknown
                };
                if !ins.is_ld_imm64() {
                    // Legacy packet loads clobber R0–R5.
                    for r in 0..=5 {
                        s.regs[r] = Val::Unknown;
                    }
                }
                succ.push((next, s));
            }
            CLASS_ALU64 => {
                let d = ins.dst();
                let x = if ins.code & 0x08 != 0 { s.regs[ins.src() as usize] } else { Val::Const(ins.imm as i64) };
                s.regs[d] = alu64(ins.code & 0xf0, s.regs[d], x, ins.off, pc, d);
                succ.push((next, s));
            }
            CLASS_ALU => {
                // 32-bit results are zero-extended: never negative. A byte
                // swap to 64 bits (BPF_END, imm 64) is the exception.
                s.regs[ins.dst()] = if ins.code & 0xf0 == 0xd0 && ins.imm == 64 { Val::Unknown } else { Val::NonNeg };
                succ.push((next, s));
            }
            _ => {
                for r in 0..11 {
                    s.regs[r] = Val::Unknown;
                }
                s.ranges.clear();
                succ.push((next, s));
            }
        }
        for (to, st) in succ {
            if to < start || to >= end {
                continue;
            }
            let merged = match at.get(&to) {
                Some(old) => {
                    let j = old.join(&st, to);
                    if &j == old {
                        continue;
                    }
                    j
                }
                None => st,
            };
            at.insert(to, merged);
            if !work.contains(&to) {
                work.push_back(to);
            }
        }
    }
    // An instruction reached by several paths was judged on the first
    // state it had; judge it again on the final one.
    for pc in start..end {
        if !proven[pc] {
            continue;
        }
        let ok = at.get(&pc).is_some_and(|s| {
            let ins = insns[pc];
            let reg = if ins.class() == CLASS_LDX { ins.src() as usize } else { ins.dst() };
            match s.regs[reg] {
                Val::Pkt { id, off, low } => {
                    let o = off + ins.off as i64;
                    low && o >= 0 && o + ins.size() as i64 <= s.range(id)
                }
                _ => false,
            }
        });
        proven[pc] = ok;
    }
    proven
}

fn alu64(op: u8, d: Val, x: Val, off: i16, pc: usize, reg: usize) -> Val {
    match (op, d, x) {
        // mov (a sign-extending mov, off != 0, yields a scalar).
        (0xb0, _, v) if off == 0 => v,
        (0xb0, _, _) => Val::Unknown,
        (0x00, Val::Pkt { id, off, low }, Val::Const(c)) => Val::Pkt { id, off: off + c, low },
        (0x00, Val::Const(c), Val::Pkt { id, off, low }) => Val::Pkt { id, off: off + c, low },
        (0x10, Val::Pkt { id, off, low }, Val::Const(c)) => Val::Pkt { id, off: off - c, low },
        // Adding a value known only to be non-negative: a new base, still
        // at or after data.
        (0x00, Val::Pkt { off, low, .. }, Val::NonNeg) | (0x00, Val::NonNeg, Val::Pkt { off, low, .. }) => Val::Pkt { id: new_id(pc, reg), off: 0, low: low && off >= 0 },
        (0x00, Val::Pkt { .. }, _) | (0x00, _, Val::Pkt { .. }) => Val::Pkt { id: new_id(pc, reg), off: 0, low: false },
        (0x00, Val::Const(a), Val::Const(b)) => Val::Const(a.wrapping_add(b)),
        // A counter that starts at or above 0 and grows by steps below 2^31
        // would need 2^32 steps to wrap: no program runs that long.
        (0x00, Val::NonNeg, Val::Const(c)) | (0x00, Val::Const(c), Val::NonNeg) if (0..1 << 31).contains(&c) => Val::NonNeg,
        // and with a non-negative constant, a logical shift right: non-negative.
        (0x50, _, Val::Const(c)) if c >= 0 => Val::NonNeg,
        (0x70, _, Val::Const(c)) if c > 0 => Val::NonNeg,
        _ => Val::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { code, regs: dst | (src << 4), off, imm }
    }

    const LDXW: u8 = CLASS_LDX | MODE_MEM; // size 4
    const LDXB: u8 = CLASS_LDX | MODE_MEM | 0x10;
    const MOV_X: u8 = CLASS_ALU64 | 0xb0 | 0x08;
    const ADD_K: u8 = CLASS_ALU64;
    const ADD_X: u8 = CLASS_ALU64 | 0x08;
    const JGT_X: u8 = CLASS_JMP | 0x20 | 0x08;
    const JA: u8 = CLASS_JMP;
    const EXIT: u8 = CLASS_JMP | 0x90;

    /// r2 = data; r3 = data_end; r4 = r2 + 14; if r4 > r3 goto out; loads.
    fn header(n: i16) -> Vec<Insn> {
        vec![i(LDXW, 2, 1, 0, 0), i(LDXW, 3, 1, 4, 0), i(MOV_X, 4, 2, 0, 0), i(ADD_K, 4, 0, 0, n as i32), i(JGT_X, 4, 3, 3, 0)]
    }

    #[test]
    fn a_checked_header_needs_no_check() {
        let mut p = header(14);
        p.extend([i(LDXB, 0, 2, 13, 0), i(LDXB, 0, 2, 14, 0), i(LDXB, 0, 4, -1, 0), i(EXIT, 0, 0, 0, 0)]);
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(v[5], "byte 13 of a 14-byte checked header");
        assert!(!v[6], "byte 14 lies beyond the check");
        assert!(v[7], "r4 - 1 is byte 13");
    }

    #[test]
    fn the_taken_edge_proves_nothing() {
        // if r4 > r3 goto L; ...; L: load through r2.
        let mut p = header(14);
        p[4].off = 1;
        p.extend([i(EXIT, 0, 0, 0, 0), i(LDXB, 0, 2, 0, 0), i(EXIT, 0, 0, 0, 0)]);
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(!v[6]);
    }

    #[test]
    fn paths_meet_with_the_smaller_range() {
        // Two checks, of 20 and of 14 bytes, meet; then byte 15 is read.
        let p = vec![
            i(LDXW, 2, 1, 0, 0),
            i(LDXW, 3, 1, 4, 0),
            i(MOV_X, 4, 2, 0, 0),
            i(ADD_K, 4, 0, 0, 20),
            i(JGT_X, 4, 3, 1, 0), // -> 6 (check 20 failed: try 14)
            i(JA, 0, 0, 3, 0),    // -> 9
            i(ADD_K, 4, 0, 0, -6),
            i(JGT_X, 4, 3, 3, 0), // -> 11
            i(JA, 0, 0, 0, 0),    // -> 9
            i(LDXB, 0, 2, 15, 0),
            i(LDXB, 0, 2, 13, 0),
            i(EXIT, 0, 0, 0, 0),
        ];
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(!v[9], "byte 15 is proven on one path only");
        assert!(v[10], "byte 13 on both");
    }

    #[test]
    fn a_loop_proves_each_byte_it_checks() {
        // r5 = r2; loop: r4 = r5 + 1; if r4 > r3 goto out; r0 = *(u8*)r5; r5 = r4; goto loop.
        let p = vec![
            i(LDXW, 2, 1, 0, 0),
            i(LDXW, 3, 1, 4, 0),
            i(MOV_X, 5, 2, 0, 0),
            i(MOV_X, 4, 5, 0, 0),
            i(ADD_K, 4, 0, 0, 1),
            i(JGT_X, 4, 3, 3, 0), // -> 9
            i(LDXB, 0, 5, 0, 0),
            i(MOV_X, 5, 4, 0, 0),
            i(JA, 0, 0, -6, 0), // -> 3
            i(EXIT, 0, 0, 0, 0),
        ];
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(v[6], "the byte the loop checked");
    }

    #[test]
    fn an_unknown_offset_loses_the_lower_bound() {
        // r6 = unknown (a 64-bit load); r2 += r6; check r2 + 1; load r2[0].
        let p = vec![
            i(LDXW, 2, 1, 0, 0),
            i(LDXW, 3, 1, 4, 0),
            i(CLASS_LDX | MODE_MEM | 0x18, 6, 10, -8, 0),
            i(ADD_X, 2, 6, 0, 0),
            i(MOV_X, 4, 2, 0, 0),
            i(ADD_K, 4, 0, 0, 1),
            i(JGT_X, 4, 3, 1, 0),
            i(LDXB, 0, 2, 0, 0),
            i(EXIT, 0, 0, 0, 0),
        ];
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(!v[7], "a negative offset could reach before data");
    }

    #[test]
    fn a_byte_swap_to_64_bits_may_be_negative() {
        // r6 = *(u32 *)(r10 - 8); r6 = be64 r6; r2 += r6; check r2 + 1; load r2[0].
        let p = vec![
            i(LDXW, 2, 1, 0, 0),
            i(LDXW, 3, 1, 4, 0),
            i(LDXW, 6, 10, -8, 0),
            i(CLASS_ALU | 0xd0 | 0x08, 6, 0, 0, 64),
            i(ADD_X, 2, 6, 0, 0),
            i(MOV_X, 4, 2, 0, 0),
            i(ADD_K, 4, 0, 0, 1),
            i(JGT_X, 4, 3, 1, 0),
            i(LDXB, 0, 2, 0, 0),
            i(EXIT, 0, 0, 0, 0),
        ];
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(!v[8], "a 64-bit byte swap can move the pointer before data");
        // The same with a 32-bit swap is proven: its result is below 2^32.
        let mut q = p.clone();
        q[3].imm = 32;
        assert!(packet_proven(&q, 0, q.len(), 1 << 1)[8]);
    }

    #[test]
    fn a_call_that_moves_the_packet_forgets() {
        let mut p = header(14);
        p.extend([i(CLASS_JMP | 0x80, 0, 0, 0, 44), i(LDXB, 0, 2, 0, 0), i(EXIT, 0, 0, 0, 0)]);
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(!v[6], "after bpf_xdp_adjust_head");
        let mut p = header(14);
        p.extend([i(CLASS_JMP | 0x80, 0, 0, 0, 1), i(LDXB, 0, 7, 0, 0), i(EXIT, 0, 0, 0, 0)]);
        // R2 is clobbered by any call; R7 was never a packet pointer.
        let v = packet_proven(&p, 0, p.len(), 1 << 1);
        assert!(!v[6]);
    }
}
