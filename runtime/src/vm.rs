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
    /// Through a map entry (bpf_redirect_map): the map's index, the key,
    /// and the entry's first four bytes (the device's ifindex in a
    /// devmap), read at the call, as the kernel reads its target there.
    Map { map: usize, key: u32, target: u32 },
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

/// Frags of a multi-buffer frame are pages, as BPF_PROG_TEST_RUN makes them.
pub const FRAG_SIZE: usize = 4096;
/// MAX_SKB_FRAGS: a frame needing more is refused with ENOMEM.
pub const MAX_FRAGS: usize = 17;
pub const ETH_HLEN: usize = 14;
pub const EINVAL: i64 = 22;
pub const ENOMEM: i64 = 12;

/// One frame as a program sees it: a FRAME_SIZE buffer (the runtime's own,
/// or a UMEM chunk the frame arrived in) with offsets into it, and, for a
/// multi-buffer frame, the pages after the linear part.
pub struct Packet {
    buf: *mut u8,
    /// The runtime's own buffer, when the packet does not sit in a UMEM.
    own: Box<[u8; FRAME_SIZE]>,
    /// Offsets into the buffer.
    pub meta: usize,
    pub data: usize,
    pub data_end: usize,
    /// The paged part of a multi-buffer frame (empty for a linear one).
    pub frags: Vec<Vec<u8>>,
    pub ctx: XdpMd,
    pub redirect: Option<Redirect>,
}

unsafe impl Send for Packet {}

impl Packet {
    /// An empty packet in the runtime's own buffer.
    pub fn empty(ingress_ifindex: u32, rx_queue: u32) -> Packet {
        let mut own = Box::new([0u8; FRAME_SIZE]);
        Packet {
            buf: own.as_mut_ptr(),
            own,
            meta: HEADROOM,
            data: HEADROOM,
            data_end: HEADROOM,
            frags: Vec::new(),
            ctx: XdpMd { data: 0, data_end: 0, data_meta: 0, ingress_ifindex, rx_queue_index: rx_queue, egress_ifindex: 0 },
            redirect: None,
        }
    }

    /// A packet laid out as BPF_PROG_TEST_RUN lays it out: up to
    /// MAX_PACKET bytes in the linear part, the rest in pages. Err holds
    /// the kernel's errno for a frame it refuses (shorter than an Ethernet
    /// header: EINVAL; more pages than MAX_SKB_FRAGS: ENOMEM).
    pub fn for_test_run(frame: &[u8], ingress_ifindex: u32, rx_queue: u32) -> Result<Packet, (i64, String)> {
        if frame.len() < ETH_HLEN {
            return Err((EINVAL, format!("frame of {} bytes, shorter than an Ethernet header", frame.len())));
        }
        let linear = frame.len().min(MAX_PACKET);
        let rest = &frame[linear..];
        if rest.len().div_ceil(FRAG_SIZE) > MAX_FRAGS {
            return Err((ENOMEM, format!("frame of {} bytes: more than {MAX_FRAGS} pages after the linear part", frame.len())));
        }
        let mut p = Packet::empty(ingress_ifindex, rx_queue);
        p.own[HEADROOM..HEADROOM + linear].copy_from_slice(&frame[..linear]);
        p.data_end = HEADROOM + linear;
        p.frags = rest.chunks(FRAG_SIZE).map(|c| c.to_vec()).collect();
        Ok(p)
    }

    /// Puts the packet on a frame that sits elsewhere (a UMEM chunk of
    /// FRAME_SIZE bytes), without copying it: the program reads and
    /// writes the frame in place.
    ///
    /// # Safety
    /// `chunk` must point to FRAME_SIZE bytes that stay valid, and that
    /// nothing else touches, until the packet is put on another frame.
    pub unsafe fn attach(&mut self, chunk: *mut u8, off: usize, len: usize) -> Result<(), String> {
        if off < XDP_FRAME_STRUCT || off + len > FRAME_SIZE - TAILROOM {
            return Err(format!("frame of {len} bytes at offset {off} does not fit a {FRAME_SIZE}-byte chunk's data area"));
        }
        self.buf = chunk;
        self.meta = off;
        self.data = off;
        self.data_end = off + len;
        self.frags.clear();
        self.redirect = None;
        Ok(())
    }

    pub fn base(&self) -> u64 {
        self.buf as u64
    }

    /// The whole buffer the packet sits in.
    pub fn frame(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.buf, FRAME_SIZE) }
    }

    /// The frame's length, paged part included (bpf_xdp_get_buff_len).
    pub fn len(&self) -> usize {
        self.data_end - self.data + self.frags.iter().map(|f| f.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What BPF_PROG_TEST_RUN returns: metadata, packet, then its pages.
    pub fn output(&self) -> Vec<u8> {
        let mut out = unsafe { std::slice::from_raw_parts(self.buf.add(self.meta), self.data_end - self.meta) }.to_vec();
        for f in &self.frags {
            out.extend_from_slice(f);
        }
        out
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
    /// The helper semantics of the kernel the runtime behaves as.
    pub sem: crate::kernel::Semantics,
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
        // When the maps do not fit, the error names the largest.
        let mut pool = crate::maps::Pool::new(bytes).map_err(|e| match obj.maps.iter().max_by_key(|d| crate::maps::arena_bytes(d, ncpus)) {
            Some(d) => e.replacen("the maps", &format!("map {} ({} entries of {} bytes)", d.name, d.max_entries, d.value_size), 1),
            None => e,
        })?;
        let mut maps = Vec::new();
        for d in &obj.maps {
            maps.push(Map::new_in(d, ncpus, Some(&mut pool))?);
        }
        // `.maps` initialisers, as libbpf applies them: a program array
        // holds program indexes, a map of maps map indexes.
        for (m, d) in maps.iter().zip(&obj.maps) {
            for (slot, target) in &d.init {
                let v = if d.map_type == crate::elf::map_type::PROG_ARRAY {
                    obj.programs.iter().position(|p| &p.name == target).ok_or_else(|| format!("map {}: slot {slot}: no program {target}", d.name))?
                } else {
                    obj.maps.iter().position(|x| &x.name == target).ok_or_else(|| format!("map {}: slot {slot}: no map {target}", d.name))?
                };
                let r = m.update(&slot.to_le_bytes(), &(v as u32).to_le_bytes(), 0, None);
                if r != 0 {
                    return Err(format!("map {}: slot {slot} = {target}: error {}", d.name, -r));
                }
            }
        }
        let mut vm = Vm {
            maps: std::sync::Arc::new(maps),
            programs: Vec::new(),
            cpu: 0,
            rng: 0x853c_49e6_748f_ea9b,
            regions: Vec::new(),
            stack: vec![0; crate::interp::STACK_TOTAL],
            pool: std::sync::Arc::new(pool),
            sem: crate::kernel::semantics(),
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
            sem: self.sem,
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
