//! The JIT: eBPF to native code through Cranelift. Each BPF function (the
//! program's entry, every bpf-to-bpf call target and callback) becomes one
//! native function `(env, r1..r5, frame) -> r0`, so R6–R9 are kept across
//! calls by construction. The control-flow graph is built first; then each
//! instruction is translated in order. Every load and store goes through
//! one emitter of bounds checks: stack, then packet, inline; anything else
//! through the same region check the interpreter uses.

use std::collections::{BTreeSet, HashMap};

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, AtomicRmwOp, ExtFuncData, ExternalName, Function, GlobalValueData, InstBuilder, MemFlags, Signature, UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::{CallConv, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{binemit::Reloc, FinalizedRelocTarget};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};

use crate::helpers;
use crate::insn::*;
use crate::interp::{Exec, Flow, STACK_SIZE, STACK_TOTAL};
use crate::vm::{Fault, Packet, Vm};

/// What compiled code reads and the host functions write. Offsets are
/// used in the generated code: keep the layout.
#[repr(C)]
pub struct Env {
    exec: *mut Exec<'static>,
    pkt_lo: u64,
    pkt_hi: u64,
    stack_lo: u64,
    stack_hi: u64,
    ctx: u64,
    fault: u64,
    jit: *const Jit,
    prog: u64,
    cpu: u64,
    /// Set by a tail call that is taken: the program to continue in.
    tail_fn: u64,
    /// The packet's data pointer (ctx->data).
    pkt_data: u64,
    /// A bounds check that failed: instruction, address, size and 1 for
    /// a write.
    fault_pc: u64,
    fault_addr: u64,
    fault_size: u64,
    fault_write: u64,
}

const ENV_PKT_LO: i32 = 8;
const ENV_PKT_HI: i32 = 16;
const ENV_STACK_LO: i32 = 24;
const ENV_STACK_HI: i32 = 32;
const ENV_CTX: i32 = 40;
const ENV_FAULT: i32 = 48;
const ENV_CPU: i32 = 72;
const ENV_TAIL: i32 = 80;
const ENV_PKT_DATA: i32 = 88;
const ENV_FAULT_PC: i32 = 96;
const ENV_FAULT_ADDR: i32 = 104;
const ENV_FAULT_SIZE: i32 = 112;
const ENV_FAULT_WRITE: i32 = 120;

type EntryFn = unsafe extern "C" fn(*mut Env, u64, u64, u64, u64, u64, u64) -> u64;

pub struct Jit {
    _code: ExecMem,
    /// Native code of each BPF function, by (program, first instruction).
    funcs: HashMap<(usize, usize), EntryFn>,
    prog: usize,
    entry: EntryFn,
}

/// Native code of every program of an object, not yet placed: each
/// address it needs (other functions, the host functions, map values) is
/// a relocation, so the same image runs in this process (the JIT) or is
/// written to a file and loaded later without Cranelift (AOT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub code: Vec<u8>,
    /// Every function: (program, first instruction, offset in code).
    pub funcs: Vec<(u32, u32, u32)>,
    pub relocs: Vec<ImageReloc>,
}

/// One address to fill in: at `at`, `kind` (RELOC_ABS8: 8 bytes absolute;
/// RELOC_PCREL4: 4 bytes relative to the field), the address of symbol
/// `index` of namespace `ns`, plus `addend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageReloc {
    pub at: u32,
    pub kind: u8,
    pub ns: u32,
    pub index: u32,
    pub addend: i64,
}

pub const RELOC_ABS8: u8 = 0;
pub const RELOC_PCREL4: u8 = 1;
/// Namespaces: a function of the image (by its index in `funcs`), a host
/// function (HOST_*), a map's values (by map index), a place in the image.
pub const NS_FUNC: u32 = 0;
pub const NS_HOST: u32 = 1;
pub const NS_MAP: u32 = 2;
pub const NS_CODE: u32 = 3;
/// The start (0) and end (1) of the pool of writable map values.
pub const NS_POOL: u32 = 4;
/// (Host function 0 was the region check, now all inline.)
const HOST_CTX: u32 = 1;
const HOST_HELPER: u32 = 2;
const HOST_MAP: u32 = 3;

/// What the compiler may do beyond translating instruction by instruction;
/// each switch alone. The AOT compiles with all of them by default, the JIT
/// with [`Opts::JIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opts {
    /// Loads and stores through a pointer to one map value (what
    /// bpf_map_lookup_elem returned, after its NULL check, or a global's
    /// address), at a constant offset inside the value, skip the bounds
    /// check. The value's size comes from BTF, which must agree with the
    /// map's value_size.
    pub typed_values: bool,
    /// bpf_map_lookup_elem on arrays and bpf_csum_diff with constant sizes
    /// compiled inline; off, both are calls.
    pub inline_helpers: bool,
    /// Loads from read-only maps (and maps named constant) at an address
    /// known when compiling become the value they read.
    pub const_maps: bool,
}

impl Opts {
    pub const NONE: Opts = Opts { typed_values: false, inline_helpers: false, const_maps: false };
    pub const ALL: Opts = Opts { typed_values: true, inline_helpers: true, const_maps: true };
    /// The JIT's: helpers inline (array lookups as before, bpf_csum_diff with
    /// the semantics of the kernel this process behaves as, which cannot
    /// change under it) and values typed; maps are not folded, since the
    /// JIT's maps may be written after it compiled.
    pub const JIT: Opts = Opts { typed_values: true, inline_helpers: true, const_maps: false };

    /// `none`, `all`, or a comma list of typed-values, inline-helpers, const-maps.
    pub fn parse(s: &str) -> Result<Opts, String> {
        match s {
            "none" => return Ok(Opts::NONE),
            "all" => return Ok(Opts::ALL),
            _ => {}
        }
        let mut o = Opts::NONE;
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "typed-values" => o.typed_values = true,
                "inline-helpers" => o.inline_helpers = true,
                "const-maps" => o.const_maps = true,
                _ => return Err(format!("--opt {s:?}: {w:?} is none of typed-values, inline-helpers, const-maps (or use none, all)")),
            }
        }
        Ok(o)
    }

    /// The form [`Opts::parse`] reads: `none`, or the switches that are on.
    pub fn names(&self) -> String {
        let mut v = Vec::new();
        if self.typed_values {
            v.push("typed-values");
        }
        if self.inline_helpers {
            v.push("inline-helpers");
        }
        if self.const_maps {
            v.push("const-maps");
        }
        if v.is_empty() { "none".into() } else { v.join(",") }
    }

    pub fn bits(&self) -> u32 {
        self.typed_values as u32 | (self.inline_helpers as u32) << 1 | (self.const_maps as u32) << 2
    }

    pub fn from_bits(b: u32) -> Opts {
        Opts { typed_values: b & 1 != 0, inline_helpers: b & 2 != 0, const_maps: b & 4 != 0 }
    }
}

/// What the options did in one compilation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bounds checks left out for accesses inside a typed map value.
    pub elided_checks: u32,
    /// bpf_map_lookup_elem calls compiled inline.
    pub inlined_lookups: u32,
    /// bpf_csum_diff calls compiled inline.
    pub inlined_csum: u32,
    /// Loads replaced by the constant they read.
    pub folded_loads: u32,
    /// The bpf_csum_diff semantics inlined code computes (true: folded to
    /// 16 bits), when some was inlined: fixed in the code.
    pub csum_folded: Option<bool>,
    /// Maps whose contents the code holds, by index.
    pub folded_maps: BTreeSet<usize>,
}

/// What the translator knows of one map.
#[derive(Clone, Copy, Default)]
struct MapInfo {
    /// Bytes a pointer to one of its values may reach; None: no typing.
    typed: Option<u32>,
    readonly: bool,
    /// Element stride and slots of a plain array, whose addresses
    /// ld_imm64 or a lookup of a constant key give whole.
    array: Option<(usize, usize)>,
    /// Its contents may be folded into the code.
    constant: bool,
    /// Named constant by the operator: the program must not write it.
    named: bool,
}

/// Everything translation reads besides the program.
struct Cx<'a> {
    opts: Opts,
    maps: Vec<MapInfo>,
    vm: &'a Vm,
}

/// What a register holds, as far as typing values goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Unknown,
    /// A map (ld_imm64 of its handle).
    Map(u32),
    /// What bpf_map_lookup_elem of the map returned at instruction `id`,
    /// not yet tested against NULL; only copies keep it.
    MaybeNull { map: u32, id: u32 },
    /// A pointer to one value of the map, plus `off`.
    Value { map: u32, off: i64 },
    /// The start of the map's values plus `off`, known when compiling.
    At { map: u32, off: i64 },
    /// A number known when compiling.
    Const(i64),
    /// The frame pointer plus `off`.
    Fp(i64),
}

/// What registers hold, and u32 constants stored in the frame (offset
/// from R10, value), for map keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TyState {
    r: [Ty; 11],
    slots: [Option<(i64, u32)>; 8],
}

impl std::ops::Index<usize> for TyState {
    type Output = Ty;
    fn index(&self, i: usize) -> &Ty {
        &self.r[i]
    }
}

impl std::ops::IndexMut<usize> for TyState {
    fn index_mut(&mut self, i: usize) -> &mut Ty {
        &mut self.r[i]
    }
}

impl TyState {
    /// What both hold.
    fn meet(&self, o: &TyState) -> TyState {
        let mut slots = self.slots;
        for s in slots.iter_mut() {
            if s.is_some() && !o.slots.contains(s) {
                *s = None;
            }
        }
        TyState { r: std::array::from_fn(|i| if self.r[i] == o.r[i] { self.r[i] } else { Ty::Unknown }), slots }
    }
}

const U: Ty = Ty::Unknown;
const TY_UNKNOWN: TyState = TyState { r: [U, U, U, U, U, U, U, U, U, U, Ty::Fp(0)], slots: [None; 8] };

/// Executable memory holding a placed image.
struct ExecMem {
    mem: *mut u8,
    len: usize,
}

unsafe impl Send for ExecMem {}
unsafe impl Sync for ExecMem {}

impl Drop for ExecMem {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.mem as *mut libc::c_void, self.len) };
    }
}

impl Env {
    fn exec(&mut self) -> &mut Exec<'static> {
        unsafe { &mut *self.exec }
    }

    fn refresh_packet(&mut self) {
        let x = self.exec();
        let base = x.pkt.base();
        let (lo, hi) = (base + x.pkt.meta as u64, base + x.pkt.data_end as u64);
        self.pkt_data = base + x.pkt.data as u64;
        self.pkt_lo = lo;
        self.pkt_hi = hi;
    }

    fn fail(&mut self, f: Fault) -> u64 {
        self.exec().jit_fault = Some(f);
        self.fault = 1;
        0
    }
}

extern "C" fn host_ctx_load(env: *mut Env, off: u64) -> u64 {
    let env = unsafe { &mut *env };
    env.exec().ctx_field(off)
}

