//! The kernel's verifier as the runtime's gatekeeper: every program is
//! loaded with BPF_PROG_LOAD, against kernel maps of the same definitions,
//! before the runtime runs it. What the kernel refuses is refused, with its
//! log.

use crate::elf::{map_type as mt, BpfObject, MapDef, ProgramDef};
use crate::sys::{bpf, put32, put64};
use crate::insn::{PSEUDO_MAP_FD, PSEUDO_MAP_VALUE};

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_UPDATE_ELEM: i64 = 2;
const BPF_PROG_LOAD: i64 = 5;
const BPF_MAP_FREEZE: i64 = 22;
const BPF_BTF_LOAD: i64 = 18;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const BPF_F_RDONLY_PROG: u32 = 1 << 7;

struct Fd(i32);

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            unsafe { libc::close(self.0) };
        }
    }
}


fn create_map(d: &MapDef) -> Result<Fd, String> {
    let inner = match &d.inner {
        Some(i) => Some(create_map(i)?),
        None => None,
    };
    let mut a = [0u8; 128];
    put32(&mut a, 0, d.map_type);
    put32(&mut a, 4, d.key_size);
    put32(&mut a, 8, d.value_size);
    put32(&mut a, 12, d.max_entries);
    let mut flags = d.flags;
    if d.readonly {
        flags |= BPF_F_RDONLY_PROG;
    }
    put32(&mut a, 16, flags);
    if let Some(i) = &inner {
        put32(&mut a, 20, i.0 as u32);
    }
    let fd = Fd(bpf(BPF_MAP_CREATE, &mut a).map_err(|e| format!("create kernel map {} ({}): {e}", d.name, mt::name(d.map_type)))?);
    if let Some(data) = &d.data {
        let key = 0u32;
        let mut a = [0u8; 128];
        put32(&mut a, 0, fd.0 as u32);
        put64(&mut a, 8, &key as *const u32 as u64);
        put64(&mut a, 16, data.as_ptr() as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map_err(|e| format!("fill kernel map {}: {e}", d.name))?;
        if d.readonly {
            let mut a = [0u8; 128];
            put32(&mut a, 0, fd.0 as u32);
            bpf(BPF_MAP_FREEZE, &mut a).map_err(|e| format!("freeze kernel map {}: {e}", d.name))?;
        }
    }
    Ok(fd)
}

fn load_btf(raw: &[u8]) -> Result<Fd, String> {
    let mut log = vec![0u8; 1 << 20];
    let mut a = [0u8; 128];
    put64(&mut a, 0, raw.as_ptr() as u64);
    put64(&mut a, 8, log.as_mut_ptr() as u64);
    put32(&mut a, 16, raw.len() as u32);
    put32(&mut a, 20, log.len() as u32);
    put32(&mut a, 24, 1);
    bpf(BPF_BTF_LOAD, &mut a).map(Fd).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(0);
        format!("load the object's BTF: {e}\n{}", String::from_utf8_lossy(&log[..end]).trim())
    })
}

