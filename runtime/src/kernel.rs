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