#[allow(clippy::too_many_arguments)]
extern "C" fn host_helper(env: *mut Env, id: u64, pc: u64, fp: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> u64 {
    let env = unsafe { &mut *env };
    if id == 181 {
        return bpf_loop(env, pc, fp, [a1, a2, a3, a4, a5]);
    }
    let r = helpers::call(env.exec(), pc as usize, id as i32, [a1, a2, a3, a4, a5]);
    env.refresh_packet();
    match r {
        Ok(Flow::Value(v)) => v,
        Ok(Flow::TailCall(t)) => {
            // The compiled code calls the target in place of the rest of
            // the current function.
            let jit = unsafe { &*env.jit };
            match jit.funcs.get(&(t, 0)) {
                Some(&f) => {
                    env.tail_fn = f as u64;
                    env.prog = t as u64;
                    0
                }
                None => env.fail(Fault::Bad(format!("tail call into program {t}, which is not compiled"))),
            }
        }
        Err(f) => env.fail(f),
    }
}

/// A map helper whose key (and value) compiled code has checked: op 1
/// lookup, 2 update, 3 delete, as the helpers do them.
extern "C" fn host_map(env: *mut Env, op: u64, map: u64, key: u64, value: u64, flags: u64) -> u64 {
    let env = unsafe { &mut *env };
    let x = env.exec();
    let m = &x.vm.maps[map as usize];
    let key = unsafe { std::slice::from_raw_parts(key as *const u8, m.def.key_size as usize) };
    match op {
        1 => m.lookup(key, x.vm.cpu).unwrap_or(0),
        2 => {
            // A value may point into the same map: copy it first.
            let val = unsafe { std::slice::from_raw_parts(value as *const u8, m.def.value_size as usize) }.to_vec();
            m.update(key, &val, flags, Some(x.vm.cpu)) as u64
        }
        _ => m.delete(key) as u64,
    }
}

/// bpf_loop with a compiled callback, in the frame below the caller's.
fn bpf_loop(env: &mut Env, pc: u64, fp: u64, a: [u64; 5]) -> u64 {
    if let Err(code) = helpers::loop_args(a) {
        return code;
    }
    let jit = unsafe { &*env.jit };
    let Some(&f) = jit.funcs.get(&(env.prog as usize, a[1] as usize)) else {
        return env.fail(Fault::Bad(format!("instruction {pc}: bpf_loop callback {} is not a compiled function", a[1])));
    };
    let callee_fp = fp + STACK_SIZE as u64;
    if callee_fp > env.stack_hi {
        return env.fail(Fault::Limit("call depth above the kernel's".into()));
    }
    for i in 0..a[0] {
        let r = unsafe { f(env as *mut Env, i, a[2], 0, 0, 0, callee_fp) };
        if env.fault != 0 {
            return 0;
        }
        if r == 1 {
            return i + 1;
        }
    }
    a[0]
}

fn bpf_sig(cc: CallConv) -> Signature {
    host_sig(cc, 7)
}

fn host_sig(cc: CallConv, params: usize) -> Signature {
    let mut s = Signature::new(cc);
    for _ in 0..params {
        s.params.push(AbiParam::new(types::I64));
    }
    s.returns.push(AbiParam::new(types::I64));
    s
}

/// The ISA code is compiled for: this machine's, as Cranelift finds it.
fn native_isa() -> Result<OwnedTargetIsa, String> {
    let mut fb = settings::builder();
    fb.set("opt_level", "speed").map_err(|e| e.to_string())?;
    cranelift_native::builder()
        .map_err(|e| format!("no JIT for this machine: {e}"))?
        .finish(settings::Flags::new(fb))
        .map_err(|e| e.to_string())
}

/// Compiles every program the runtime can run, each BPF function (entry,
/// call targets, callbacks) to one native function, into one image, with
/// the JIT's options.
pub fn compile_image(vm: &Vm) -> Result<Image, String> {
    compile_with(vm, Opts::JIT, &[]).map(|(img, _)| img)
}

/// What the translator may know of each map under `opts`; `named` are
/// arrays the operator declares constant (by index).
fn map_infos(vm: &Vm, opts: Opts, named: &[usize]) -> Result<Vec<MapInfo>, String> {
    use crate::elf::map_type as mt;
    let mut out = Vec::new();
    for (i, m) in vm.maps.iter().enumerate() {
        let d = &m.def;
        let vs = d.value_size;
        let valued = matches!(d.map_type, mt::ARRAY | mt::PERCPU_ARRAY | mt::HASH | mt::PERCPU_HASH | mt::LRU_HASH | mt::LRU_PERCPU_HASH | mt::LPM_TRIE) && m.region().is_some();
        // BTF's size, where the map has BTF, and value_size must agree: a
        // data section's variables end at or before its size (padding), a
        // `.maps` value type is the value.
        let typed = match (valued, d.btf_value_size) {
            (false, _) => None,
            (true, None) => Some(vs),
            (true, Some(b)) if d.data.is_some() && b <= vs => Some(b),
            (true, Some(b)) if b == vs => Some(vs),
            (true, Some(_)) => None,
        };
        let array = match m.array_layout() {
            Some((_, elem, slots, _)) if d.map_type == mt::ARRAY => Some((elem, slots)),
            _ => None,
        };
        let is_named = named.contains(&i);
        if is_named && array.is_none() {
            return Err(format!("--const-map {}: a {} map, and only arrays can be constant", d.name, mt::name(d.map_type)));
        }
        out.push(MapInfo { typed, readonly: d.readonly, array, constant: opts.const_maps && array.is_some() && (d.readonly || is_named), named: is_named });
    }
    Ok(out)
}

/// Compiles every program with `opts`, arrays `named` (by index) taken
/// as constant: the image and what the options did.
pub fn compile_with(vm: &Vm, opts: Opts, named: &[usize]) -> Result<(Image, Stats), String> {
    // A test proves that AOT runs compile nothing.
    if std::env::var_os("FASTPATH_RT_NO_CRANELIFT").is_some() {
        return Err("compiling is off (FASTPATH_RT_NO_CRANELIFT)".into());
    }
    let isa = native_isa()?;
    let cc = isa.default_call_conv();
    let cx = Cx { opts, maps: map_infos(vm, opts, named)?, vm };
    let mut stats = Stats::default();
    // Arrays' layouts, for lookups compiled inline as the kernel does.
    let arrays: HashMap<usize, ArrayLayout> = vm
        .maps
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.array_layout().map(|(_, elem, slots, per_cpu)| (i, ArrayLayout { elem, slots, per_cpu, percpu: m.percpu() })))
        .collect();
    let map_sizes: Vec<(usize, usize)> = vm.maps.iter().map(|m| (m.def.key_size as usize, m.def.value_size as usize)).collect();
    // Read-only data lies outside the pool: its regions, by map.
    let rodata: Vec<(usize, u64)> = vm.maps.iter().enumerate().filter(|(_, m)| m.def.readonly).filter_map(|(i, m)| m.region().map(|(a, b)| (i, b - a))).collect();
    // Every function first, so that calls can name them by index.
    let mut funcs: Vec<(usize, usize, usize)> = Vec::new(); // program, start, end
    for (pi, p) in vm.programs.iter().enumerate() {
        if p.refused.is_some() {
            continue;
        }
        let mut entries = BTreeSet::from([0usize]);
        for (pc, ins) in p.insns.iter().enumerate() {
            if (ins.is_call() && ins.src() == PSEUDO_CALL) || (ins.is_ld_imm64() && ins.src() == PSEUDO_FUNC) {
                entries.insert((pc as i64 + ins.imm as i64 + 1) as usize);
            }
        }
        let entries: Vec<usize> = entries.into_iter().collect();
        for (i, &start) in entries.iter().enumerate() {
            funcs.push((pi, start, entries.get(i + 1).copied().unwrap_or(p.insns.len())));
        }
    }
    let mut img = Image { code: Vec::new(), funcs: Vec::new(), relocs: Vec::new() };
    let mut ctx = cranelift_codegen::Context::new();
    let mut fbc = FunctionBuilderContext::new();
    for (fi, &(pi, start, end)) in funcs.iter().enumerate() {
        let p = &vm.programs[pi];
        let ids: HashMap<usize, u32> = funcs.iter().enumerate().filter(|(_, f)| f.0 == pi).map(|(i, f)| (f.1, i as u32)).collect();
        ctx.clear();
        ctx.func.signature = bpf_sig(cc);
        ctx.func.name = UserFuncName::user(NS_FUNC, fi as u32);
        let st = translate(cc, &mut ctx.func, &mut fbc, p, start, end, &ids, &arrays, &rodata, &map_sizes, &cx).map_err(|e| format!("program {}: {e}", p.name))?;
        stats.elided_checks += st.elided_checks;
        stats.inlined_lookups += st.inlined_lookups;
        stats.inlined_csum += st.inlined_csum;
        stats.folded_loads += st.folded_loads;
        stats.csum_folded = stats.csum_folded.or(st.csum_folded);
        stats.folded_maps.extend(st.folded_maps);
        let names = ctx.func.params.user_named_funcs().clone();
        let code = ctx.compile(&*isa, &mut Default::default()).map_err(|e| format!("program {}: compile: {:?}", p.name, e.inner))?;
        while img.code.len() % 16 != 0 {
            img.code.push(0xcc);
        }
        let base = img.code.len() as u32;
        img.code.extend_from_slice(code.code_buffer());
        for r in code.buffer.relocs() {
            let kind = match r.kind {
                Reloc::Abs8 => RELOC_ABS8,
                Reloc::X86PCRel4 | Reloc::X86CallPCRel4 => RELOC_PCREL4,
                k => return Err(format!("program {}: relocation {k:?} is not supported", p.name)),
            };
            let (ns, index, addend) = match &r.target {
                FinalizedRelocTarget::ExternalName(ExternalName::User(u)) => {
                    let n = &names[*u];
                    (n.namespace, n.index, r.addend)
                }
                FinalizedRelocTarget::Func(off) => (NS_CODE, 0, base as i64 + *off as i64 + r.addend),
                FinalizedRelocTarget::ExternalName(n) => return Err(format!("program {}: relocation to {n:?} is not supported", p.name)),
            };
            img.relocs.push(ImageReloc { at: base + r.offset, kind, ns, index, addend });
        }
        img.funcs.push((pi as u32, start as u32, base));
    }
    Ok((img, stats))
}

impl Jit {
    /// Compiles the Vm's programs and places them in this process: `prog`
    /// with the functions it calls, and the object's other programs, which
    /// tail calls may enter.
    pub fn compile(vm: &Vm, prog: usize) -> Result<Jit, String> {
        if let Some(why) = &vm.programs[prog].refused {
            return Err(why.clone());
        }
        Jit::load(vm, prog, &compile_image(vm)?)
    }

