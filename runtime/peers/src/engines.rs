//! The engines: fastpath-rt's three, rbpf's three (crates.io), ubpf's two
//! (a shared library, loaded by path) and any plugin's JIT and AOT (a shared
//! library with the small C interface below). Each engine owns its maps and
//! frame; `time` runs it `repeat` times in a loop that does nothing else.

use std::ffi::{c_char, c_void, CStr, CString};

use fastpath_rt::elf::BpfObject;
use fastpath_rt::insn::{Insn, PSEUDO_FUNC};
use fastpath_rt::interp::Exec;
use fastpath_rt::jit::Jit;
use fastpath_rt::vm::{Packet, Vm};

use crate::host::{self, Low, CTX_LEN, HELPERS};
use crate::Outcome;

pub struct Setup<'a> {
    pub obj: &'a BpfObject,
    pub prog: &'a str,
    pub frame: &'a [u8],
    pub maps_in: Option<&'a str>,
    pub native: Option<&'a str>,
    pub ubpf_lib: Option<&'a str>,
    pub plugins: &'a [(String, String)],
}

type JitFn = unsafe extern "C" fn(*mut c_void, usize) -> u64;

enum Kind {
    FpInterp {
        prog: usize,
        pkt: Packet,
    },
    FpJit {
        jit: Jit,
        prog: usize,
        pkt: Packet,
    },
    Rbpf {
        vm: rbpf::EbpfVmMbuff<'static>,
        low: Low,
        mode: RbpfMode,
    },
    UbpfInterp {
        lib: &'static Ubpf,
        vm: *mut c_void,
        low: Low,
    },
    Native {
        f: JitFn,
        low: Low,
    },
}

#[derive(Clone, Copy)]
enum RbpfMode {
    Interp,
    Jit,
    Cranelift,
}

pub struct Engine {
    vm: Vm,
    kind: Kind,
}

fn fresh_vm(s: &Setup) -> Result<(Vm, usize), String> {
    let mut vm = Vm::new(s.obj, 1)?;
    if let Some(path) = s.maps_in {
        fastpath_rt::mapsfile::fill_maps(&mut vm, path)?;
    }
    let prog = vm.program_index(s.prog)?;
    Ok((vm, prog))
}

/// The program as plain bytecode for engines without maps: every 64-bit
/// load of a map or a map value carries what fastpath-rt resolved it to (a
/// map handle the host functions take, or the value's address).
fn plain_code(vm: &Vm, prog: usize) -> Result<Vec<u8>, String> {
    let p = &vm.programs[prog];
    let mut out = Vec::with_capacity(p.insns.len() * 8);
    let mut i = 0;
    while i < p.insns.len() {
        let mut ins: Insn = p.insns[i];
        if ins.is_ld_imm64() && i + 1 < p.insns.len() {
            if ins.regs >> 4 == PSEUDO_FUNC {
                return Err(format!("instruction {i}: a function pointer (callback), which the harness cannot give this engine"));
            }
            let v = p.imm64[i];
            let mut next = p.insns[i + 1];
            ins.regs &= 0x0f;
            ins.imm = v as u32 as i32;
            next.imm = (v >> 32) as u32 as i32;
            out.extend_from_slice(&ins.to_bytes());
            out.extend_from_slice(&next.to_bytes());
            i += 2;
            continue;
        }
        if ins.is_call() && ins.regs >> 4 == 0 && !HELPERS.iter().any(|h| h.id == ins.imm as u32) {
            return Err(format!(
                "helper {} ({}) is not among the host functions the harness gives peers",
                fastpath_rt::helpers::name(ins.imm),
                ins.imm
            ));
        }
        out.extend_from_slice(&ins.to_bytes());
        i += 1;
    }
    Ok(out)
}

