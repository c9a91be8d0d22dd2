//! The runtime's state around one loaded object: its maps, its programs
//! with their 64-bit loads resolved, the packet being processed, and the
//! memory regions a program may touch.

use crate::elf::{BpfObject, MapDef};
use crate::helpers;
use crate::insn::{Insn, PSEUDO_FUNC, PSEUDO_MAP_FD, PSEUDO_MAP_VALUE};
use crate::maps::{handle, Map};

/// Layout of a packet buffer as BPF_PROG_TEST_RUN lays it out: a page, 256
/// bytes of headroom, the skb_shared_info's room at the end.
pub const FRAME_SIZE: usize = 4096;
pub const HEADROOM: usize = 256;
pub const TAILROOM: usize = 320;
pub const XDP_FRAME_STRUCT: usize = 40;
pub const MAX_PACKET: usize = FRAME_SIZE - HEADROOM - TAILROOM;

pub const XDP_ABORTED: u32 = 0;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

pub struct Program {
    pub name: String,
    pub section: String,
    pub insns: Vec<Insn>,
    /// The value each ld_imm64 loads, by instruction index.
    pub imm64: Vec<u64>,
    /// Why the runtime cannot run this program (an unsupported helper), if
    /// it cannot: the object's other programs still run.
    pub refused: Option<String>,
}

/// Where a redirect goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    Ifindex(u32),
    Map { map: String, key: u32 },
}

/// The xdp_md a program sees. The data fields are rewritten on access to
/// full pointers, as the kernel's verifier rewrites them.
#[repr(C)]
pub struct XdpMd {
    pub data: u32,
    pub data_end: u32,
    pub data_meta: u32,
    pub ingress_ifindex: u32,
    pub rx_queue_index: u32,
    pub egress_ifindex: u32,
}

pub struct Packet {
    pub buf: Box<[u8; FRAME_SIZE]>,
    /// Offsets into buf.
    pub meta: usize,
    pub data: usize,
    pub data_end: usize,
    pub ctx: XdpMd,
    pub redirect: Option<Redirect>,
}

impl Packet {
    pub fn new(frame: &[u8], ingress_ifindex: u32, rx_queue: u32) -> Result<Packet, String> {
        if frame.len() > MAX_PACKET {
            return Err(format!("packet of {} bytes: at most {MAX_PACKET} fit a frame", frame.len()));
        }
        let mut buf = Box::new([0u8; FRAME_SIZE]);
        buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        Ok(Packet {
            buf,
            meta: HEADROOM,
            data: HEADROOM,
            data_end: HEADROOM + frame.len(),
            ctx: XdpMd { data: 0, data_end: 0, data_meta: 0, ingress_ifindex, rx_queue_index: rx_queue, egress_ifindex: 0 },
            redirect: None,
        })
    }

    /// Reuses the buffer for the next frame.
    pub fn load(&mut self, frame: &[u8]) -> Result<(), String> {
        if frame.len() > MAX_PACKET {
            return Err(format!("packet of {} bytes: at most {MAX_PACKET} fit a frame", frame.len()));
        }
        self.buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        self.meta = HEADROOM;
        self.data = HEADROOM;
        self.data_end = HEADROOM + frame.len();
        self.redirect = None;
        Ok(())
    }

    pub fn base(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// What BPF_PROG_TEST_RUN returns: metadata and packet.
    pub fn output(&self) -> Vec<u8> {
        self.buf[self.meta..self.data_end].to_vec()
    }
}

pub struct Vm {
    /// Shared by the Vms of every thread that runs the object.
    pub maps: std::sync::Arc<Vec<Map>>,
    pub programs: Vec<Program>,
    pub cpu: usize,
    pub rng: u64,
    /// Memory of map values and global data: (start, end, writable).
    pub regions: Vec<(u64, u64, bool)>,
    /// The programs' stack frames, allocated once.
    pub stack: Vec<u8>,
    /// The writable maps' values, in one range.
    pub pool: std::sync::Arc<crate::maps::Pool>,
}

impl Clone for Program {
    fn clone(&self) -> Program {
        Program { name: self.name.clone(), section: self.section.clone(), insns: self.insns.clone(), imm64: self.imm64.clone(), refused: self.refused.clone() }
    }
}

/// Why a run stopped without a verdict.
#[derive(Debug)]
pub enum Fault {
    Memory { pc: usize, addr: u64, len: u64, write: bool },
    Helper(String),
    Limit(String),
    Bad(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Fault::Memory { pc, addr, len, write } => write!(
                f,
                "instruction {pc}: {} of {len} bytes at {addr:#x} outside the packet, stack, context and map values",
                if *write { "write" } else { "read" }
            ),
            Fault::Helper(s) | Fault::Limit(s) | Fault::Bad(s) => f.write_str(s),
        }
    }
}