    /// Places an image (compiled now, or read from an AOT file) in
    /// executable memory, with its addresses filled in for this Vm.
    pub fn load(vm: &Vm, prog: usize, img: &Image) -> Result<Jit, String> {
        if let Some(why) = &vm.programs[prog].refused {
            return Err(why.clone());
        }
        let page = 4096;
        let len = img.code.len().div_ceil(page).max(1) * page;
        let mem = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if mem == libc::MAP_FAILED {
            return Err(format!("map memory for native code: {}", std::io::Error::last_os_error()));
        }
        let exec = ExecMem { mem: mem as *mut u8, len };
        let base = exec.mem as u64;
        unsafe { std::ptr::copy_nonoverlapping(img.code.as_ptr(), exec.mem, img.code.len()) };
        for r in &img.relocs {
            let sym = match r.ns {
                NS_FUNC => base + img.funcs.get(r.index as usize).ok_or("relocation to a function the image lacks")?.2 as u64,
                NS_HOST => match r.index {
                    HOST_CTX => host_ctx_load as *const () as u64,
                    HOST_HELPER => host_helper as *const () as u64,
                    HOST_MAP => host_map as *const () as u64,
                    i => return Err(format!("relocation to host function {i}, which the runtime lacks")),
                },
                NS_MAP => vm.maps.get(r.index as usize).and_then(|m| m.region()).ok_or_else(|| format!("relocation to map {}, which has no values", r.index))?.0,
                NS_CODE => base,
                NS_POOL => match r.index {
                    0 => vm.pool.range().0,
                    _ => vm.pool.range().1,
                },
                ns => return Err(format!("relocation namespace {ns} is unknown")),
            };
            let target = sym.wrapping_add(r.addend as u64);
            let at = r.at as usize;
            match r.kind {
                RELOC_ABS8 if at + 8 <= img.code.len() => unsafe { (exec.mem.add(at) as *mut u64).write_unaligned(target) },
                RELOC_PCREL4 if at + 4 <= img.code.len() => {
                    let rel = target.wrapping_sub(base + at as u64) as i64;
                    let rel = i32::try_from(rel).map_err(|_| "relative relocation out of range")?;
                    unsafe { (exec.mem.add(at) as *mut i32).write_unaligned(rel) }
                }
                k => return Err(format!("relocation kind {k} at {at} is not valid")),
            }
        }
        if unsafe { libc::mprotect(mem, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            return Err(format!("make native code executable: {}", std::io::Error::last_os_error()));
        }
        let mut funcs = HashMap::new();
        for &(pi, start, off) in &img.funcs {
            let f: EntryFn = unsafe { std::mem::transmute(base + off as u64) };
            funcs.insert((pi as usize, start as usize), f);
        }
        let entry = *funcs.get(&(prog, 0)).ok_or("the image lacks the program")?;
        Ok(Jit { _code: exec, funcs, prog, entry })
    }

    /// Runs the compiled program on the packet.
    pub fn run(&self, vm: &mut Vm, prog: usize, pkt: &mut Packet) -> Result<u64, Fault> {
        if prog != self.prog {
            return Err(Fault::Bad("program not compiled".into()));
        }
        let f = self.entry;
        let stack_lo = vm.stack.as_ptr() as u64;
        let cpu = vm.cpu as u64;
        let mut x = Exec::new(vm, pkt);
        let ctx = x.prepare();
        let exec: *mut Exec<'static> = unsafe { std::mem::transmute(&mut x as *mut Exec) };
        let mut env = Env {
            exec,
            pkt_lo: 0,
            pkt_hi: 0,
            stack_lo,
            stack_hi: stack_lo + STACK_TOTAL as u64,
            ctx,
            fault: 0,
            jit: self,
            prog: prog as u64,
            cpu,
            tail_fn: 0,
            pkt_data: 0,
            fault_pc: 0,
            fault_addr: 0,
            fault_size: 0,
            fault_write: 0,
        };
        env.refresh_packet();
        let r0 = unsafe { f(&mut env, ctx, 0, 0, 0, 0, stack_lo + STACK_SIZE as u64) };
        if env.fault != 0 {
            return Err(x.jit_fault.take().unwrap_or(Fault::Memory { pc: env.fault_pc as usize, addr: env.fault_addr, len: env.fault_size, write: env.fault_write != 0 }));
        }
        Ok(r0)
    }
}

impl Jit {
    /// A runner for many runs of the compiled program on one packet: the
    /// environment is set up once, so a run costs what the call costs, as
    /// in a loop over frames or test runs.
    pub fn runner<'a>(&'a self, vm: &'a mut Vm, prog: usize, pkt: &'a mut Packet) -> Result<Runner<'a>, Fault> {
        if prog != self.prog {
            return Err(Fault::Bad("program not compiled".into()));
        }
        let stack_lo = vm.stack.as_ptr() as u64;
        let cpu = vm.cpu as u64;
        let env = Env {
            exec: std::ptr::null_mut(),
            pkt_lo: 0,
            pkt_hi: 0,
            stack_lo,
            stack_hi: stack_lo + STACK_TOTAL as u64,
            ctx: 0,
            fault: 0,
            jit: self,
            prog: prog as u64,
            cpu,
            tail_fn: 0,
            pkt_data: 0,
            fault_pc: 0,
            fault_addr: 0,
            fault_size: 0,
            fault_write: 0,
        };
        let mut r = Runner { entry: self.entry, prog: prog as u64, frame: stack_lo + STACK_SIZE as u64, x: Exec::new(vm, pkt), env };
        // The packet's bounds in the environment follow the packet: set
        // here, and after every helper that moves it, by that helper.
        r.env.ctx = r.x.prepare();
        r.env.exec = unsafe { std::mem::transmute::<&mut Exec, *mut Exec<'static>>(&mut r.x) };
        r.env.refresh_packet();
        Ok(r)
    }
}

/// Runs one compiled program on one packet, again and again.
pub struct Runner<'a> {
    entry: EntryFn,
    prog: u64,
    frame: u64,
    x: Exec<'a>,
    env: Env,
}

impl Runner<'_> {
    #[inline]
    pub fn run(&mut self) -> Result<u64, Fault> {
        let ctx = self.env.ctx;
        // The runner may have moved since the last run.
        let exec = unsafe { std::mem::transmute::<&mut Exec, *mut Exec<'static>>(&mut self.x) };
        if self.env.exec != exec {
            self.env.exec = exec;
        }
        let r0 = unsafe { (self.entry)(&mut self.env, ctx, 0, 0, 0, 0, self.frame) };
        // What a run changes only when it takes a tail call or faults is
        // put back then, not before every run.
        if self.x.tail_calls != 0 {
            self.x.tail_calls = 0;
            self.env.prog = self.prog;
        }
        if self.env.fault != 0 {
            self.x.prepare();
            self.env.prog = self.prog;
            self.env.tail_fn = 0;
            self.env.fault = 0;
            let e = &self.env;
            return Err(self.x.jit_fault.take().unwrap_or(Fault::Memory { pc: e.fault_pc as usize, addr: e.fault_addr, len: e.fault_size, write: e.fault_write != 0 }));
        }
        Ok(r0)
    }

    /// The packet as the runs left it.
    pub fn packet(&mut self) -> &mut Packet {
        self.x.pkt
    }
}

#[derive(Clone, Copy)]
struct ArrayLayout {
    elem: usize,
    slots: usize,
    per_cpu: usize,
    percpu: bool,
}

struct Tr<'a, 'b> {
    b: FunctionBuilder<'b>,
    regs: [Variable; 11],
    scratch: Variable,
    /// The packet's bounds (data_meta, data_end), kept in registers.
    bounds: [Variable; 2],
    /// Registers known to hold the context (R1 at a program's entry, and
    /// copies), for the instruction being translated.
    ctx_regs: u16,
    /// Packet accesses the program's own comparisons with data_end bound
    /// (see ranges.rs): no check of ours.
    proven: Vec<bool>,
    /// Registers known to hold R10 plus a constant, in this block (the
    /// `r2 = r10; r2 += -4` of a map key): accesses through them at a
    /// constant offset inside the frame need no check, as through R10.
    fp_off: [Option<i64>; 11],
    /// Key and value sizes of the object's maps, for map helpers called
    /// with their arguments checked inline.
    map_sizes: &'a [(usize, usize)],
    env: Value,
    fault: cranelift_codegen::ir::Block,
    /// The host functions: context field, helper call, map operation.
    hosts: [cranelift_codegen::ir::FuncRef; 3],
    /// Read-only data: (map, bytes), checked for reads only.
    rodata: &'a [(usize, u64)],
    bpf_sig: cranelift_codegen::ir::SigRef,
    arrays: &'a HashMap<usize, ArrayLayout>,
    /// Instruction that starts the block being translated.
    block_start: usize,
    /// Where that block ends (the next leader).
    block_end: usize,
    /// A run of accesses at constant offsets from one register, checked
    /// once as a whole: (register, last instruction of the run, whether
    /// the whole range was found inside a region).
    runs: Vec<(usize, usize, Variable)>,
    /// The program being translated.
    prog: &'a crate::vm::Program,
    cx: &'a Cx<'a>,
    /// What each register holds, for typed values and folded loads, before
    /// the instruction being translated.
    ty: TyState,
    stats: Stats,
}

fn flags() -> MemFlags {
    MemFlags::new().with_notrap()
}

/// Which registers hold the context at the start of each block of a
/// function (a bit per register): R1 at a program's entry (instruction 0),
/// and its copies, until written; nothing is known at a subprogram's.
/// Forward dataflow, meeting by intersection.
fn ctx_registers(p: &crate::vm::Program, start: usize, end: usize, leaders: &BTreeSet<usize>) -> HashMap<usize, u16> {
    let ls: Vec<usize> = leaders.iter().copied().collect();
    let mut state: HashMap<usize, u16> = ls.iter().map(|&l| (l, 0xffff)).collect();
    state.insert(start, if start == 0 { 1 << 1 } else { 0 });
    let mut changed = true;
    while changed {
        changed = false;
        for (i, &l) in ls.iter().enumerate() {
            let block_end = ls.get(i + 1).copied().unwrap_or(end);
            let mut m = state[&l];
            let mut pc = l;
            let mut succs: Vec<usize> = Vec::new();
            let mut falls = true;
            while pc < block_end {
                let ins = p.insns[pc];
                m = ctx_after(m, ins);
                let class = ins.class();
                if (class == CLASS_JMP || class == CLASS_JMP32) && !ins.is_call() {
                    let op = ins.code & 0xf0;
                    if op == 0x90 {
                        falls = false;
                    } else {
                        let off = if op == 0x00 && class == CLASS_JMP32 { ins.imm as i64 } else { ins.off as i64 };
                        succs.push((pc as i64 + off + 1) as usize);
                        if op == 0x00 {
                            falls = false;
                        }
                    }
                }
                pc += if ins.is_ld_imm64() { 2 } else { 1 };
            }
            if falls && block_end < end {
                succs.push(block_end);
            }
            for sc in succs {
                if let Some(s) = state.get_mut(&sc) {
                    if *s & m != *s {
                        *s &= m;
                        changed = true;
                    }
                }
            }
        }
    }
    // A block no path reaches keeps "every register": know nothing there.
    for v in state.values_mut() {
        if *v == 0xffff {
            *v = 0;
        }
    }
    state
}

const FP_UNKNOWN: [Option<i64>; 11] = [None, None, None, None, None, None, None, None, None, None, Some(0)];

/// What registers hold R10 plus a constant after an instruction.
fn fp_after(mut f: [Option<i64>; 11], ins: Insn) -> [Option<i64>; 11] {
    let dst = ins.dst();
    let src = (ins.regs >> 4) as usize;
    match ins.class() {
        CLASS_ALU64 if ins.code == 0xbf && ins.off == 0 => f[dst] = f[src],
        CLASS_ALU64 if ins.code == 0x07 => f[dst] = f[dst].map(|k| k + ins.imm as i64),
        CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX => f[dst] = None,
        CLASS_STX if ins.code & 0xe0 == MODE_ATOMIC => {
            f[src] = None;
            f[0] = None;
        }
        CLASS_JMP | CLASS_JMP32 if ins.is_call() => f[..6].fill(None),
        _ => {}
    }
    f[10] = Some(0);
    f
}

/// Whether an instruction writes register `r` (calls aside).
fn writes_reg(ins: Insn, r: usize) -> bool {
    match ins.class() {
        CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX => ins.dst() == r,
        CLASS_STX if ins.code & 0xe0 == MODE_ATOMIC => (ins.regs >> 4) as usize == r || r == 0,
        _ => false,
    }
}

/// The instruction before `i` in the block that starts at `start`,
/// stepping over the second half of a 64-bit load.
fn prev_insn(p: &crate::vm::Program, start: usize, i: usize) -> Option<usize> {
    if i <= start {
        return None;
    }
    let j = i - 1;
    if j > start && p.insns[j - 1].is_ld_imm64() { Some(j - 1) } else { Some(j) }
}

/// The constant register `r` holds at `pc`, when a move of an immediate
/// in the same block put it there and nothing wrote it since.
fn reg_const(p: &crate::vm::Program, start: usize, pc: usize, r: usize) -> Option<i64> {
    let mut i = pc;
    while let Some(j) = prev_insn(p, start, i) {
        i = j;
        let ins = p.insns[i];
        if ins.is_call() {
            return None;
        }
        if writes_reg(ins, r) {
            return match ins.code {
                0xb7 if ins.off == 0 => Some(ins.imm as i64),
                0xb4 if ins.off == 0 => Some(ins.imm as u32 as i64),
                _ => None,
            };
        }
    }
    None
}

fn ty_add(t: Ty, k: i64) -> Ty {
    match t {
        Ty::Const(c) => Ty::Const(c.wrapping_add(k)),
        Ty::Fp(off) => off.checked_add(k).map_or(Ty::Unknown, Ty::Fp),
        Ty::Value { map, off } => off.checked_add(k).map_or(Ty::Unknown, |off| Ty::Value { map, off }),
        Ty::At { map, off } => off.checked_add(k).map_or(Ty::Unknown, |off| Ty::At { map, off }),
        _ => Ty::Unknown,
    }
}

