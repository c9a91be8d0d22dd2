//! The interpreter: the reference engine. Every load and store is checked
//! against the regions a program may touch, since a verdict of the kernel's
//! verifier is about the kernel's memory layout, not ours.

use crate::helpers;
use crate::insn::*;
use crate::vm::{Fault, Packet, Vm};

pub const STACK_SIZE: usize = 512;
pub const MAX_FRAMES: usize = 8;
/// Callbacks (bpf_loop) run in frames of their own, below the caller's.
pub const STACK_TOTAL: usize = STACK_SIZE * MAX_FRAMES * 2;
pub const MAX_TAIL_CALLS: u32 = 33;

pub struct Exec<'a> {
    pub vm: &'a mut Vm,
    pub pkt: &'a mut Packet,
    pub ctx_addr: u64,
    pub tail_calls: u32,
    /// Instructions executed, for the interpreter's cost per instruction.
    pub steps: u64,
    depth: usize,
    /// The program whose helper call is running (for bpf_loop callbacks).
    pub current: Option<usize>,
    /// A fault raised while compiled code ran, for the JIT's caller.
    pub jit_fault: Option<Fault>,
}

struct Frame {
    ret_pc: usize,
    saved: [u64; 4],
    prog: usize,
}

/// Outcome of a helper call that changes control flow.
pub enum Flow {
    Value(u64),
    TailCall(usize),
}