/// Loads the program into the kernel and unloads it again. Err holds why
/// the kernel refused it, with the verifier's log.
pub fn verify(obj: &BpfObject, prog: &ProgramDef) -> Result<(), String> {
    let mut fds = Vec::new();
    for d in &obj.maps {
        fds.push(create_map(d)?);
    }
    let mut insns = prog.insns.clone();
    let mut i = 0;
    while i < insns.len() {
        if insns[i].is_ld_imm64() {
            if matches!(insns[i].src(), PSEUDO_MAP_FD | PSEUDO_MAP_VALUE) {
                insns[i].imm = fds[insns[i].imm as usize].0;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    let raw: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
    // Subprograms and callbacks need the object's BTF and func_info.
    let btf = match (&obj.btf, prog.func_info.is_empty()) {
        (Some(b), false) => Some(load_btf(b)?),
        _ => None,
    };
    let finfo: Vec<u32> = prog.func_info.iter().flat_map(|&(i, t)| [i, t]).collect();
    let license = format!("{}\0", if obj.license.is_empty() { "GPL" } else { &obj.license });
    let load = |log: &mut Vec<u8>| -> Result<Fd, std::io::Error> {
        let mut a = [0u8; 128];
        put32(&mut a, 0, BPF_PROG_TYPE_XDP);
        put32(&mut a, 4, insns.len() as u32);
        put64(&mut a, 8, raw.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        if !log.is_empty() {
            put32(&mut a, 24, 1);
            put32(&mut a, 28, log.len() as u32);
            put64(&mut a, 32, log.as_mut_ptr() as u64);
        }
        if prog.section.starts_with("xdp.frags") {
            put32(&mut a, 44, BPF_F_XDP_HAS_FRAGS);
        }
        for (j, b) in prog.name.bytes().take(15).enumerate() {
            a[48 + j] = if b.is_ascii_alphanumeric() || b == b'_' { b } else { b'_' };
        }
        put32(&mut a, 68, BPF_XDP);
        if let Some(b) = &btf {
            put32(&mut a, 72, b.0 as u32);
            put32(&mut a, 76, 8);
            put64(&mut a, 80, finfo.as_ptr() as u64);
            put32(&mut a, 88, prog.func_info.len() as u32);
        }
        bpf(BPF_PROG_LOAD, &mut a).map(Fd)
    };
    match load(&mut Vec::new()) {
        Ok(_) => Ok(()),
        Err(first) => {
            let mut log = vec![0u8; 16 << 20];
            let _ = load(&mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
            Err(format!("the kernel's verifier refused program {}: {first}\n{text}", prog.name))
        }
    }
}

/// Helper semantics that changed between the kernels fastpath supports
/// (5.18 and later): the runtime behaves as the kernel it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Semantics {
    /// The kernel version these semantics are those of.
    pub version: (u32, u32),
    /// bpf_csum_diff folds its result to 16 bits (6.13 and later) rather
    /// than returning csum_partial's 32 bits.
    pub csum_diff_folded: bool,
    /// How they were found: "probe" (the helper run in the kernel),
    /// "uname" (the release, when no probe could run) or "--kernel".
    pub source: &'static str,
}

impl Semantics {
    /// The semantics of kernel `major.minor`.
    pub fn of_version(version: (u32, u32), source: &'static str) -> Semantics {
        Semantics { version, csum_diff_folded: version >= (6, 13), source }
    }

    /// One line for `rt verify` and the JSON of a run.
    pub fn describe(&self) -> String {
        format!(
            "kernel {}.{} semantics ({}): bpf_csum_diff {}",
            self.version.0,
            self.version.1,
            match self.source {
                "probe" => "probed in the running kernel",
                "uname" => "from the running kernel's release",
                _ => "chosen with --kernel",
            },
            if self.csum_diff_folded { "folded to 16 bits (6.13 and later)" } else { "unfolded 32-bit sum (up to 6.12)" }
        )
    }
}

static SEMANTICS: std::sync::OnceLock<Semantics> = std::sync::OnceLock::new();

/// Makes the runtime behave as kernel `major.minor` (`--kernel`), before
/// the first Vm is made.
pub fn set_semantics(version: (u32, u32)) -> Result<(), String> {
    if version < (5, 18) {
        return Err(format!("--kernel {}.{}: fastpath supports 5.18 and later", version.0, version.1));
    }
    SEMANTICS.set(Semantics::of_version(version, "--kernel")).map_err(|_| "kernel semantics chosen twice".to_string())
}

/// The semantics in force: those set with set_semantics, else the running
/// kernel's, probed once.
pub fn semantics() -> Semantics {
    *SEMANTICS.get_or_init(|| {
        let version = running_version().unwrap_or((5, 18));
        match probe_csum_diff() {
            Some(folded) => Semantics { version, csum_diff_folded: folded, source: "probe" },
            None => Semantics::of_version(version, "uname"),
        }
    })
}

/// `major.minor` of the running kernel's release.
pub fn running_version() -> Option<(u32, u32)> {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned();
    parse_version(&rel)
}

pub fn parse_version(s: &str) -> Option<(u32, u32)> {
    let mut it = s.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Runs bpf_csum_diff(NULL, 0, {0x12345678}, 4, 0) in the kernel through
/// BPF_PROG_TEST_RUN: 0x12345678 unfolded, 0x68ac folded. None when no
/// program can be loaded (no privileges).
fn probe_csum_diff() -> Option<bool> {
    use crate::insn::Insn;
    let i = |code: u8, regs: u8, off: i16, imm: i32| Insn { code, regs, off, imm };
    let insns = [
        i(0xb4, 0x01, 0, 0x1234_5678), // w1 = 0x12345678
        i(0x63, 0x1a, -4, 0),          // *(u32 *)(r10 - 4) = r1
        i(0xb7, 0x01, 0, 0),           // r1 = 0
        i(0xb7, 0x02, 0, 0),           // r2 = 0
        i(0xbf, 0xa3, 0, 0),           // r3 = r10
        i(0x07, 0x03, 0, -4),          // r3 += -4
        i(0xb7, 0x04, 0, 4),           // r4 = 4
        i(0xb7, 0x05, 0, 0),           // r5 = 0
        i(0x85, 0x00, 0, 28),          // call bpf_csum_diff
        i(0x95, 0x00, 0, 0),           // exit
    ];
    let raw: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
    let license = b"GPL\0";
    let mut a = [0u8; 128];
    put32(&mut a, 0, BPF_PROG_TYPE_XDP);
    put32(&mut a, 4, insns.len() as u32);
    put64(&mut a, 8, raw.as_ptr() as u64);
    put64(&mut a, 16, license.as_ptr() as u64);
    put32(&mut a, 68, BPF_XDP);
    let prog = Fd(bpf(BPF_PROG_LOAD, &mut a).ok()?);
    const BPF_PROG_TEST_RUN: i64 = 10;
    let pkt = [0u8; 64];
    let mut a = [0u8; 128];
    put32(&mut a, 0, prog.0 as u32);
    put32(&mut a, 8, pkt.len() as u32);
    put64(&mut a, 16, pkt.as_ptr() as u64);
    put32(&mut a, 32, 1); // repeat
    bpf(BPF_PROG_TEST_RUN, &mut a).ok()?;
    let ret = u32::from_le_bytes(a[4..8].try_into().unwrap());
    match ret {
        0x1234_5678 => Some(false),
        0x68ac => Some(true),
        _ => None,
    }
}