/// What registers (and the frame's u32 slots) hold after the instruction
/// at `pc`.
fn ty_after(cx: &Cx, p: &crate::vm::Program, pc: usize, mut t: TyState) -> TyState {
    let ins = p.insns[pc];
    let dst = ins.dst();
    let src = (ins.regs >> 4) as usize;
    match ins.class() {
        CLASS_ALU64 if ins.code == 0xbf && ins.off == 0 => t[dst] = t[src],
        CLASS_ALU64 if ins.code == 0xb7 => t[dst] = Ty::Const(ins.imm as i64),
        CLASS_ALU if ins.code == 0xb4 && ins.off == 0 => t[dst] = Ty::Const(ins.imm as u32 as i64),
        CLASS_ALU64 if ins.code == 0x07 => t[dst] = ty_add(t[dst], ins.imm as i64),
        CLASS_ALU64 if ins.code == 0x17 => t[dst] = ty_add(t[dst], -(ins.imm as i64)),
        CLASS_LD if ins.is_ld_imm64() => {
            let m = ins.imm as u32;
            t[dst] = match ins.src() {
                PSEUDO_MAP_FD if (m as usize) < cx.maps.len() => Ty::Map(m),
                PSEUDO_MAP_VALUE if cx.maps.get(m as usize).is_some_and(|i| i.array.is_some()) => Ty::At { map: m, off: p.insns[pc + 1].imm as u32 as i64 },
                _ => Ty::Unknown,
            }
        }
        CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX => t[dst] = Ty::Unknown,
        CLASS_ST | CLASS_STX => {
            let atomic = ins.code & 0xe0 == MODE_ATOMIC;
            let stored = match (ins.class(), t[src]) {
                (CLASS_ST, _) => Some(ins.imm as u32),
                (_, Ty::Const(c)) => Some(c as u32),
                _ => None,
            };
            match t[dst] {
                Ty::Fp(k) => {
                    let (a, n) = (k + ins.off as i64, ins.size() as i64);
                    for s in t.slots.iter_mut() {
                        if matches!(*s, Some((o, _)) if o < a + n && a < o + 4) {
                            *s = None;
                        }
                    }
                    if let (false, 4, Some(v)) = (atomic || ins.code & 0xe0 != MODE_MEM, n, stored) {
                        if let Some(s) = t.slots.iter_mut().find(|s| s.is_none()) {
                            *s = Some((a, v));
                        }
                    }
                }
                // Map values are not the stack.
                Ty::Value { .. } | Ty::At { .. } => {}
                // Anything else might point into the frame.
                _ => t.slots = [None; 8],
            }
            if atomic {
                t[src] = Ty::Unknown;
                t[0] = Ty::Unknown;
            }
        }
        CLASS_JMP | CLASS_JMP32 if ins.is_call() => {
            let (r1, r2) = (t[1], t[2]);
            t.r[..6].fill(Ty::Unknown);
            // bpf_map_lookup_elem writes no memory; any other call might
            // write the frame through a pointer.
            let lookup = ins.src() != PSEUDO_CALL && ins.imm == 1;
            if !lookup {
                t.slots = [None; 8];
            }
            let key = match r2 {
                Ty::Fp(k) => t.slots.iter().flatten().find(|s| s.0 == k).map(|s| s.1),
                _ => None,
            };
            if let (true, Ty::Map(m)) = (lookup, r1) {
                let info = cx.maps[m as usize];
                match (info.constant, info.array, key) {
                    (true, Some((elem, slots)), Some(k)) if (k as usize) < slots => t[0] = Ty::At { map: m, off: k as i64 * elem as i64 },
                    _ if info.typed.is_some() => {
                        // A new result of this call: copies of an older
                        // one are another pointer.
                        for r in t.r.iter_mut() {
                            if matches!(*r, Ty::MaybeNull { id, .. } if id == pc as u32) {
                                *r = Ty::Unknown;
                            }
                        }
                        t[0] = Ty::MaybeNull { map: m, id: pc as u32 };
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    t[10] = Ty::Fp(0);
    t
}

/// A conditional jump's states (taken, not taken): `if rX == 0` and `if
/// rX != 0` on a lookup's result make it and its copies a value pointer
/// where it is not NULL.
fn ty_edges(t: TyState, ins: Insn) -> (TyState, TyState) {
    let op = ins.code & 0xf0;
    if ins.class() == CLASS_JMP && ins.code & 0x08 == 0 && ins.imm == 0 && (op == 0x10 || op == 0x50) {
        if let Ty::MaybeNull { map, .. } = t[ins.dst()] {
            let (mut non, mut null) = (t, t);
            for i in 0..11 {
                if t[i] == t[ins.dst()] {
                    non[i] = Ty::Value { map, off: 0 };
                    null[i] = Ty::Unknown;
                }
            }
            return if op == 0x10 { (null, non) } else { (non, null) };
        }
    }
    (t, t)
}

/// What registers hold at the start of each block (None: no path reaches
/// it). Forward dataflow; a register keeps what every path agrees on.
fn ty_registers(cx: &Cx, p: &crate::vm::Program, start: usize, end: usize, leaders: &BTreeSet<usize>) -> HashMap<usize, Option<TyState>> {
    let ls: Vec<usize> = leaders.iter().copied().collect();
    let mut state: HashMap<usize, Option<TyState>> = ls.iter().map(|&l| (l, None)).collect();
    state.insert(start, Some(TY_UNKNOWN));
    let mut changed = true;
    while changed {
        changed = false;
        for (i, &l) in ls.iter().enumerate() {
            let Some(mut t) = state[&l] else { continue };
            let block_end = ls.get(i + 1).copied().unwrap_or(end);
            let mut edges: Vec<(usize, TyState)> = Vec::new();
            let mut falls = true;
            let mut pc = l;
            while pc < block_end {
                let ins = p.insns[pc];
                let class = ins.class();
                if (class == CLASS_JMP || class == CLASS_JMP32) && !ins.is_call() {
                    let op = ins.code & 0xf0;
                    if op == 0x90 {
                        falls = false;
                    } else {
                        let off = if op == 0x00 && class == CLASS_JMP32 { ins.imm as i64 } else { ins.off as i64 };
                        let target = (pc as i64 + off + 1) as usize;
                        if op == 0x00 {
                            edges.push((target, t));
                            falls = false;
                        } else {
                            let (taken, not) = ty_edges(t, ins);
                            edges.push((target, taken));
                            t = not;
                        }
                    }
                } else {
                    t = ty_after(cx, p, pc, t);
                }
                pc += if ins.is_ld_imm64() { 2 } else { 1 };
            }
            if falls && block_end < end {
                edges.push((block_end, t));
            }
            for (target, e) in edges {
                if let Some(s) = state.get_mut(&target) {
                    let new = match s {
                        None => e,
                        Some(old) => old.meet(&e),
                    };
                    if *s != Some(new) {
                        *s = Some(new);
                        changed = true;
                    }
                }
            }
        }
    }
    state
}

/// The context registers after an instruction.
fn ctx_after(m: u16, ins: Insn) -> u16 {
    let dst = ins.dst();
    let src = (ins.regs >> 4) as usize;
    match ins.class() {
        CLASS_ALU64 if ins.code == 0xbf && ins.off == 0 => (m & !(1 << dst)) | (((m >> src) & 1) << dst),
        CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX => m & !(1 << dst),
        CLASS_STX if ins.code & 0xe0 == MODE_ATOMIC => m & !(1 << src) & !1,
        CLASS_JMP | CLASS_JMP32 if ins.is_call() => m & !0b11_1111,
        _ => m,
    }
}

/// The regions a bounds check tries inline.
#[derive(Clone, Copy)]
enum Region {
    Packet,
    Maps,
    Stack,
}

/// A function the code calls through a relocation.
fn import(func: &mut Function, ns: u32, index: u32, sig: Signature) -> cranelift_codegen::ir::FuncRef {
    let name = func.declare_imported_user_function(UserExternalName::new(ns, index));
    let signature = func.import_signature(sig);
    func.import_function(ExtFuncData { name: ExternalName::user(name), signature, colocated: false })
}

#[allow(clippy::too_many_arguments)]
fn translate(
    cc: CallConv,
    func: &mut Function,
    fbc: &mut FunctionBuilderContext,
    p: &crate::vm::Program,
    start: usize,
    end: usize,
    ids: &HashMap<usize, u32>,
    arrays: &HashMap<usize, ArrayLayout>,
    rodata: &[(usize, u64)],
    map_sizes: &[(usize, usize)],
    cx: &Cx,
) -> Result<Stats, String> {
    let mut funcrefs = HashMap::new();
    for (&e, &id) in ids {
        funcrefs.insert(e, import(func, NS_FUNC, id, bpf_sig(cc)));
    }
    let hosts = [import(func, NS_HOST, HOST_CTX, host_sig(cc, 2)), import(func, NS_HOST, HOST_HELPER, host_sig(cc, 9)), import(func, NS_HOST, HOST_MAP, host_sig(cc, 6))];
    let bpf_sig = func.import_signature(bpf_sig(cc));
    let mut b = FunctionBuilder::new(func, fbc);

    // Leaders: the entry, jump targets, and what follows a jump or exit.
    let mut leaders = BTreeSet::from([start]);
    let mut pc = start;
    while pc < end {
        let ins = p.insns[pc];
        let class = ins.class();
        if class == CLASS_JMP || class == CLASS_JMP32 {
            let op = ins.code & 0xf0;
            if op != 0x80 {
                let off = if op == 0x00 && class == CLASS_JMP32 { ins.imm as i64 } else { ins.off as i64 };
                if op != 0x90 {
                    let t = (pc as i64 + off + 1) as usize;
                    if t < start || t >= end {
                        return Err(format!("instruction {pc}: jump out of its function"));
                    }
                    leaders.insert(t);
                }
                if pc + 1 < end {
                    leaders.insert(pc + 1);
                }
            }
        }
        pc += if ins.is_ld_imm64() { 2 } else { 1 };
    }
    let blocks: HashMap<usize, cranelift_codegen::ir::Block> = leaders.iter().map(|&l| (l, b.create_block())).collect();
    let entry = blocks[&start];
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let regs: [Variable; 11] = std::array::from_fn(|_| b.declare_var(types::I64));
    let scratch = b.declare_var(types::I64);
    let params = b.block_params(entry).to_vec();
    let env = params[0];
    let zero = b.ins().iconst(types::I64, 0);
    for (i, r) in regs.iter().enumerate() {
        let v = match i {
            1..=5 => params[i],
            10 => params[6],
            _ => zero,
        };
        b.def_var(*r, v);
    }
    b.def_var(scratch, zero);
    let bounds: [Variable; 2] = std::array::from_fn(|_| b.declare_var(types::I64));
    let ctx_in = ctx_registers(p, start, end, &leaders);
    let ty_in = ty_registers(cx, p, start, end, &leaders);
    let fault = b.create_block();
    b.set_cold_block(fault);
    let proven = crate::ranges::packet_proven(&p.insns, start, end, ctx_in[&start]);
    let mut t = Tr { b, regs, scratch, bounds, proven, ctx_regs: ctx_in[&start], fp_off: FP_UNKNOWN, map_sizes, block_end: leaders.range(start + 1..).next().copied().unwrap_or(end), runs: Vec::new(), prog: p, env, fault, hosts, rodata, bpf_sig, arrays, block_start: start, cx, ty: TY_UNKNOWN, stats: Stats::default() };
    t.load_bounds();

    let mut terminated = false;
    let mut pc = start;
    while pc < end {
        if pc != start && blocks.contains_key(&pc) {
            if !terminated {
                t.b.ins().jump(blocks[&pc], &[]);
            }
            t.b.switch_to_block(blocks[&pc]);
            t.block_start = pc;
            t.block_end = leaders.range(pc + 1..).next().copied().unwrap_or(end);
            t.runs.clear();
            t.ctx_regs = ctx_in[&pc];
            t.fp_off = FP_UNKNOWN;
            t.ty = ty_in.get(&pc).copied().flatten().unwrap_or(TY_UNKNOWN);
        } else if terminated {
            // Unreachable until the next leader.
            pc += 1;
            continue;
        }
        let ins = p.insns[pc];
        terminated = t.insn(p, pc, ins, &blocks, &funcrefs)?;
        t.ctx_regs = ctx_after(t.ctx_regs, ins);
        t.fp_off = fp_after(t.fp_off, ins);
        t.ty = ty_after(cx, p, pc, t.ty);
        pc += if ins.is_ld_imm64() { 2 } else { 1 };
    }
    if !terminated {
        let z = t.b.ins().iconst(types::I64, 0);
        t.b.ins().return_(&[z]);
    }
    t.b.switch_to_block(t.fault);
    let z = t.b.ins().iconst(types::I64, 0);
    t.b.ins().return_(&[z]);
    t.b.seal_all_blocks();
    t.b.finalize();
    Ok(t.stats)
}

impl Tr<'_, '_> {
    fn get(&mut self, r: usize) -> Value {
        self.b.use_var(self.regs[r])
    }

    fn set(&mut self, r: usize, v: Value) {
        self.b.def_var(self.regs[r], v);
    }

    fn env_field(&mut self, off: i32) -> Value {
        self.b.ins().load(types::I64, flags(), self.env, off)
    }

    fn host(&mut self, which: u32, args: &[Value]) -> Value {
        let call = self.b.ins().call(self.hosts[which as usize - 1], args);
        self.b.inst_results(call)[0]
    }

    /// The address of a map's values plus `off`, through a relocation.
    fn map_addr(&mut self, map: usize, off: i64) -> Value {
        let name = self.b.func.declare_imported_user_function(UserExternalName::new(NS_MAP, map as u32));
        let gv = self.b.func.create_global_value(GlobalValueData::Symbol { name: ExternalName::user(name), offset: off.into(), colocated: false, tls: false });
        self.b.ins().symbol_value(types::I64, gv)
    }

    /// The one emitter of bounds checks: on return, code continues where
    /// [addr, addr+size) may be accessed. An access through R10 at a
    /// constant offset inside the frame needs none: R10 is read-only and
    /// every frame lies inside the stack.
    fn check(&mut self, pc: usize, base_reg: usize, off: i16, addr: Value, size: i64, write: bool) {
        if self.proven[pc] {
            return;
        }
        if self.typed_ok(base_reg, off as i64, size, write) {
            self.stats.elided_checks += 1;
            return;
        }
        if let Some(k) = self.fp_off.get(base_reg).copied().flatten() {
            let at = k + off as i64;
            if at >= -(STACK_SIZE as i64) && at + size <= 0 {
                return;
            }
        }
        // A run of accesses at constant offsets from the same register in
        // this block is checked once, as one range, at its first access;
        // each access then tests the outcome, and makes its own check only
        // when the range was not found whole in one region.
        self.runs.retain(|&(_, last, _)| pc <= last);
        if !self.runs.iter().any(|&(r, _, _)| r == base_reg) {
            if let Some((lo, hi, last)) = self.run_from(pc, base_reg) {
                let flag = self.b.declare_var(types::I8);
                let base = self.get(base_reg);
                let a = self.b.ins().iadd_imm(base, lo);
                let inside = self.in_region(a, hi - lo);
                self.b.def_var(flag, inside);
                self.runs.push((base_reg, last, flag));
            }
        }
        if let Some(&(_, _, flag)) = self.runs.iter().find(|&&(r, _, _)| r == base_reg) {
            let proven = self.b.use_var(flag);
            let ok = self.b.create_block();
            let own = self.b.create_block();
            self.b.ins().brif(proven, ok, &[], own, &[]);
            self.b.switch_to_block(own);
            self.b.set_cold_block(own);
            self.check_one(pc, base_reg, addr, size, write);
            self.b.ins().jump(ok, &[]);
            self.b.switch_to_block(ok);
            return;
        }
        self.check_one(pc, base_reg, addr, size, write);
    }

    /// The run of accesses through `reg` at constant offsets that starts
    /// at `pc`, up to the block's end, a write to the register or a call:
    /// its lowest offset, highest end and last instruction, when it has
    /// more than one access.
    fn run_from(&self, pc: usize, reg: usize) -> Option<(i64, i64, usize)> {
        let (mut lo, mut hi, mut last, mut n) = (i64::MAX, i64::MIN, pc, 0);
        let mut i = pc;
        while i < self.block_end {
            let ins = self.prog.insns[i];
            let class = ins.class();
            let through = !self.proven[i]
                && match class {
                    CLASS_LDX => (ins.regs >> 4) as usize == reg && !(ins.size() == 4 && ins.code & 0xe0 == MODE_MEM && self.ctx_regs & (1 << reg) != 0),
                    CLASS_ST | CLASS_STX => ins.dst() == reg,
                    _ => false,
                };
            if through {
                lo = lo.min(ins.off as i64);
                hi = hi.max(ins.off as i64 + ins.size() as i64);
                last = i;
                n += 1;
            }
            let writes = match class {
                CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX => ins.dst() == reg,
                CLASS_STX => ins.code & 0xe0 == MODE_ATOMIC && ((ins.regs >> 4) as usize == reg || reg == 0),
                CLASS_JMP | CLASS_JMP32 => true, // a call, or the block's end
                _ => false,
            };
            if writes {
                break;
            }
            i += if ins.is_ld_imm64() { 2 } else { 1 };
        }
        (n > 1).then_some((lo, hi, last))
    }

    /// Whether [addr, addr+size) lies inside the packet, the pool of map
    /// values or the stack (all writable), as an i8.
    fn in_region(&mut self, addr: Value, size: i64) -> Value {
        let done = self.b.create_block();
        self.b.append_block_param(done, types::I8);
        let yes = self.b.ins().iconst(types::I8, 1);
        for region in [Region::Packet, Region::Maps, Region::Stack] {
            let (lo, hi) = self.region_bounds(region);
            self.branch_if_inside(addr, lo, hi, size, done, &[yes.into()]);
        }
        let no = self.b.ins().iconst(types::I8, 0);
        self.b.ins().jump(done, &[no.into()]);
        self.b.switch_to_block(done);
        self.b.block_params(done)[0]
    }

    /// A region's bounds. The packet's live in registers; the pool of map
    /// values never moves (its bounds are relocations); the stack's are
    /// read when needed.
    fn region_bounds(&mut self, r: Region) -> (Value, Value) {
        match r {
            Region::Packet => (self.b.use_var(self.bounds[0]), self.b.use_var(self.bounds[1])),
            Region::Maps => (self.pool_bound(0), self.pool_bound(1)),
            Region::Stack => (self.env_field(ENV_STACK_LO), self.env_field(ENV_STACK_HI)),
        }
    }

    /// Goes to `hit` when lo <= addr <= hi - size, with two compares, each
    /// its own branch; code goes on where it is not.
    fn branch_if_inside(&mut self, addr: Value, lo: Value, hi: Value, size: i64, hit: cranelift_codegen::ir::Block, args: &[cranelift_codegen::ir::BlockArg]) {
        let last = self.b.ins().iadd_imm(hi, -size);
        let above_lo = self.b.create_block();
        let miss = self.b.create_block();
        let below = self.b.ins().icmp(IntCC::UnsignedLessThan, addr, lo);
        self.b.ins().brif(below, miss, &[], above_lo, &[]);
        self.b.switch_to_block(above_lo);
        let past = self.b.ins().icmp(IntCC::UnsignedGreaterThan, addr, last);
        self.b.ins().brif(past, miss, &[], hit, args);
        self.b.switch_to_block(miss);
    }

    /// One access's check, region by region.
    fn check_one(&mut self, pc: usize, base_reg: usize, addr: Value, size: i64, write: bool) {
        let ok = self.b.create_block();
        // Through R10 (a frame at a variable offset) the stack comes first;
        // otherwise the packet, which loops walk, then map values.
        let order = if base_reg == 10 { [Region::Stack, Region::Packet, Region::Maps] } else { [Region::Packet, Region::Maps, Region::Stack] };
        for region in order {
            let (lo, hi) = self.region_bounds(region);
            self.branch_if_inside(addr, lo, hi, size, ok, &[]);
        }
        // Read-only data, for reads.
        if !write {
            for i in 0..self.rodata.len() {
                let (map, len) = self.rodata[i];
                let lo = self.map_addr(map, 0);
                let hi = self.map_addr(map, len as i64);
                self.branch_if_inside(addr, lo, hi, size, ok, &[]);
            }
        }
        // Outside every region: the run ends with a fault, no call made, so
        // that no value of a loop needs to survive a call.
        self.b.set_cold_block(self.b.current_block().unwrap());
        let one = self.b.ins().iconst(types::I64, 1);
        let pcv = self.b.ins().iconst(types::I64, pc as i64);
        let sz = self.b.ins().iconst(types::I64, size);
        let wr = self.b.ins().iconst(types::I64, write as i64);
        for (v, off) in [(pcv, ENV_FAULT_PC), (addr, ENV_FAULT_ADDR), (sz, ENV_FAULT_SIZE), (wr, ENV_FAULT_WRITE), (one, ENV_FAULT)] {
            self.b.ins().store(flags(), v, self.env, off);
        }
        self.b.ins().jump(self.fault, &[]);
        self.b.switch_to_block(ok);
    }

    /// The pool of writable map values' start (0) or end (1).
    fn pool_bound(&mut self, which: u32) -> Value {
        let name = self.b.func.declare_imported_user_function(UserExternalName::new(NS_POOL, which));
        let gv = self.b.func.create_global_value(GlobalValueData::Symbol { name: ExternalName::user(name), offset: 0.into(), colocated: false, tls: false });
        self.b.ins().symbol_value(types::I64, gv)
    }

    fn after_call(&mut self) {
        let f = self.env_field(ENV_FAULT);
        let cont = self.b.create_block();
        self.b.ins().brif(f, self.fault, &[], cont, &[]);
        self.b.switch_to_block(cont);
        self.load_bounds();
    }

    /// The packet's bounds, kept in registers; a helper may move them, so
    /// they are read again after every call.
    fn load_bounds(&mut self) {
        for (i, off) in [ENV_PKT_LO, ENV_PKT_HI].into_iter().enumerate() {
            let v = self.env_field(off);
            self.b.def_var(self.bounds[i], v);
        }
    }

    fn mem_type(size: usize) -> cranelift_codegen::ir::Type {
        match size {
            1 => types::I8,
            2 => types::I16,
            4 => types::I32,
            _ => types::I64,
        }
    }

    /// Translates one instruction; true when it ends its block.
    fn insn(
        &mut self,
        p: &crate::vm::Program,
        pc: usize,
        ins: Insn,
        blocks: &HashMap<usize, cranelift_codegen::ir::Block>,
        funcs: &HashMap<usize, cranelift_codegen::ir::FuncRef>,
    ) -> Result<bool, String> {
        let dst = ins.dst();
        let src = (ins.regs >> 4) as usize;
        let class = ins.class();
        match class {
            CLASS_ALU | CLASS_ALU64 => {
                let is64 = class == CLASS_ALU64;
                let ty = if is64 { types::I64 } else { types::I32 };
                let op = ins.code & 0xf0;
                let d64 = self.get(dst);
                let v = if op == 0xd0 {
                    let width = ins.imm;
                    let swap = is64 || ins.code & 0x08 != 0;
                    match width {
                        16 | 32 => {
                            let t = if width == 16 { types::I16 } else { types::I32 };
                            let r = self.b.ins().ireduce(t, d64);
                            let r = if swap { self.b.ins().bswap(r) } else { r };
                            self.b.ins().uextend(types::I64, r)
                        }
                        _ => {
                            if swap {
                                self.b.ins().bswap(d64)
                            } else {
                                d64
                            }
                        }
                    }
                } else {
                    let d = if is64 { d64 } else { self.b.ins().ireduce(types::I32, d64) };
                    let x = if ins.code & 0x08 != 0 {
                        let s = self.get(src);
                        if is64 { s } else { self.b.ins().ireduce(types::I32, s) }
                    } else {
                        self.b.ins().iconst(ty, if is64 { ins.imm as i64 } else { ins.imm as u32 as i64 })
                    };
                    let r = self.alu(op, ins.off, ty, d, x)?;
                    if is64 { r } else { self.b.ins().uextend(types::I64, r) }
                };
                self.set(dst, v);
                Ok(false)
            }
            CLASS_LD => {
                if !ins.is_ld_imm64() {
                    return Err(format!("instruction {pc}: legacy packet loads are not supported"));
                }
                // Map values' addresses are relocations; other 64-bit
                // loads (numbers, map handles, functions) are constants.
                let v = if ins.src() == PSEUDO_MAP_VALUE {
                    self.map_addr(ins.imm as usize, p.insns[pc + 1].imm as u32 as i64)
                } else {
                    self.b.ins().iconst(types::I64, p.imm64[pc] as i64)
                };
                self.set(dst, v);
                Ok(false)
            }
            CLASS_LDX => {
                if let Some(v) = self.fold_load(src, ins) {
                    self.set(dst, v);
                    return Ok(false);
                }
                let size = ins.size();
                let base = self.get(src);
                let addr = self.b.ins().iadd_imm(base, ins.off as i64);
                if size == 4 && ins.code & 0xe0 == MODE_MEM && self.ctx_regs & (1 << src) != 0 && matches!(ins.off, 0 | 4 | 8 | 12 | 16 | 20) {
                    // A field of the context: data fields read as full
                    // pointers, as the kernel's verifier rewrites them.
                    let v = match ins.off {
                        0 => self.env_field(ENV_PKT_DATA),
                        4 => self.b.use_var(self.bounds[1]),
                        8 => self.b.use_var(self.bounds[0]),
                        _ => self.b.ins().uload32(flags(), base, ins.off as i32),
                    };
                    self.set(dst, v);
                    return Ok(false);
                }
                if size == 4 && ins.code & 0xe0 == MODE_MEM && src != 10 && !self.typed_ok(src, ins.off as i64, 4, false) {
                    // A 32-bit load may be of the context, whose data fields
                    // read as full pointers.
                    let ctx = self.env_field(ENV_CTX);
                    let d = self.b.ins().isub(addr, ctx);
                    let is_ctx = self.b.ins().icmp_imm(IntCC::UnsignedLessThan, d, 24);
                    let ctx_blk = self.b.create_block();
                    let mem_blk = self.b.create_block();
                    let join = self.b.create_block();
                    self.b.ins().brif(is_ctx, ctx_blk, &[], mem_blk, &[]);
                    self.b.switch_to_block(ctx_blk);
                    let v = self.host(HOST_CTX, &[self.env, d]);
                    self.b.def_var(self.scratch, v);
                    self.b.ins().jump(join, &[]);
                    self.b.switch_to_block(mem_blk);
                    self.check(pc, src, ins.off, addr, 4, false);
                    let v = self.b.ins().uload32(flags(), addr, 0);
                    self.b.def_var(self.scratch, v);
                    self.b.ins().jump(join, &[]);
                    self.b.switch_to_block(join);
                    let v = self.b.use_var(self.scratch);
                    self.set(dst, v);
                    return Ok(false);
                }
                self.check(pc, src, ins.off, addr, size as i64, false);
                let sx = ins.code & 0xe0 == MODE_MEMSX;
                let v = match (size, sx) {
                    (1, false) => self.b.ins().uload8(types::I64, flags(), addr, 0),
                    (2, false) => self.b.ins().uload16(types::I64, flags(), addr, 0),
                    (4, false) => self.b.ins().uload32(flags(), addr, 0),
                    (1, true) => self.b.ins().sload8(types::I64, flags(), addr, 0),
                    (2, true) => self.b.ins().sload16(types::I64, flags(), addr, 0),
                    (4, true) => self.b.ins().sload32(flags(), addr, 0),
                    _ => self.b.ins().load(types::I64, flags(), addr, 0),
                };
                self.set(dst, v);
                Ok(false)
            }
            CLASS_ST | CLASS_STX => {
                if let Ty::Value { map, .. } | Ty::At { map, .. } = self.ty[dst] {
                    if self.cx.maps[map as usize].named {
                        return Err(format!("instruction {pc}: writes map {}, which --const-map names constant", self.cx.vm.maps[map as usize].def.name));
                    }
                }
                let size = ins.size();
                let base = self.get(dst);
                let addr = self.b.ins().iadd_imm(base, ins.off as i64);
                self.check(pc, dst, ins.off, addr, size as i64, true);
                if class == CLASS_STX && ins.code & 0xe0 == MODE_ATOMIC {
                    return self.atomic(pc, ins, addr, size, src).map(|_| false);
                }
                let v = if class == CLASS_ST { self.b.ins().iconst(types::I64, ins.imm as i64) } else { self.get(src) };
                let ty = Self::mem_type(size);
                let v = if ty == types::I64 { v } else { self.b.ins().ireduce(ty, v) };
                self.b.ins().store(flags(), v, addr, 0);
                Ok(false)
            }
            CLASS_JMP | CLASS_JMP32 => {
                let op = ins.code & 0xf0;
                match op {
                    0x00 => {
                        let off = if class == CLASS_JMP32 { ins.imm as i64 } else { ins.off as i64 };
                        self.b.ins().jump(blocks[&((pc as i64 + off + 1) as usize)], &[]);
                        Ok(true)
                    }
                    0x90 => {
                        let r0 = self.get(0);
                        self.b.ins().return_(&[r0]);
                        Ok(true)
                    }
                    0x80 => {
                        if let (true, 2 | 3, Ty::Map(m)) = (ins.src() != PSEUDO_CALL, ins.imm, self.ty[1]) {
                            if self.cx.maps[m as usize].named {
                                return Err(format!("instruction {pc}: updates map {}, which --const-map names constant", self.cx.vm.maps[m as usize].def.name));
                            }
                        }
                        let fp = self.get(10);
                        let args: Vec<Value> = (1..=5).map(|r| self.get(r)).collect();
                        if ins.src() == PSEUDO_CALL {
                            let target = (pc as i64 + ins.imm as i64 + 1) as usize;
                            let f = *funcs.get(&target).ok_or_else(|| format!("instruction {pc}: call to {target}, not a function"))?;
                            let callee_fp = self.b.ins().iadd_imm(fp, STACK_SIZE as i64);
                            let mut a = vec![self.env];
                            a.extend_from_slice(&args);
                            a.push(callee_fp);
                            let call = self.b.ins().call(f, &a);
                            let r = self.b.inst_results(call)[0];
                            self.set(0, r);
                        } else if let Some(r) = self.inline_csum_diff(p, pc, ins) {
                            self.set(0, r);
                            return Ok(false);
                        } else if let Some(r) = self.inline_array_lookup(p, pc, ins) {
                            self.set(0, r);
                            return Ok(false);
                        } else if let Some(r) = self.map_call(p, pc, ins) {
                            self.set(0, r);
                            return Ok(false);
                        } else {
                            let id = self.b.ins().iconst(types::I64, ins.imm as i64);
                            let pcv = self.b.ins().iconst(types::I64, pc as i64);
                            let mut a = vec![self.env, id, pcv, fp];
                            a.extend_from_slice(&args);
                            let r = self.host(HOST_HELPER, &a);
                            self.set(0, r);
                            if ins.imm == 12 {
                                self.after_call();
                                self.tail_call(args[0], fp);
                                return Ok(false);
                            }
                        }
                        self.after_call();
                        Ok(false)
                    }
                    _ => {
                        let (a, x) = if class == CLASS_JMP32 {
                            let a = self.get(dst);
                            let a = self.b.ins().ireduce(types::I32, a);
                            let x = if ins.code & 0x08 != 0 {
                                let s = self.get(src);
                                self.b.ins().ireduce(types::I32, s)
                            } else {
                                self.b.ins().iconst(types::I32, ins.imm as u32 as i64)
                            };
                            (a, x)
                        } else {
                            let a = self.get(dst);
                            let x = if ins.code & 0x08 != 0 { self.get(src) } else { self.b.ins().iconst(types::I64, ins.imm as i64) };
                            (a, x)
                        };
                        let c = if op == 0x40 {
                            let m = self.b.ins().band(a, x);
                            self.b.ins().icmp_imm(IntCC::NotEqual, m, 0)
                        } else {
                            let cc = match op {
                                0x10 => IntCC::Equal,
                                0x20 => IntCC::UnsignedGreaterThan,
                                0x30 => IntCC::UnsignedGreaterThanOrEqual,
                                0x50 => IntCC::NotEqual,
                                0x60 => IntCC::SignedGreaterThan,
                                0x70 => IntCC::SignedGreaterThanOrEqual,
                                0xa0 => IntCC::UnsignedLessThan,
                                0xb0 => IntCC::UnsignedLessThanOrEqual,
                                0xc0 => IntCC::SignedLessThan,
                                0xd0 => IntCC::SignedLessThanOrEqual,
                                _ => return Err(format!("instruction {pc}: unknown jump {:#04x}", ins.code)),
                            };
                            self.b.ins().icmp(cc, a, x)
                        };
                        let taken = blocks[&((pc as i64 + ins.off as i64 + 1) as usize)];
                        let next = blocks[&(pc + 1)];
                        self.b.ins().brif(c, taken, &[], next, &[]);
                        Ok(true)
                    }
                }
            }
            _ => Err(format!("instruction {pc}: unknown opcode {:#04x}", ins.code)),
        }
    }

    /// After bpf_tail_call: when it was taken, run the target with the
    /// same context and frame and return what it returns.
    fn tail_call(&mut self, ctx: Value, fp: Value) {
        let tail = self.env_field(ENV_TAIL);
        let go = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(tail, go, &[], cont, &[]);
        self.b.switch_to_block(go);
        let z = self.b.ins().iconst(types::I64, 0);
        self.b.ins().store(flags(), z, self.env, ENV_TAIL);
        let call = self.b.ins().call_indirect(self.bpf_sig, tail, &[self.env, ctx, z, z, z, z, fp]);
        let r = self.b.inst_results(call)[0];
        self.b.ins().return_(&[r]);
        self.b.switch_to_block(cont);
        self.load_bounds();
    }

    /// The map R1 holds at `pc`, when an ld_imm64 of it in the same block
    /// put it there and nothing wrote R1 since.
    fn map_in_r1(&self, p: &crate::vm::Program, pc: usize) -> Option<usize> {
        let mut i = pc;
        while i > self.block_start {
            i -= 1;
            let ins = p.insns[i];
            if i > 0 && p.insns[i - 1].is_ld_imm64() {
                continue; // the second half of a 64-bit load
            }
            if ins.is_call() {
                return None;
            }
            let writes_r1 = ins.dst() == 1 && matches!(ins.class(), CLASS_ALU | CLASS_ALU64 | CLASS_LD | CLASS_LDX)
                || (ins.class() == CLASS_STX && ins.code & 0xe0 == MODE_ATOMIC && (ins.regs >> 4) as usize == 1);
            if writes_r1 {
                return (ins.is_ld_imm64() && ins.src() == PSEUDO_MAP_FD).then_some(ins.imm as usize);
            }
        }
        None
    }

    /// bpf_map_lookup_elem, update_elem and delete_elem on a map known
    /// here: key and value checked inline, then the map's own operation,
    /// which can neither fault nor move the packet, so nothing is read
    /// again after it.
    fn map_call(&mut self, p: &crate::vm::Program, pc: usize, ins: Insn) -> Option<Value> {
        if !matches!(ins.imm, 1..=3) {
            return None;
        }
        let map = self.map_in_r1(p, pc)?;
        let (ks, vs) = *self.map_sizes.get(map)?;
        let key = self.get(2);
        self.check(pc, 2, 0, key, ks as i64, false);
        let z = self.b.ins().iconst(types::I64, 0);
        let (value, flags) = if ins.imm == 2 {
            let v = self.get(3);
            self.check(pc, 3, 0, v, vs as i64, false);
            (v, self.get(4))
        } else {
            (z, z)
        };
        let op = self.b.ins().iconst(types::I64, ins.imm as i64);
        let m = self.b.ins().iconst(types::I64, map as i64);
        Some(self.host(HOST_MAP, &[self.env, op, m, key, value, flags]))
    }

    /// bpf_map_lookup_elem on an array, compiled inline: bounds-checked
    /// index to value pointer, NULL past the end.
    fn inline_array_lookup(&mut self, p: &crate::vm::Program, pc: usize, ins: Insn) -> Option<Value> {
        if ins.imm != 1 || !self.cx.opts.inline_helpers {
            return None;
        }
        let map = self.map_in_r1(p, pc)?;
        let a = *self.arrays.get(&map)?;
        self.stats.inlined_lookups += 1;
        let key = self.get(2);
        self.check(pc, 2, 0, key, 4, false);
        let idx = self.b.ins().uload32(flags(), key, 0);
        let inb = self.b.ins().icmp_imm(IntCC::UnsignedLessThan, idx, a.slots as i64);
        let off = self.b.ins().imul_imm(idx, a.elem as i64);
        let mut base = self.map_addr(map, 0);
        if a.percpu {
            let cpu = self.env_field(ENV_CPU);
            let c = self.b.ins().imul_imm(cpu, a.per_cpu as i64);
            base = self.b.ins().iadd(base, c);
        }
        let ptr = self.b.ins().iadd(base, off);
        let z = self.b.ins().iconst(types::I64, 0);
        Some(self.b.ins().select(inb, ptr, z))
    }

    /// Whether an access through `reg` at `off` lies inside one value of a
    /// map, as the register's type proves: then it needs no check.
    fn typed_ok(&self, reg: usize, off: i64, size: i64, write: bool) -> bool {
        if !self.cx.opts.typed_values {
            return false;
        }
        let (map, k, whole) = match self.ty[reg] {
            Ty::Value { map, off } => (map, off, false),
            Ty::At { map, off } => (map, off, true),
            _ => return false,
        };
        let info = self.cx.maps[map as usize];
        let Some(bound) = info.typed else { return false };
        if write && info.readonly {
            return false; // must fault, as the check makes it
        }
        let Some(a) = k.checked_add(off) else { return false };
        if a < 0 || size <= 0 {
            return false;
        }
        if whole {
            // Known from the values' start: inside one element.
            let Some((elem, slots)) = info.array else { return false };
            let (i, w) = (a / elem as i64, a % elem as i64);
            i < slots as i64 && w + size <= bound as i64
        } else {
            a + size <= bound as i64
        }
    }

    /// A load from a constant map at an address known here: the value it
    /// reads, from the map as it is now.
    fn fold_load(&mut self, reg: usize, ins: Insn) -> Option<Value> {
        if !self.cx.opts.const_maps {
            return None;
        }
        let mode = ins.code & 0xe0;
        if mode != MODE_MEM && mode != MODE_MEMSX {
            return None;
        }
        let Ty::At { map, off } = self.ty[reg] else { return None };
        let info = self.cx.maps[map as usize];
        if !info.constant {
            return None;
        }
        let (elem, slots) = info.array?;
        let size = ins.size() as i64;
        let a = off.checked_add(ins.off as i64)?;
        if a < 0 {
            return None;
        }
        let (idx, w) = ((a / elem as i64) as usize, a % elem as i64);
        let m = &self.cx.vm.maps[map as usize];
        if idx >= slots || w + size > m.def.value_size as i64 {
            return None;
        }
        let bytes = m.get(&(idx as u32).to_le_bytes())?;
        let b = bytes.get(w as usize..(w + size) as usize)?;
        let mut buf = [0u8; 8];
        buf[..b.len()].copy_from_slice(b);
        let mut v = u64::from_le_bytes(buf);
        if mode == MODE_MEMSX && size < 8 {
            let sh = 64 - 8 * size as u32;
            v = (((v << sh) as i64) >> sh) as u64;
        }
        self.stats.folded_loads += 1;
        self.stats.folded_maps.insert(map as usize);
        Some(self.b.ins().iconst(types::I64, v as i64))
    }

    /// bpf_csum_diff with sizes this block sets to constants (multiples
    /// of 4, 512 bytes together at most), inline: as helpers::csum_diff_of
    /// computes it under the semantics of the kernel the runtime behaves
    /// as now, which the code then holds.
    fn inline_csum_diff(&mut self, p: &crate::vm::Program, pc: usize, ins: Insn) -> Option<Value> {
        if ins.imm != 28 || !self.cx.opts.inline_helpers {
            return None;
        }
        let fs = reg_const(p, self.block_start, pc, 2)? as u32 as usize;
        let ts = reg_const(p, self.block_start, pc, 4)? as u32 as usize;
        if (fs | ts) & 3 != 0 || fs + ts > 512 {
            return None;
        }
        let folded = self.cx.vm.sem.csum_diff_folded;
        let (from, to) = (self.get(1), self.get(3));
        if fs > 0 {
            self.check(pc, 1, 0, from, fs as i64, false);
        }
        if ts > 0 {
            self.check(pc, 3, 0, to, ts as i64, false);
        }
        let seed = self.get(5);
        let seed = self.b.ins().band_imm(seed, 0xffff_ffff);
        let r = if !folded {
            // One sum over ~from, then to, from seed; carries folded in.
            let mut sum = seed;
            for i in 0..fs / 4 {
                let w = self.b.ins().uload32(flags(), from, 4 * i as i32);
                let w = self.b.ins().bxor_imm(w, 0xffff_ffff);
                sum = self.b.ins().iadd(sum, w);
            }
            sum = self.csum_words(to, ts, sum);
            self.fold32(sum)
        } else {
            let r = match (fs > 0, ts > 0) {
                (true, true) => {
                    let a = self.csum_words(to, ts, seed);
                    let a = self.fold32(a);
                    let z = self.b.ins().iconst(types::I64, 0);
                    let b = self.csum_words(from, fs, z);
                    let b = self.fold32(b);
                    let b = self.b.ins().bxor_imm(b, 0xffff_ffff);
                    let s = self.b.ins().iadd(a, b);
                    self.fold32(s)
                }
                (false, true) => {
                    let a = self.csum_words(to, ts, seed);
                    self.fold32(a)
                }
                (true, false) => {
                    let ns = self.b.ins().bxor_imm(seed, 0xffff_ffff);
                    let a = self.csum_words(from, fs, ns);
                    let a = self.fold32(a);
                    self.b.ins().bxor_imm(a, 0xffff_ffff)
                }
                (false, false) => seed,
            };
            // from32to16
            let mut r = r;
            for _ in 0..2 {
                let lo = self.b.ins().band_imm(r, 0xffff);
                let hi = self.b.ins().ushr_imm(r, 16);
                r = self.b.ins().iadd(lo, hi);
            }
            r
        };
        self.stats.inlined_csum += 1;
        self.stats.csum_folded = Some(folded);
        Some(r)
    }

    /// `sum` plus the little-endian u32 words of [addr, addr+len), in 64 bits.
    fn csum_words(&mut self, addr: Value, len: usize, mut sum: Value) -> Value {
        for i in 0..len / 4 {
            let w = self.b.ins().uload32(flags(), addr, 4 * i as i32);
            sum = self.b.ins().iadd(sum, w);
        }
        sum
    }

    /// A sum of at most 2^7 words folded to 32 bits with its carries: two
    /// rounds always suffice.
    fn fold32(&mut self, mut sum: Value) -> Value {
        for _ in 0..2 {
            let lo = self.b.ins().band_imm(sum, 0xffff_ffff);
            let hi = self.b.ins().ushr_imm(sum, 32);
            sum = self.b.ins().iadd(lo, hi);
        }
        sum
    }

    fn alu(&mut self, op: u8, off: i16, ty: cranelift_codegen::ir::Type, d: Value, x: Value) -> Result<Value, String> {
        let i = self.b.ins();
        Ok(match op {
            0x00 => i.iadd(d, x),
            0x10 => i.isub(d, x),
            0x20 => i.imul(d, x),
            0x30 | 0x90 => return Ok(self.divmod(op, off == 1, ty, d, x)),
            0x40 => i.bor(d, x),
            0x50 => i.band(d, x),
            0x60 => i.ishl(d, x),
            0x70 => i.ushr(d, x),
            0x80 => i.ineg(d),
            0xa0 => i.bxor(d, x),
            0xb0 => match off {
                8 | 16 | 32 => {
                    let t = match off {
                        8 => types::I8,
                        16 => types::I16,
                        _ => types::I32,
                    };
                    if t == ty {
                        x
                    } else {
                        let r = self.b.ins().ireduce(t, x);
                        self.b.ins().sextend(ty, r)
                    }
                }
                _ => x,
            },
            0xc0 => i.sshr(d, x),
            _ => return Err(format!("unknown ALU operation {op:#x}")),
        })
    }

    /// BPF division never traps: by zero gives 0 (div) or the dividend
    /// (mod); signed MIN / -1 wraps.
    fn divmod(&mut self, op: u8, signed: bool, ty: cranelift_codegen::ir::Type, d: Value, x: Value) -> Value {
        let zero = self.b.ins().icmp_imm(IntCC::Equal, x, 0);
        let neg1 = self.b.ins().icmp_imm(IntCC::Equal, x, -1);
        let one = self.b.ins().iconst(ty, 1);
        let z = self.b.ins().iconst(ty, 0);
        let bad = if signed { self.b.ins().bor(zero, neg1) } else { zero };
        let safe = self.b.ins().select(bad, one, x);
        if op == 0x30 {
            if signed {
                let q = self.b.ins().sdiv(d, safe);
                let n = self.b.ins().ineg(d);
                let q = self.b.ins().select(neg1, n, q);
                self.b.ins().select(zero, z, q)
            } else {
                let q = self.b.ins().udiv(d, safe);
                self.b.ins().select(zero, z, q)
            }
        } else if signed {
            let r = self.b.ins().srem(d, safe);
            let r = self.b.ins().select(neg1, z, r);
            self.b.ins().select(zero, d, r)
        } else {
            let r = self.b.ins().urem(d, safe);
            self.b.ins().select(zero, d, r)
        }
    }

    fn atomic(&mut self, pc: usize, ins: Insn, addr: Value, size: usize, src: usize) -> Result<(), String> {
        let ty = if size == 8 { types::I64 } else { types::I32 };
        let x = self.get(src);
        let x = if ty == types::I64 { x } else { self.b.ins().ireduce(ty, x) };
        let fl = MemFlags::new();
        let op = ins.imm as u32;
        let widen = |t: &mut Self, v: Value| if ty == types::I64 { v } else { t.b.ins().uextend(types::I64, v) };
        if op == 0xf1 {
            let r0 = self.get(0);
            let r0 = if ty == types::I64 { r0 } else { self.b.ins().ireduce(ty, r0) };
            let old = self.b.ins().atomic_cas(fl, addr, r0, x);
            let old = widen(self, old);
            self.set(0, old);
            return Ok(());
        }
        let rmw = match op & !1 {
            0x00 => AtomicRmwOp::Add,
            0x40 => AtomicRmwOp::Or,
            0x50 => AtomicRmwOp::And,
            0xa0 => AtomicRmwOp::Xor,
            0xe0 => AtomicRmwOp::Xchg,
            _ => return Err(format!("instruction {pc}: unknown atomic operation {op:#x}")),
        };
        let old = self.b.ins().atomic_rmw(ty, fl, rmw, addr, x);
        if op & 1 != 0 {
            let old = widen(self, old);
            self.set(src, old);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::{map_type as mt, BpfObject, MapDef, ProgramDef};

    fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { code, regs: dst | src << 4, off, imm }
    }

    /// ld_imm64 of kind `src` (a map, a map's value) into `dst`.
    fn ld64(dst: u8, src: u8, map: i32, off: i32) -> [Insn; 2] {
        [ins(0x18, dst, src, 0, map), ins(0, 0, 0, 0, off)]
    }

    const EXIT: Insn = Insn { code: 0x95, regs: 0, off: 0, imm: 0 };

    fn object(maps: Vec<MapDef>, insns: Vec<Insn>) -> BpfObject {
        BpfObject { maps, programs: vec![ProgramDef { name: "p".into(), section: "xdp".into(), insns, func_info: Vec::new() }], license: "GPL".into(), btf: None }
    }

    /// A run's verdict and every map's entries after it.
    type Outcome = (u64, Vec<Vec<u8>>);

    /// Runs program 0 on `frame`: interpreter, then code compiled with
    /// `opts`; both verdicts, the maps after each, and what compiling did.
    fn run_both(obj: &BpfObject, opts: Opts, named: &[usize], frame: &[u8], setup: impl Fn(&mut Vm)) -> (Outcome, Outcome, Stats) {
        let dump = |vm: &Vm| vm.maps.iter().map(|m| m.entries().into_iter().flat_map(|(k, v)| [k, v].concat()).collect::<Vec<u8>>()).collect::<Vec<_>>();
        let mut vm = Vm::new(obj, 1).unwrap();
        setup(&mut vm);
        let mut pkt = Packet::for_test_run(frame, 1, 0).unwrap();
        let r = Exec::new(&mut vm, &mut pkt).run(0).unwrap();
        let want = (r, dump(&vm));
        let mut vm = Vm::new(obj, 1).unwrap();
        setup(&mut vm);
        let (img, stats) = compile_with(&vm, opts, named).unwrap();
        let jit = Jit::load(&vm, 0, &img).unwrap();
        let mut pkt = Packet::for_test_run(frame, 1, 0).unwrap();
        let r = jit.run(&mut vm, 0, &mut pkt).unwrap();
        (want, (r, dump(&vm)), stats)
    }

    /// key 0 on the stack, lookup in map 0, NULL check, then `body`.
    fn lookup_then(body: &[Insn]) -> Vec<Insn> {
        let mut v = vec![ins(0x62, 10, 0, -4, 0), ins(0xbf, 2, 10, 0, 0), ins(0x07, 2, 0, 0, -4)];
        v.extend(ld64(1, PSEUDO_MAP_FD, 0, 0));
        v.push(ins(0x85, 0, 0, 0, 1));
        v.push(ins(0x15, 0, 0, body.len() as i16, 0)); // if r0 == 0 goto exit
        v.extend_from_slice(body);
        v.push(EXIT);
        v
    }

    #[test]
    fn typed_values_elide_checks_inside_the_value() {
        let body = [
            ins(0xbf, 6, 0, 0, 0),  // r6 = r0 (a copy)
            ins(0xb7, 1, 0, 0, 7),  // r1 = 7
            ins(0x7b, 6, 1, 8, 0),  // *(u64 *)(r6 + 8) = r1
            ins(0x07, 6, 0, 0, 4),  // r6 += 4
            ins(0x61, 2, 6, 8, 0),  // r2 = *(u32 *)(r6 + 8): value bytes 12..16
            ins(0x79, 3, 6, 8, 0),  // r3 = *(u64 *)(r6 + 8): 12..20, past the value
            ins(0x79, 0, 0, 8, 0),  // r0 = *(u64 *)(r0 + 8)
            ins(0x0f, 0, 2, 0, 0),  // r0 += r2
        ];
        for t in [mt::ARRAY, mt::PERCPU_ARRAY, mt::HASH, mt::PERCPU_HASH] {
            let mut d = MapDef::new("m", t, 4, 16, 4);
            d.btf_value_size = Some(16);
            let obj = object(vec![d], lookup_then(&body));
            let setup = |vm: &mut Vm| {
                if matches!(t, mt::HASH | mt::PERCPU_HASH) {
                    assert_eq!(vm.maps[0].update(&0u32.to_le_bytes(), &[0xab; 16], 0, None), 0);
                }
            };
            let (want, got, stats) = run_both(&obj, Opts { typed_values: true, ..Opts::NONE }, &[], &[0; 64], setup);
            assert_eq!(want, got, "map type {t}");
            assert_eq!(want.0 & 0xff, 7, "map type {t}");
            // The store, the 4-byte load and r0's load; not the load past the value.
            assert_eq!(stats.elided_checks, 3, "map type {t}");
            let (_, got, stats) = run_both(&obj, Opts::NONE, &[], &[0; 64], setup);
            assert_eq!(want, got);
            assert_eq!(stats.elided_checks, 0);
        }
    }

    #[test]
    fn typed_values_stay_off_when_btf_disagrees_or_before_the_null_check() {
        let body = [ins(0x79, 0, 0, 0, 0)];
        let mut d = MapDef::new("m", mt::ARRAY, 4, 16, 4);
        d.btf_value_size = Some(8);
        let (want, got, stats) = run_both(&object(vec![d], lookup_then(&body)), Opts::ALL, &[], &[0; 64], |_| {});
        assert_eq!(want, got);
        assert_eq!(stats.elided_checks, 0);
        // A load through the result before its NULL check keeps its check.
        let mut v = vec![ins(0x62, 10, 0, -4, 0), ins(0xbf, 2, 10, 0, 0), ins(0x07, 2, 0, 0, -4)];
        v.extend(ld64(1, PSEUDO_MAP_FD, 0, 0));
        v.extend([ins(0x85, 0, 0, 0, 1), ins(0x79, 0, 0, 0, 0), EXIT]);
        let vm = Vm::new(&object(vec![MapDef::new("m", mt::ARRAY, 4, 16, 4)], v), 1).unwrap();
        assert_eq!(compile_with(&vm, Opts::ALL, &[]).unwrap().1.elided_checks, 0);
    }

    /// bpf_csum_diff(data, fs, data + 8, ts, seed) on a frame of 64 bytes.
    fn csum_prog(fs: i32, ts: i32) -> Vec<Insn> {
        vec![
            ins(0x61, 2, 1, 0, 0), // r2 = ctx->data
            ins(0x61, 3, 1, 4, 0), // r3 = ctx->data_end
            ins(0xbf, 4, 2, 0, 0),
            ins(0x07, 4, 0, 0, 8 + 512),
            ins(0x2d, 4, 3, 7, 0), // if r4 > r3 goto exit
            ins(0xbf, 1, 2, 0, 0),
            ins(0xbf, 3, 2, 0, 0),
            ins(0x07, 3, 0, 0, 8),
            ins(0xb7, 2, 0, 0, fs),
            ins(0xb7, 4, 0, 0, ts),
            ins(0xb7, 5, 0, 0, 0x1234_5678),
            ins(0x85, 0, 0, 0, 28),
            EXIT,
        ]
    }

    #[test]
    fn inline_csum_diff_computes_as_the_helper() {
        let frame: Vec<u8> = (0..600u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 | 0x80).collect();
        for folded in [false, true] {
            for (fs, ts) in [(8, 16), (0, 16), (8, 0), (0, 0), (4, 4), (256, 256), (20, 20)] {
                let obj = object(Vec::new(), csum_prog(fs, ts));
                let setup = |vm: &mut Vm| vm.sem.csum_diff_folded = folded;
                let (want, got, stats) = run_both(&obj, Opts { inline_helpers: true, ..Opts::NONE }, &[], &frame, setup);
                assert_eq!(want, got, "folded {folded}, sizes {fs} {ts}");
                assert_eq!((stats.inlined_csum, stats.csum_folded), (1, Some(folded)));
                let (_, got, stats) = run_both(&obj, Opts::NONE, &[], &frame, setup);
                assert_eq!(want, got);
                assert_eq!(stats.inlined_csum, 0);
            }
            // Sizes the kernel refuses (or folds) stay calls.
            let (want, got, stats) = run_both(&object(Vec::new(), csum_prog(6, 4)), Opts::ALL, &[], &frame, |vm| vm.sem.csum_diff_folded = folded);
            assert_eq!((want, stats.inlined_csum), (got, 0));
        }
    }

    #[test]
    fn inline_helpers_off_calls_array_lookups_too() {
        let obj = object(vec![MapDef::new("m", mt::ARRAY, 4, 16, 4)], lookup_then(&[ins(0x79, 0, 0, 0, 0)]));
        let (want, got, stats) = run_both(&obj, Opts::NONE, &[], &[0; 64], |_| {});
        assert_eq!((want, stats.inlined_lookups), (got, 0));
        let (want, got, stats) = run_both(&obj, Opts { inline_helpers: true, ..Opts::NONE }, &[], &[0; 64], |_| {});
        assert_eq!((want, stats.inlined_lookups), (got, 1));
    }

    #[test]
    fn const_maps_fold_read_only_data_and_named_arrays() {
        // .rodata's u32 at 4, then slot 1 of the array "cfg", bytes 2..4.
        let mut ro = MapDef::new(".rodata", mt::ARRAY, 4, 8, 1);
        ro.data = Some(vec![1, 2, 3, 4, 0x78, 0x56, 0x34, 0x12]);
        ro.readonly = true;
        let cfg = MapDef::new("cfg", mt::ARRAY, 4, 4, 2);
        let mut v = ld64(1, PSEUDO_MAP_VALUE, 0, 4).to_vec();
        v.push(ins(0x61, 6, 1, 0, 0)); // r6 = *(u32 *)(r1 + 0)
        // The key stored in one block, looked up in the next.
        v.extend([ins(0xb7, 1, 0, 0, 1), ins(0x63, 10, 1, -4, 0), ins(0x05, 0, 0, 0, 0), ins(0xbf, 2, 10, 0, 0), ins(0x07, 2, 0, 0, -4)]);
        v.extend(ld64(1, PSEUDO_MAP_FD, 1, 0));
        v.extend([ins(0x85, 0, 0, 0, 1), ins(0x15, 0, 0, 2, 0), ins(0x69, 0, 0, 2, 0), ins(0x0f, 0, 6, 0, 0), EXIT]);
        let obj = object(vec![ro, cfg], v);
        let setup = |vm: &mut Vm| assert_eq!(vm.maps[1].update(&1u32.to_le_bytes(), &[0, 0, 0x22, 0x11], 0, None), 0);
        let opts = Opts { const_maps: true, ..Opts::NONE };
        let (want, got, stats) = run_both(&obj, opts, &[1], &[0; 64], setup);
        assert_eq!(want, got);
        assert_eq!(want.0, 0x1234_5678 + 0x1122);
        assert_eq!(stats.folded_loads, 2);
        assert_eq!(stats.folded_maps, BTreeSet::from([0, 1]));
        // Not named: the array is read at run time.
        let (_, _, stats) = run_both(&obj, opts, &[], &[0; 64], setup);
        assert_eq!((stats.folded_loads, stats.folded_maps), (1, BTreeSet::from([0])));
        assert_eq!(run_both(&obj, Opts::NONE, &[], &[0; 64], setup).2.folded_loads, 0);
    }

    #[test]
    fn a_named_constant_map_the_program_writes_is_refused() {
        let obj = object(vec![MapDef::new("cfg", mt::ARRAY, 4, 8, 2)], lookup_then(&[ins(0x7a, 0, 0, 0, 1)]));
        let vm = Vm::new(&obj, 1).unwrap();
        let e = compile_with(&vm, Opts::ALL, &[0]).unwrap_err();
        assert!(e.contains("--const-map"), "{e}");
        assert!(compile_with(&vm, Opts::ALL, &[]).is_ok());
    }

    #[test]
    fn a_changed_constant_map_is_refused_at_load() {
        let obj = object(vec![MapDef::new("cfg", mt::ARRAY, 4, 8, 2)], lookup_then(&[ins(0x79, 0, 0, 0, 0)]));
        let vm = Vm::new(&obj, 1).unwrap();
        vm.maps[0].update(&0u32.to_le_bytes(), &[9; 8], 0, None);
        let (image, stats) = compile_with(&vm, Opts::ALL, &[0]).unwrap();
        assert_eq!(stats.folded_loads, 1);
        let maps = vec![("cfg".to_string(), crate::aot::map_digest(&vm.maps[0]))];
        let n = crate::aot::Native { elf: String::new(), sha256: [0; 32], abi: String::new(), features: Vec::new(), image, opts: Opts::ALL, stats, maps };
        assert!(crate::aot::check_vm(&n, &vm, "x.native").is_ok());
        vm.maps[0].update(&0u32.to_le_bytes(), &[8; 8], 0, None);
        let e = crate::aot::check_vm(&n, &vm, "x.native").unwrap_err();
        assert!(e.contains("map cfg is compiled in as a constant"), "{e}");
    }

    #[test]
    fn opts_parse_and_name() {
        assert_eq!(Opts::parse("all").unwrap(), Opts::ALL);
        assert_eq!(Opts::parse("none").unwrap(), Opts::NONE);
        let o = Opts::parse("typed-values,const-maps").unwrap();
        assert_eq!((o.typed_values, o.inline_helpers, o.const_maps), (true, false, true));
        assert_eq!(Opts::parse(&o.names()).unwrap(), o);
        assert_eq!(Opts::from_bits(o.bits()), o);
        assert!(Opts::parse("fast").is_err());
    }
}