impl<'a> Exec<'a> {
    pub fn new(vm: &'a mut Vm, pkt: &'a mut Packet) -> Exec<'a> {
        Exec { vm, pkt, ctx_addr: 0, tail_calls: 0, steps: 0, depth: 0, current: None, jit_fault: None }
    }

    /// Runs program `prog` on the packet and returns its XDP action.
    pub fn run(&mut self, prog: usize) -> Result<u64, Fault> {
        let r1 = self.prepare();
        self.call(prog, 0, [r1, 0, 0, 0, 0])
    }

    /// Resets the per-run state; returns the context's address (R1).
    pub fn prepare(&mut self) -> u64 {
        self.ctx_addr = &self.pkt.ctx as *const _ as u64;
        self.tail_calls = 0;
        self.depth = 0;
        self.ctx_addr
    }

    fn stack_range(&self) -> (u64, u64) {
        let s = self.vm.stack.as_ptr() as u64;
        (s, s + STACK_TOTAL as u64)
    }

    /// Checks that [addr, addr+len) is memory the program may touch.
    #[inline]
    pub fn check(&self, pc: usize, addr: u64, len: u64, write: bool) -> Result<(), Fault> {
        let end = addr.checked_add(len).ok_or(Fault::Memory { pc, addr, len, write })?;
        let (s0, s1) = self.stack_range();
        if addr >= s0 && end <= s1 {
            return Ok(());
        }
        let base = self.pkt.base();
        if addr >= base + self.pkt.meta as u64 && end <= base + self.pkt.data_end as u64 {
            return Ok(());
        }
        for &(r0, r1, w) in &self.vm.regions {
            if addr >= r0 && end <= r1 && (w || !write) {
                return Ok(());
            }
        }
        for m in self.vm.maps.iter() {
            if let crate::maps::Store::Ringbuf(r) = &m.store {
                if r.lock().unwrap().pending_region(addr, len) {
                    return Ok(());
                }
            }
        }
        Err(Fault::Memory { pc, addr, len, write })
    }

    fn load(&self, pc: usize, addr: u64, size: usize) -> Result<u64, Fault> {
        if size == 4 && addr >= self.ctx_addr && addr < self.ctx_addr + 24 {
            return Ok(self.ctx_field(addr - self.ctx_addr));
        }
        self.check(pc, addr, size as u64, false)?;
        unsafe {
            Ok(match size {
                1 => *(addr as *const u8) as u64,
                2 => (addr as *const u16).read_unaligned() as u64,
                4 => (addr as *const u32).read_unaligned() as u64,
                _ => (addr as *const u64).read_unaligned(),
            })
        }
    }

    fn store(&self, pc: usize, addr: u64, size: usize, v: u64) -> Result<(), Fault> {
        self.check(pc, addr, size as u64, true)?;
        unsafe {
            match size {
                1 => *(addr as *mut u8) = v as u8,
                2 => (addr as *mut u16).write_unaligned(v as u16),
                4 => (addr as *mut u32).write_unaligned(v as u32),
                _ => (addr as *mut u64).write_unaligned(v),
            }
        }
        Ok(())
    }

    /// xdp_md fields: data, data_end and data_meta read as full pointers.
    pub fn ctx_field(&self, off: u64) -> u64 {
        let base = self.pkt.base();
        match off {
            0 => base + self.pkt.data as u64,
            4 => base + self.pkt.data_end as u64,
            8 => base + self.pkt.meta as u64,
            12 => self.pkt.ctx.ingress_ifindex as u64,
            16 => self.pkt.ctx.rx_queue_index as u64,
            20 => self.pkt.ctx.egress_ifindex as u64,
            _ => 0,
        }
    }

    /// Runs a function (a program's entry, or a callback) from `pc` with
    /// R1–R5 set, in a new stack frame.
    pub fn call(&mut self, mut prog: usize, mut pc: usize, args: [u64; 5]) -> Result<u64, Fault> {
        if self.depth >= MAX_FRAMES * 2 {
            return Err(Fault::Limit("call depth above the kernel's".into()));
        }
        let mut reg = [0u64; 11];
        reg[1..6].copy_from_slice(&args);
        let frame0 = self.depth;
        self.depth += 1;
        reg[10] = self.stack_range().0 + (self.depth * STACK_SIZE) as u64;
        let mut frames: Vec<Frame> = Vec::new();
        // The program's instructions, fetched without going through the Vm
        // each time; programs are never changed while one runs.
        let (mut insns, mut imm64) = self.code(prog);
        let result = loop {
            if pc >= insns.len() {
                break Err(Fault::Bad(format!("program {}: ran off the end at instruction {pc}", self.vm.programs[prog].name)));
            }
            let ins = unsafe { *insns.get_unchecked(pc) };
            self.steps += 1;
            let dst = ins.dst();
            let src = (ins.regs >> 4) as usize;
            let imm = ins.imm as i64 as u64;
            match ins.class() {
                CLASS_ALU64 | CLASS_ALU => {
                    let is64 = ins.class() == CLASS_ALU64;
                    let op = ins.code & 0xf0;
                    let x = if ins.code & 0x08 != 0 { reg[src] } else { imm };
                    let d = reg[dst];
                    let v = if op == 0xd0 {
                        endian(ins, d, is64)
                    } else if is64 {
                        alu64(op, ins.off, d, x)
                    } else {
                        alu32(op, ins.off, d as u32, x as u32) as u64
                    };
                    reg[dst] = v;
                    pc += 1;
                }
                CLASS_LD => {
                    if !ins.is_ld_imm64() {
                        break Err(Fault::Bad(format!("instruction {pc}: legacy packet loads are not supported")));
                    }
                    reg[dst] = imm64[pc];
                    pc += 2;
                }
                CLASS_LDX => {
                    let addr = reg[src].wrapping_add(ins.off as i64 as u64);
                    let size = ins.size();
                    let v = self.load(pc, addr, size)?;
                    reg[dst] = if ins.code & 0xe0 == MODE_MEMSX {
                        match size {
                            1 => v as u8 as i8 as i64 as u64,
                            2 => v as u16 as i16 as i64 as u64,
                            _ => v as u32 as i32 as i64 as u64,
                        }
                    } else {
                        v
                    };
                    pc += 1;
                }
                CLASS_ST => {
                    let addr = reg[dst].wrapping_add(ins.off as i64 as u64);
                    self.store(pc, addr, ins.size(), imm)?;
                    pc += 1;
                }
                CLASS_STX => {
                    let addr = reg[dst].wrapping_add(ins.off as i64 as u64);
                    let size = ins.size();
                    if ins.code & 0xe0 == MODE_ATOMIC {
                        self.atomic(pc, ins, addr, size, &mut reg, src)?;
                    } else {
                        self.store(pc, addr, size, reg[src])?;
                    }
                    pc += 1;
                }
                CLASS_JMP | CLASS_JMP32 => {
                    let op = ins.code & 0xf0;
                    match op {
                        0x00 => {
                            // ja; in JMP32 it is gotol with a 32-bit offset.
                            let off = if ins.class() == CLASS_JMP32 { ins.imm as i64 } else { ins.off as i64 };
                            pc = (pc as i64 + off + 1) as usize;
                        }
                        0x80 => {
                            if ins.src() == PSEUDO_CALL {
                                if frames.len() + self.depth >= MAX_FRAMES * 2 {
                                    break Err(Fault::Limit("bpf-to-bpf call depth above the kernel's".into()));
                                }
                                frames.push(Frame { ret_pc: pc + 1, saved: [reg[6], reg[7], reg[8], reg[9]], prog });
                                self.depth += 1;
                                reg[10] = self.stack_range().0 + (self.depth * STACK_SIZE) as u64;
                                pc = (pc as i64 + ins.imm as i64 + 1) as usize;
                            } else if let Some(v) = self.array_lookup(pc, ins.imm, reg[1], reg[2])? {
                                // An array lookup needs no helper call, as in the kernel.
                                reg[0] = v;
                                pc += 1;
                            } else {
                                self.current = Some(prog);
                                match helpers::call(self, pc, ins.imm, [reg[1], reg[2], reg[3], reg[4], reg[5]])? {
                                    Flow::Value(v) => {
                                        reg[0] = v;
                                        pc += 1;
                                    }
                                    Flow::TailCall(next) => {
                                        // The callee replaces the program; R1 still holds the context.
                                        prog = next;
                                        (insns, imm64) = self.code(prog);
                                        pc = 0;
                                    }
                                }
                            }
                        }
                        0x90 => match frames.pop() {
                            Some(f) => {
                                reg[6..10].copy_from_slice(&f.saved);
                                pc = f.ret_pc;
                                if prog != f.prog {
                                    prog = f.prog;
                                    (insns, imm64) = self.code(prog);
                                }
                                self.depth -= 1;
                                reg[10] = self.stack_range().0 + (self.depth * STACK_SIZE) as u64;
                            }
                            None => break Ok(reg[0]),
                        },
                        _ => {
                            let x = if ins.code & 0x08 != 0 { reg[src] } else { imm };
                            let taken = if ins.class() == CLASS_JMP32 {
                                cond32(op, reg[dst] as u32, x as u32)
                            } else {
                                cond64(op, reg[dst], x)
                            };
                            pc += 1;
                            if taken {
                                pc = (pc as i64 + ins.off as i64) as usize;
                            }
                        }
                    }
                }
                _ => break Err(Fault::Bad(format!("instruction {pc}: unknown opcode {:#04x}", ins.code))),
            }
        };
        self.depth = frame0;
        result
    }

    /// bpf_map_lookup_elem on an array, computed in place; None for any
    /// other call.
    #[inline]
    fn array_lookup(&self, pc: usize, id: i32, map: u64, key: u64) -> Result<Option<u64>, Fault> {
        if id != 1 {
            return Ok(None);
        }
        let Some(m) = crate::maps::handle_index(map).and_then(|i| self.vm.maps.get(i)) else { return Ok(None) };
        let Some((base, elem, slots, per_cpu)) = m.array_layout() else { return Ok(None) };
        let idx = self.load(pc, key, 4)? as usize;
        let cpu = if m.percpu() { self.vm.cpu } else { 0 };
        Ok(Some(if idx < slots { base + (cpu * per_cpu + idx * elem) as u64 } else { 0 }))
    }

    /// A program's code as slices that outlive borrows of the Vm: the
    /// programs vector is never modified after the Vm is built.
    fn code(&self, prog: usize) -> (&'static [Insn], &'static [u64]) {
        let p = &self.vm.programs[prog];
        unsafe {
            (
                std::slice::from_raw_parts(p.insns.as_ptr(), p.insns.len()),
                std::slice::from_raw_parts(p.imm64.as_ptr(), p.imm64.len()),
            )
        }
    }

    fn atomic(&self, pc: usize, ins: Insn, addr: u64, size: usize, reg: &mut [u64; 11], src: usize) -> Result<(), Fault> {
        let old = self.load(pc, addr, size)?;
        self.check(pc, addr, size as u64, true)?;
        let mask = if size == 8 { u64::MAX } else { 0xffff_ffff };
        let x = reg[src] & mask;
        let op = ins.imm as u32;
        let new = match op & !1 {
            0x00 => old.wrapping_add(x),
            0x40 => old | x,
            0x50 => old & x,
            0xa0 => old ^ x,
            0xe0 => x, // xchg
            0xf0 => {
                // cmpxchg: compare with R0, old value to R0.
                let r0 = reg[0] & mask;
                let new = if old == r0 { x } else { old };
                self.store(pc, addr, size, new)?;
                reg[0] = old;
                return Ok(());
            }
            _ => return Err(Fault::Bad(format!("instruction {pc}: unknown atomic operation {op:#x}"))),
        } & mask;
        self.store(pc, addr, size, new)?;
        if op & 1 != 0 {
            reg[src] = old;
        }
        Ok(())
    }
}

