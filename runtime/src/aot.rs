//! Ahead-of-time compiled objects: the JIT's image of every program of an
//! ELF object, written to a file (`fastpath rt compile OBJ -o OBJ.native`)
//! and loaded later without Cranelift. The file names the ELF it came from
//! and its SHA-256: a run refuses an ELF that differs, a CPU that lacks a
//! feature the code was compiled for, and a runtime of another ABI. It
//! records the options it was compiled with (`fastpath rt compile --opt`)
//! and what they fixed in the code: the bpf_csum_diff semantics of inlined
//! calls, and the contents of maps folded in as constants (by SHA-256); a
//! run refuses a runtime of other semantics and maps whose contents differ.

use sha2::{Digest, Sha256};

use crate::jit::{Image, ImageReloc, Opts, Stats};
use crate::maps::Map;
use crate::vm::Vm;

const MAGIC: &[u8; 8] = b"FPRTAOT\0";
const FORMAT: u32 = 2;
/// The contract between native code and the runtime: the Env layout, the
/// host functions and the relocation namespaces. Change it when they change.
pub const ABI: &str = concat!("fastpath-rt ", env!("CARGO_PKG_VERSION"), " abi 1");

/// x86 features Cranelift may compile for, checked at load.
const FEATURES: &[&str] = &["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "bmi1", "bmi2", "lzcnt", "fma"];

pub struct Native {
    /// The ELF object's path when compiled, and its SHA-256.
    pub elf: String,
    pub sha256: [u8; 32],
    pub abi: String,
    pub features: Vec<String>,
    pub image: Image,
    /// The options it was compiled with and what they did (folded_maps
    /// aside, which `maps` names).
    pub opts: Opts,
    pub stats: Stats,
    /// Maps whose contents the code holds: name and SHA-256 of the contents.
    pub maps: Vec<(String, [u8; 32])>,
}

/// What the code holds of a map: every slot's value, in order (arrays are
/// what can be folded), hashed.
pub fn map_digest(m: &Map) -> [u8; 32] {
    let mut h = Sha256::new();
    for i in 0..m.def.max_entries {
        match m.get(&i.to_le_bytes()) {
            Some(v) => h.update(&v),
            None => h.update(b"-"),
        }
    }
    h.finalize().into()
}

/// Refuses to run code whose fixed parts this Vm contradicts: inlined
/// bpf_csum_diff of other semantics, folded maps whose contents differ.
pub fn check_vm(n: &Native, vm: &Vm, path: &str) -> Result<(), String> {
    if let Some(f) = n.stats.csum_folded {
        if f != vm.sem.csum_diff_folded {
            let what = |f: bool| if f { "folded (kernel 6.13 and later)" } else { "unfolded (up to 6.12)" };
            return Err(format!(
                "{path}: bpf_csum_diff compiled inline {}, and this runtime behaves as {}: compile it again here, or run with the --kernel it was compiled for",
                what(f),
                vm.sem.describe()
            ));
        }
    }
    for (name, h) in &n.maps {
        let m = vm.map_index(name).ok_or_else(|| format!("{path}: compiled with map {name} as a constant, which the object lacks"))?;
        if map_digest(&vm.maps[m]) != *h {
            return Err(format!(
                "{path}: map {name} is compiled in as a constant and its contents differ now: compile again with the maps it will run with (fastpath rt compile --maps-in FILE)"
            ));
        }
    }
    Ok(())
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The CPU features this machine has, of those code may use.
fn cpu_features() -> Vec<String> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    for f in FEATURES {
        let has = match *f {
            "sse3" => std::is_x86_feature_detected!("sse3"),
            "ssse3" => std::is_x86_feature_detected!("ssse3"),
            "sse4.1" => std::is_x86_feature_detected!("sse4.1"),
            "sse4.2" => std::is_x86_feature_detected!("sse4.2"),
            "popcnt" => std::is_x86_feature_detected!("popcnt"),
            "avx" => std::is_x86_feature_detected!("avx"),
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "bmi1" => std::is_x86_feature_detected!("bmi1"),
            "bmi2" => std::is_x86_feature_detected!("bmi2"),
            "lzcnt" => std::is_x86_feature_detected!("lzcnt"),
            "fma" => std::is_x86_feature_detected!("fma"),
            _ => false,
        };
        if has {
            out.push(f.to_string());
        }
    }
    out
}

/// Whether a file is an AOT object (by its first bytes).
pub fn is_native(path: &str) -> bool {
    let mut head = [0u8; 8];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok() && &head == MAGIC
}

struct W(Vec<u8>);

impl W {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
    path: &'a str,
}

impl R<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let s = self.b.get(self.at..self.at + n).ok_or_else(|| format!("{}: truncated AOT object", self.path))?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| format!("{}: bad string in AOT object", self.path))
    }
}