impl Vm {
    /// Creates the object's maps and resolves every program's 64-bit loads.
    /// Helpers the runtime does not have are refused here, by name.
    pub fn new(obj: &BpfObject, ncpus: usize) -> Result<Vm, String> {
        let ncpus = ncpus.max(1);
        let bytes = obj.maps.iter().filter(|d| !d.readonly).map(|d| crate::maps::arena_bytes(d, ncpus)).sum();
        let mut pool = crate::maps::Pool::new(bytes);
        let mut maps = Vec::new();
        for d in &obj.maps {
            maps.push(Map::new_in(d, ncpus, Some(&mut pool))?);
        }
        let mut vm = Vm {
            maps: std::sync::Arc::new(maps),
            programs: Vec::new(),
            cpu: 0,
            rng: 0x853c_49e6_748f_ea9b,
            regions: Vec::new(),
            stack: vec![0; crate::interp::STACK_TOTAL],
            pool: std::sync::Arc::new(pool),
        };
        for p in &obj.programs {
            let prog = match vm.resolve(&p.name, &p.section, &p.insns, &obj.maps) {
                Ok(prog) => prog,
                Err(e) => Program { name: p.name.clone(), section: p.section.clone(), insns: Vec::new(), imm64: Vec::new(), refused: Some(e) },
            };
            vm.programs.push(prog);
        }
        vm.refresh_regions();
        Ok(vm)
    }

    /// A Vm for another thread, as CPU `cpu`: the same maps and programs,
    /// its own stack and random state.
    pub fn for_thread(&self, cpu: usize) -> Vm {
        Vm {
            maps: self.maps.clone(),
            programs: self.programs.clone(),
            cpu,
            rng: self.rng ^ (cpu as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            regions: self.regions.clone(),
            stack: vec![0; crate::interp::STACK_TOTAL],
            pool: self.pool.clone(),
        }
    }

    pub fn refresh_regions(&mut self) {
        self.regions = self
            .maps
            .iter()
            .filter_map(|m| m.region().map(|(s, e)| (s, e, !m.def.readonly)))
            .collect();
    }

    fn resolve(&self, name: &str, section: &str, insns: &[Insn], defs: &[MapDef]) -> Result<Program, String> {
        let mut imm64 = vec![0u64; insns.len()];
        let mut i = 0;
        while i < insns.len() {
            let ins = insns[i];
            if ins.is_ld_imm64() {
                let next = insns.get(i + 1).ok_or_else(|| format!("{name}: ld_imm64 at the end"))?;
                imm64[i] = match ins.src() {
                    0 => (ins.imm as u32 as u64) | ((next.imm as u32 as u64) << 32),
                    PSEUDO_MAP_FD => {
                        defs.get(ins.imm as usize).ok_or_else(|| format!("{name}: map index {} out of range", ins.imm))?;
                        handle(ins.imm as usize)
                    }
                    PSEUDO_MAP_VALUE => {
                        let m = self.maps.get(ins.imm as usize).ok_or_else(|| format!("{name}: map index {} out of range", ins.imm))?;
                        let (start, _) = m.region().ok_or_else(|| format!("{name}: map {} has no values to point into", m.def.name))?;
                        start + next.imm as u32 as u64
                    }
                    PSEUDO_FUNC => (i as i64 + ins.imm as i64 + 1) as u64,
                    s => return Err(format!("{name}: instruction {i}: 64-bit load kind {s} is not supported")),
                };
                i += 2;
                continue;
            }
            if ins.is_call() && ins.src() == 0 && !helpers::supported(ins.imm) {
                return Err(format!(
                    "program {name}: helper {} ({}) is not supported by the runtime",
                    helpers::name(ins.imm),
                    ins.imm
                ));
            }
            if ins.is_call() && ins.src() == 2 {
                return Err(format!("program {name}: instruction {i}: kfunc calls are not supported by the runtime"));
            }
            i += 1;
        }
        Ok(Program { name: name.to_string(), section: section.to_string(), insns: insns.to_vec(), imm64, refused: None })
    }

    /// A program that the runtime can run, by name.
    pub fn program_index(&self, name: &str) -> Result<usize, String> {
        let i = self.programs.iter().position(|p| p.name == name).ok_or_else(|| format!("no program {name}"))?;
        match &self.programs[i].refused {
            Some(why) => Err(why.clone()),
            None => Ok(i),
        }
    }

    pub fn map_index(&self, name: &str) -> Option<usize> {
        self.maps.iter().position(|m| m.def.name == name)
    }

    pub fn next_random(&mut self) -> u32 {
        // xorshift64*: the kernel's generator is not reproducible either.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}