fn alu64(op: u8, off: i16, d: u64, x: u64) -> u64 {
    match op {
        0x00 => d.wrapping_add(x),
        0x10 => d.wrapping_sub(x),
        0x20 => d.wrapping_mul(x),
        0x30 => {
            if x == 0 {
                0
            } else if off == 1 {
                (d as i64).wrapping_div(x as i64) as u64
            } else {
                d / x
            }
        }
        0x40 => d | x,
        0x50 => d & x,
        0x60 => d.wrapping_shl((x & 63) as u32),
        0x70 => d.wrapping_shr((x & 63) as u32),
        0x80 => (d as i64).wrapping_neg() as u64,
        0x90 => {
            if x == 0 {
                d
            } else if off == 1 {
                (d as i64).wrapping_rem(x as i64) as u64
            } else {
                d % x
            }
        }
        0xa0 => d ^ x,
        0xb0 => match off {
            8 => x as u8 as i8 as i64 as u64,
            16 => x as u16 as i16 as i64 as u64,
            32 => x as u32 as i32 as i64 as u64,
            _ => x,
        },
        0xc0 => ((d as i64) >> (x & 63)) as u64,
        _ => d,
    }
}

fn alu32(op: u8, off: i16, d: u32, x: u32) -> u32 {
    match op {
        0x00 => d.wrapping_add(x),
        0x10 => d.wrapping_sub(x),
        0x20 => d.wrapping_mul(x),
        0x30 => {
            if x == 0 {
                0
            } else if off == 1 {
                (d as i32).wrapping_div(x as i32) as u32
            } else {
                d / x
            }
        }
        0x40 => d | x,
        0x50 => d & x,
        0x60 => d.wrapping_shl(x & 31),
        0x70 => d.wrapping_shr(x & 31),
        0x80 => (d as i32).wrapping_neg() as u32,
        0x90 => {
            if x == 0 {
                d
            } else if off == 1 {
                (d as i32).wrapping_rem(x as i32) as u32
            } else {
                d % x
            }
        }
        0xa0 => d ^ x,
        0xb0 => match off {
            8 => x as u8 as i8 as i32 as u32,
            16 => x as u16 as i16 as i32 as u32,
            _ => x,
        },
        0xc0 => ((d as i32) >> (x & 31)) as u32,
        _ => d,
    }
}