/// Writes the image compiled from the ELF at `elf` (whose bytes are `data`).
pub fn write(path: &str, elf: &str, data: &[u8], image: &Image, opts: Opts, stats: &Stats, maps: &[(String, [u8; 32])]) -> Result<(), String> {
    let mut w = W(MAGIC.to_vec());
    w.u32(FORMAT);
    w.bytes(ABI.as_bytes());
    w.0.extend_from_slice(&sha256(data));
    let elf = std::fs::canonicalize(elf).map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| elf.to_string());
    w.bytes(elf.as_bytes());
    w.bytes(cpu_features().join(",").as_bytes());
    w.u32(opts.bits());
    for v in [stats.elided_checks, stats.inlined_lookups, stats.inlined_csum, stats.folded_loads] {
        w.u32(v);
    }
    w.u32(match stats.csum_folded {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    });
    w.u32(maps.len() as u32);
    for (name, h) in maps {
        w.bytes(name.as_bytes());
        w.0.extend_from_slice(h);
    }
    w.u32(image.funcs.len() as u32);
    for &(p, s, o) in &image.funcs {
        w.u32(p);
        w.u32(s);
        w.u32(o);
    }
    w.u32(image.relocs.len() as u32);
    for r in &image.relocs {
        w.u32(r.at);
        w.0.push(r.kind);
        w.u32(r.ns);
        w.u32(r.index);
        w.0.extend_from_slice(&r.addend.to_le_bytes());
    }
    w.bytes(&image.code);
    std::fs::write(path, &w.0).map_err(|e| format!("{path}: {e}"))
}

/// Reads an AOT object and checks it can run here: same runtime ABI, and
/// every CPU feature its code was compiled for.
pub fn read(path: &str) -> Result<Native, String> {
    let b = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let mut r = R { b: &b, at: 0, path };
    if r.take(8)? != MAGIC {
        return Err(format!("{path}: not an AOT object (compile one with fastpath rt compile)"));
    }
    let format = r.u32()?;
    if format != FORMAT {
        return Err(format!("{path}: AOT format {format}, this runtime reads {FORMAT}: compile it again"));
    }
    let abi = r.string()?;
    if abi != ABI {
        return Err(format!("{path}: compiled for {abi}, this is {ABI}: compile it again"));
    }
    let sha256: [u8; 32] = r.take(32)?.try_into().unwrap();
    let elf = r.string()?;
    let features: Vec<String> = r.string()?.split(',').filter(|s| !s.is_empty()).map(String::from).collect();
    let here = cpu_features();
    if let Some(f) = features.iter().find(|f| !here.contains(f)) {
        return Err(format!("{path}: compiled for a CPU with {f}, which this one lacks: compile it here"));
    }
    let opts = Opts::from_bits(r.u32()?);
    let mut stats = Stats { elided_checks: r.u32()?, inlined_lookups: r.u32()?, inlined_csum: r.u32()?, folded_loads: r.u32()?, ..Default::default() };
    stats.csum_folded = match r.u32()? {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    };
    let mut maps = Vec::new();
    for _ in 0..r.u32()? {
        let name = r.string()?;
        maps.push((name, r.take(32)?.try_into().unwrap()));
    }
    let mut image = Image { code: Vec::new(), funcs: Vec::new(), relocs: Vec::new() };
    for _ in 0..r.u32()? {
        image.funcs.push((r.u32()?, r.u32()?, r.u32()?));
    }
    for _ in 0..r.u32()? {
        let at = r.u32()?;
        let kind = r.take(1)?[0];
        let ns = r.u32()?;
        let index = r.u32()?;
        let addend = i64::from_le_bytes(r.take(8)?.try_into().unwrap());
        image.relocs.push(ImageReloc { at, kind, ns, index, addend });
    }
    image.code = r.bytes()?;
    Ok(Native { elf, sha256, abi, features, image, opts, stats, maps })
}

/// The ELF object an AOT object was compiled from: `elf` if given, else the
/// path it recorded; refused unless its SHA-256 is the recorded one.
pub fn elf_of(native: &Native, path: &str, elf: Option<&str>) -> Result<(String, Vec<u8>), String> {
    let p = elf.unwrap_or(&native.elf).to_string();
    let data = std::fs::read(&p).map_err(|e| format!("{p} (the ELF object {path} was compiled from): {e}"))?;
    let h = sha256(&data);
    if h != native.sha256 {
        return Err(format!(
            "{p}: not the ELF object {path} was compiled from (SHA-256 {}, compiled from {}): compile it again with fastpath rt compile",
            hex(&h),
            hex(&native.sha256)
        ));
    }
    Ok((p, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let image = Image {
            code: vec![0x90, 0xc3, 1, 2, 3],
            funcs: vec![(0, 0, 0), (1, 7, 16)],
            relocs: vec![ImageReloc { at: 2, kind: 0, ns: 2, index: 3, addend: -8 }],
        };
        let dir = std::env::temp_dir().join(format!("fastpath-aot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let elf = dir.join("x.o");
        std::fs::write(&elf, b"elf bytes").unwrap();
        let out = dir.join("x.native");
        let stats = Stats { elided_checks: 3, inlined_csum: 1, csum_folded: Some(true), ..Default::default() };
        let maps = vec![("cfg".to_string(), [7u8; 32])];
        write(out.to_str().unwrap(), elf.to_str().unwrap(), b"elf bytes", &image, Opts::ALL, &stats, &maps).unwrap();
        assert!(is_native(out.to_str().unwrap()));
        let n = read(out.to_str().unwrap()).unwrap();
        assert_eq!(n.image, image);
        assert_eq!((n.opts, &n.stats, &n.maps), (Opts::ALL, &stats, &maps));
        assert!(elf_of(&n, "x.native", None).is_ok());
        std::fs::write(&elf, b"other bytes").unwrap();
        assert!(elf_of(&n, "x.native", None).unwrap_err().contains("not the ELF object"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