fn helper_ids(code: &[u8]) -> Vec<u32> {
    let mut ids: Vec<u32> = code
        .chunks_exact(8)
        .map(|c| Insn::from_bytes(c.try_into().unwrap()))
        .filter(|i| i.is_call() && i.regs >> 4 == 0)
        .map(|i| i.imm as u32)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

impl Engine {
    pub fn new(name: &str, s: &Setup) -> Result<Engine, String> {
        let (vm, prog) = fresh_vm(s)?;
        let pkt = || Packet::for_test_run(s.frame, 1, 0).map_err(|(_, why)| why);
        let kind = match name {
            "fastpath-interp" => Kind::FpInterp { prog, pkt: pkt()? },
            "fastpath-jit" => Kind::FpJit {
                jit: Jit::compile(&vm, prog)?,
                prog,
                pkt: pkt()?,
            },
            "fastpath-aot" => {
                let path = s
                    .native
                    .ok_or("fastpath-aot needs --native OBJ.native (fastpath rt compile)")?;
                let native = fastpath_rt::aot::read(path)?;
                Kind::FpJit {
                    jit: Jit::load(&vm, prog, &native.image)?,
                    prog,
                    pkt: pkt()?,
                }
            }
            "rbpf-interp" | "rbpf-jit" | "rbpf-cranelift" => {
                let mode = match name {
                    "rbpf-interp" => RbpfMode::Interp,
                    "rbpf-jit" => RbpfMode::Jit,
                    _ => RbpfMode::Cranelift,
                };
                let code: &'static [u8] = Box::leak(plain_code(&vm, prog)?.into_boxed_slice());
                let mut r = rbpf::EbpfVmMbuff::new(Some(code)).map_err(|e| format!("rbpf: {e}"))?;
                for h in HELPERS {
                    r.register_helper(h.id, h.rust)
                        .map_err(|e| format!("rbpf: helper {}: {e}", h.name))?;
                }
                // The interpreter checks every access: it may touch map
                // values, the ring buffers' records, the frame, the
                // context and its stack.
                for &(lo, hi, _) in &vm.regions {
                    r.register_allowed_memory(lo..hi);
                }
                let (lo, hi) = vm.pool.range();
                r.register_allowed_memory(lo..hi);
                for m in vm.maps.iter() {
                    if let Some(rb) = m.ringbuf() {
                        let (lo, hi) = rb.region();
                        r.register_allowed_memory(lo..hi);
                    }
                }
                match mode {
                    RbpfMode::Interp => {}
                    RbpfMode::Jit => r.jit_compile().map_err(|e| format!("rbpf JIT: {e}"))?,
                    RbpfMode::Cranelift => r
                        .cranelift_compile()
                        .map_err(|e| format!("rbpf Cranelift: {e}"))?,
                }
                Kind::Rbpf {
                    vm: r,
                    low: Low::new(s.frame)?,
                    mode,
                }
            }
            "ubpf-interp" | "ubpf-jit" => {
                let lib = Ubpf::open(
                    s.ubpf_lib
                        .ok_or("ubpf engines need --ubpf-lib LIB.so (the lab builds one)")?,
                )?;
                let code = plain_code(&vm, prog)?;
                let u = lib.vm(&code)?;
                let low = Low::new(s.frame)?;
                if name == "ubpf-jit" {
                    let mut err: *mut c_char = std::ptr::null_mut();
                    let f = unsafe { (lib.compile)(u, &mut err) };
                    match f {
                        Some(f) => Kind::Native { f, low },
                        None => return Err(format!("ubpf JIT: {}", cstr(err))),
                    }
                } else {
                    Kind::UbpfInterp { lib, vm: u, low }
                }
            }
            other => {
                let (plugin, aot) = match (other.strip_suffix("-jit"), other.strip_suffix("-aot")) {
                    (Some(p), _) => (p, false),
                    (_, Some(p)) => (p, true),
                    _ => return Err(format!("no engine {other:?}")),
                };
                let path = s
                    .plugins
                    .iter()
                    .find(|(n, _)| n == plugin)
                    .map(|(_, p)| p.as_str())
                    .ok_or_else(|| {
                        format!("no engine {other:?} (a plugin is given with --plugin NAME=LIB.so)")
                    })?;
                let code = plain_code(&vm, prog)?;
                let f = Plugin::open(path)?.compile(&code, aot)?;
                Kind::Native {
                    f,
                    low: Low::new(s.frame)?,
                }
            }
        };
        Ok(Engine { vm, kind })
    }

    /// One run from fresh maps, and what it left.
    pub fn check(&mut self) -> Result<Outcome, String> {
        let ret = self.once()?;
        let frame = match &self.kind {
            Kind::FpInterp { pkt, .. } | Kind::FpJit { pkt, .. } => pkt.output(),
            Kind::Rbpf { low, .. } | Kind::UbpfInterp { low, .. } | Kind::Native { low, .. } => {
                low.output()
            }
        };
        Ok(Outcome {
            ret,
            frame,
            ringbuf: crate::drain_ringbufs(&self.vm),
            maps: crate::dump_maps(&self.vm),
        })
    }

    fn once(&mut self) -> Result<u64, String> {
        self.bind();
        self.run_n(1)
    }

    fn bind(&self) {
        match &self.kind {
            Kind::Rbpf { low, .. } | Kind::UbpfInterp { low, .. } | Kind::Native { low, .. } => {
                host::bind(&self.vm.maps, low)
            }
            _ => {}
        }
    }

    /// `repeat` runs; the caller times them. Records a ring buffer fills
    /// are taken after, as a consumer would.
    pub fn time(&mut self, repeat: u64) -> Result<(), String> {
        self.bind();
        self.run_n(repeat)?;
        crate::drain_ringbufs(&self.vm);
        Ok(())
    }

    fn run_n(&mut self, repeat: u64) -> Result<u64, String> {
        let mut ret = 0;
        match &mut self.kind {
            Kind::FpInterp { prog, pkt } => {
                for _ in 0..repeat {
                    let mut x = Exec::new(&mut self.vm, pkt);
                    ret = x.run(*prog).map_err(|e| e.to_string())?;
                }
            }
            Kind::FpJit { jit, prog, pkt } => {
                let mut r = jit.runner(&mut self.vm, *prog, pkt).map_err(|e| e.to_string())?;
                for _ in 0..repeat {
                    ret = r.run().map_err(|e| e.to_string())?;
                }
            }
            Kind::Rbpf { vm, low, mode } => {
                let (mem, mbuff) = (low.frame_slice(), low.ctx_slice());
                match mode {
                    RbpfMode::Interp => {
                        for _ in 0..repeat {
                            ret = vm
                                .execute_program(mem, mbuff)
                                .map_err(|e| format!("rbpf: {e}"))?;
                        }
                    }
                    RbpfMode::Jit => {
                        for _ in 0..repeat {
                            ret = unsafe { vm.execute_program_jit(mem, mbuff) }
                                .map_err(|e| format!("rbpf JIT: {e}"))?;
                        }
                    }
                    RbpfMode::Cranelift => {
                        for _ in 0..repeat {
                            ret = vm
                                .execute_program_cranelift(mem, mbuff)
                                .map_err(|e| format!("rbpf Cranelift: {e}"))?;
                        }
                    }
                }
            }
            Kind::UbpfInterp { lib, vm, low } => {
                let ctx = low.ctx() as *mut c_void;
                for _ in 0..repeat {
                    ret = lib.exec(*vm, ctx)?;
                }
            }
            Kind::Native { f, low } => {
                let ctx = low.ctx() as *mut c_void;
                for _ in 0..repeat {
                    ret = unsafe { f(ctx, CTX_LEN) };
                }
            }
        }
        Ok(ret)
    }
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        "(no message)".into()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

unsafe fn sym(h: *mut c_void, name: &str) -> Option<*mut c_void> {
    let n = CString::new(name).unwrap();
    let p = libc::dlsym(h, n.as_ptr());
    (!p.is_null()).then_some(p)
}

fn dlopen(path: &str) -> Result<*mut c_void, String> {
    let p = CString::new(path).map_err(|_| format!("{path}: bad path"))?;
    let h = unsafe { libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!("{path}: {}", cstr(unsafe { libc::dlerror() })));
    }
    Ok(h)
}

/// ubpf's C interface, as old releases and today's have it: today's
/// `ubpf_exec` returns a status and writes the result, and its
/// interpreter's bounds check can be turned off.
pub struct Ubpf {
    create: unsafe extern "C" fn() -> *mut c_void,
    register: unsafe extern "C" fn(
        *mut c_void,
        u32,
        *const c_char,
        extern "C" fn(u64, u64, u64, u64, u64) -> u64,
    ) -> i32,
    dispatcher: Option<
        unsafe extern "C" fn(
            *mut c_void,
            extern "C" fn(u64, u64, u64, u64, u64, u32, *mut c_void) -> u64,
            extern "C" fn(u32, *const c_void) -> bool,
        ) -> i32,
    >,
    load: unsafe extern "C" fn(*mut c_void, *const c_void, u32, *mut *mut c_char) -> i32,
    compile: unsafe extern "C" fn(*mut c_void, *mut *mut c_char) -> Option<JitFn>,
    exec_status: Option<unsafe extern "C" fn(*const c_void, *mut c_void, usize, *mut u64) -> i32>,
    exec_value: unsafe extern "C" fn(*const c_void, *mut c_void, usize) -> u64,
    bounds: Option<unsafe extern "C" fn(*mut c_void, bool) -> bool>,
}

extern "C" fn any_helper(_: u32, _: *const c_void) -> bool {
    true
}

impl Ubpf {
    fn open(path: &str) -> Result<&'static Ubpf, String> {
        let h = dlopen(path)?;
        unsafe {
            let need = |n: &str| {
                sym(h, n).ok_or_else(|| format!("{path}: no {n}: not a ubpf library"))
            };
            let exec = need("ubpf_exec")?;
            // Today's ubpf has the toggle; the releases before it return
            // the program's value from ubpf_exec.
            let bounds = sym(h, "ubpf_toggle_bounds_check");
            Ok(Box::leak(Box::new(Ubpf {
                create: std::mem::transmute::<*mut c_void, _>(need("ubpf_create")?),
                register: std::mem::transmute::<*mut c_void, _>(need("ubpf_register")?),
                dispatcher: sym(h, "ubpf_register_external_dispatcher")
                    .map(|p| std::mem::transmute::<*mut c_void, _>(p)),
                load: std::mem::transmute::<*mut c_void, _>(need("ubpf_load")?),
                compile: std::mem::transmute::<*mut c_void, _>(need("ubpf_compile")?),
                exec_status: bounds.map(|_| std::mem::transmute::<*mut c_void, _>(exec)),
                exec_value: std::mem::transmute::<*mut c_void, _>(exec),
                bounds: bounds.map(|p| std::mem::transmute::<*mut c_void, _>(p)),
            })))
        }
    }

    fn vm(&self, code: &[u8]) -> Result<*mut c_void, String> {
        unsafe {
            let vm = (self.create)();
            if vm.is_null() {
                return Err("ubpf_create failed".into());
            }
            let ids = helper_ids(code);
            // Helpers are registered by number below 64; a program calling
            // one above goes through the dispatcher, where there is one.
            if ids.iter().any(|&id| id >= 64) {
                let d = self.dispatcher.ok_or_else(|| {
                    format!(
                        "helper {} is numbered above this ubpf's 64 external functions",
                        ids.last().unwrap()
                    )
                })?;
                if d(vm, host::dispatch, any_helper) != 0 {
                    return Err("ubpf_register_external_dispatcher failed".into());
                }
            } else {
                for h in HELPERS.iter().filter(|h| h.id < 64) {
                    let n = CString::new(h.name).unwrap();
                    if (self.register)(vm, h.id, n.as_ptr(), h.c) != 0 {
                        return Err(format!("ubpf_register {}: failed", h.name));
                    }
                }
            }
            if let Some(b) = self.bounds {
                // Its check knows the context alone, not the frame or the
                // map values the program reaches through it.
                b(vm, false);
            }
            let mut err: *mut c_char = std::ptr::null_mut();
            if (self.load)(
                vm,
                code.as_ptr() as *const c_void,
                code.len() as u32,
                &mut err,
            ) != 0
            {
                return Err(format!("ubpf_load: {}", cstr(err)));
            }
            Ok(vm)
        }
    }

    fn exec(&self, vm: *mut c_void, ctx: *mut c_void) -> Result<u64, String> {
        unsafe {
            match self.exec_status {
                Some(f) => {
                    let mut r = 0u64;
                    if f(vm, ctx, CTX_LEN, &mut r) != 0 {
                        return Err("ubpf_exec failed".into());
                    }
                    Ok(r)
                }
                // The old interpreter checks accesses against the context
                // alone and cannot be told otherwise: it is given the
                // address space above the context instead.
                None => Ok((self.exec_value)(vm, ctx, (1usize << 47) - ctx as usize)),
            }
        }
    }
}