/// Byte-order conversions (the host is little-endian); in ALU64, bswap.
fn endian(ins: Insn, d: u64, is64: bool) -> u64 {
    let to_be = ins.code & 0x08 != 0;
    let swap = is64 || to_be;
    match ins.imm {
        16 => {
            let v = d as u16;
            (if swap { v.swap_bytes() } else { v }) as u64
        }
        32 => {
            let v = d as u32;
            (if swap { v.swap_bytes() } else { v }) as u64
        }
        _ => {
            if swap {
                d.swap_bytes()
            } else {
                d
            }
        }
    }
}

fn cond64(op: u8, d: u64, x: u64) -> bool {
    match op {
        0x10 => d == x,
        0x20 => d > x,
        0x30 => d >= x,
        0x40 => d & x != 0,
        0x50 => d != x,
        0x60 => (d as i64) > (x as i64),
        0x70 => (d as i64) >= (x as i64),
        0xa0 => d < x,
        0xb0 => d <= x,
        0xc0 => (d as i64) < (x as i64),
        0xd0 => (d as i64) <= (x as i64),
        _ => false,
    }
}

fn cond32(op: u8, d: u32, x: u32) -> bool {
    match op {
        0x10 => d == x,
        0x20 => d > x,
        0x30 => d >= x,
        0x40 => d & x != 0,
        0x50 => d != x,
        0x60 => (d as i32) > (x as i32),
        0x70 => (d as i32) >= (x as i32),
        0xa0 => d < x,
        0xb0 => d <= x,
        0xc0 => (d as i32) < (x as i32),
        0xd0 => (d as i32) <= (x as i32),
        _ => false,
    }
}