/// A plugin: a shared library with
///   void *fastpath_peer_new(void);
///   int fastpath_peer_helper(void *e, uint32_t id, const char *name, void *fn);
///   int fastpath_peer_load(void *e, const void *code, size_t len);
///   uint64_t (*fastpath_peer_compile(void *e, int aot))(void *ctx, size_t len);
///   const char *fastpath_peer_error(void *e);
/// Helpers are C functions of five u64 arguments; 0 is success.
struct Plugin {
    new: unsafe extern "C" fn() -> *mut c_void,
    helper: unsafe extern "C" fn(
        *mut c_void,
        u32,
        *const c_char,
        extern "C" fn(u64, u64, u64, u64, u64) -> u64,
    ) -> i32,
    load: unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> i32,
    compile: unsafe extern "C" fn(*mut c_void, i32) -> Option<JitFn>,
    error: unsafe extern "C" fn(*mut c_void) -> *const c_char,
}

impl Plugin {
    fn open(path: &str) -> Result<Plugin, String> {
        let h = dlopen(path)?;
        unsafe {
            let need = |n: &str| {
                sym(h, n).ok_or_else(|| format!("{path}: no {n}: not a fastpath peer plugin"))
            };
            Ok(Plugin {
                new: std::mem::transmute::<*mut c_void, _>(need("fastpath_peer_new")?),
                helper: std::mem::transmute::<*mut c_void, _>(need("fastpath_peer_helper")?),
                load: std::mem::transmute::<*mut c_void, _>(need("fastpath_peer_load")?),
                compile: std::mem::transmute::<*mut c_void, _>(need("fastpath_peer_compile")?),
                error: std::mem::transmute::<*mut c_void, _>(need("fastpath_peer_error")?),
            })
        }
    }

    fn compile(&self, code: &[u8], aot: bool) -> Result<JitFn, String> {
        unsafe {
            let e = (self.new)();
            if e.is_null() {
                return Err("fastpath_peer_new failed".into());
            }
            for h in HELPERS {
                let n = CString::new(h.name).unwrap();
                if (self.helper)(e, h.id, n.as_ptr(), h.c) != 0 {
                    return Err(format!("helper {}: {}", h.name, cstr((self.error)(e))));
                }
            }
            if (self.load)(e, code.as_ptr() as *const c_void, code.len()) != 0 {
                return Err(format!("load: {}", cstr((self.error)(e))));
            }
            (self.compile)(e, aot as i32).ok_or_else(|| {
                format!(
                    "{}: {}",
                    if aot { "AOT" } else { "JIT" },
                    cstr((self.error)(e))
                )
            })
        }
    }
}
