//! Loads the ELF objects the kernel gets: programs by section and name, with
//! the subprograms they call linked in; map definitions from BTF `.maps`;
//! global data sections as one-entry array maps; relocations resolved the
//! way libbpf resolves them.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget, SectionIndex};

use crate::btf::{Btf, Kind};
use crate::insn::{Insn, PSEUDO_CALL, PSEUDO_FUNC, PSEUDO_MAP_FD, PSEUDO_MAP_VALUE};

/// Map types by their kernel numbers.
pub mod map_type {
    pub const HASH: u32 = 1;
    pub const ARRAY: u32 = 2;
    pub const PROG_ARRAY: u32 = 3;
    pub const PERCPU_HASH: u32 = 5;
    pub const PERCPU_ARRAY: u32 = 6;
    pub const LRU_HASH: u32 = 9;
    pub const LRU_PERCPU_HASH: u32 = 10;
    pub const LPM_TRIE: u32 = 11;
    pub const ARRAY_OF_MAPS: u32 = 12;
    pub const HASH_OF_MAPS: u32 = 13;
    pub const DEVMAP: u32 = 14;
    pub const CPUMAP: u32 = 16;
    pub const XSKMAP: u32 = 17;
    pub const DEVMAP_HASH: u32 = 25;
    pub const RINGBUF: u32 = 27;

    pub fn name(t: u32) -> &'static str {
        match t {
            HASH => "hash",
            ARRAY => "array",
            PROG_ARRAY => "prog_array",
            PERCPU_HASH => "percpu_hash",
            PERCPU_ARRAY => "percpu_array",
            LRU_HASH => "lru_hash",
            LRU_PERCPU_HASH => "lru_percpu_hash",
            LPM_TRIE => "lpm_trie",
            ARRAY_OF_MAPS => "array_of_maps",
            HASH_OF_MAPS => "hash_of_maps",
            DEVMAP => "devmap",
            CPUMAP => "cpumap",
            XSKMAP => "xskmap",
            DEVMAP_HASH => "devmap_hash",
            RINGBUF => "ringbuf",
            _ => "unsupported",
        }
    }
}

#[derive(Debug, Clone)]
pub struct MapDef {
    pub name: String,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    /// The template of a map-in-map's inner maps.
    pub inner: Option<Box<MapDef>>,
    /// Initial contents of a global data section (one value).
    pub data: Option<Vec<u8>>,
    /// `.rodata`: frozen after it is written, so the verifier may rely on it.
    pub readonly: bool,
    /// Initial entries of a program array or map of maps, as libbpf fills
    /// them from `.maps` initialisers (`.values = { [i] = &sym }`): slot and
    /// the program's or map's name.
    pub init: Vec<(u32, String)>,
    /// The value's size as the object's BTF gives it: the `value` type of
    /// a `.maps` definition, the end of the last variable of a data
    /// section's DATASEC. None without BTF for the map.
    pub btf_value_size: Option<u32>,
}

impl MapDef {
    pub fn new(name: &str, map_type: u32, key_size: u32, value_size: u32, max_entries: u32) -> MapDef {
        MapDef { name: name.to_string(), map_type, key_size, value_size, max_entries, flags: 0, inner: None, data: None, readonly: false, init: Vec::new(), btf_value_size: None }
    }
}

#[derive(Debug, Clone)]
pub struct ProgramDef {
    pub name: String,
    pub section: String,
    /// The program followed by `.text` when it calls into it. ld_imm64
    /// instructions carry map indexes (PSEUDO_MAP_FD/VALUE) and relative
    /// function offsets (PSEUDO_FUNC); calls carry relative offsets.
    pub insns: Vec<Insn>,
    /// BTF func_info for the kernel: (instruction index, FUNC type id).
    pub func_info: Vec<(u32, u32)>,
}

pub struct Object_ {
    pub maps: Vec<MapDef>,
    pub programs: Vec<ProgramDef>,
    pub license: String,
    /// The object's BTF with DATASECs filled in, ready for BPF_BTF_LOAD.
    pub btf: Option<Vec<u8>>,
}

pub use Object_ as BpfObject;

fn err<T>(path: &str, msg: impl std::fmt::Display) -> Result<T, String> {
    Err(format!("{path}: {msg}"))
}

impl BpfObject {
    pub fn load(path: &str) -> Result<BpfObject, String> {
        let data = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        Self::parse(path, &data)
    }

    pub fn parse(path: &str, data: &[u8]) -> Result<BpfObject, String> {
        let file = object::File::parse(data).map_err(|e| format!("{path}: not an ELF object ({e})"))?;
        if file.architecture() != object::Architecture::Bpf {
            return err(path, format!("not a BPF object (machine {:?}); compile with clang -target bpf", file.architecture()));
        }
        let mut maps: Vec<MapDef> = Vec::new();
        let mut map_by_symbol: HashMap<String, usize> = HashMap::new();
        let mut data_map: HashMap<SectionIndex, usize> = HashMap::new();
        let mut license = String::new();
        let mut maps_section = None;
        let mut text = None;

        let btf_raw = file.section_by_name(".BTF").and_then(|s| s.data().ok()).map(|d| d.to_vec());
        let btf = match &btf_raw {
            Some(d) => Some(Btf::parse(d).map_err(|e| format!("{path}: {e}"))?),
            None => None,
        };
        let funcs = match (&btf_raw, file.section_by_name(".BTF.ext").and_then(|s| s.data().ok())) {
            (Some(raw), Some(ext)) => crate::btf::func_info(ext, |o| Btf::string_at(raw, o)).map_err(|e| format!("{path}: .BTF.ext: {e}"))?,
            _ => HashMap::new(),
        };
        let btf_fixed = match (&btf_raw, &btf) {
            (Some(raw), Some(b)) => {
                let mut raw = raw.clone();
                let size = |n: &str| file.section_by_name(n).map(|s| s.size() as u32);
                let var = |sec: &str, v: &str| {
                    let si = file.section_by_name(sec)?.index();
                    file.symbols().find(|s| s.section_index() == Some(si) && s.name() == Ok(v)).map(|s| s.address() as u32)
                };
                crate::btf::fixup_datasecs(&mut raw, b, size, var).map_err(|e| format!("{path}: {e}"))?;
                Some(raw)
            }
            _ => None,
        };

        for s in file.sections() {
            let name = s.name().unwrap_or("");
            match name {
                "license" => {
                    let d = s.data().unwrap_or(&[]);
                    license = String::from_utf8_lossy(d).trim_end_matches('\0').to_string();
                }
                ".maps" => maps_section = Some(s.index()),
                ".text" => text = Some(s.index()),
                _ if is_data_section(name) => {
                    let size = s.size() as usize;
                    let init = if name.starts_with(".bss") { vec![0; size] } else { s.data().map_err(|e| e.to_string())?.to_vec() };
                    data_map.insert(s.index(), maps.len());
                    let mut d = MapDef::new(name, map_type::ARRAY, 4, size.max(1) as u32, 1);
                    d.data = Some(init);
                    d.readonly = name.starts_with(".rodata");
                    d.btf_value_size = btf.as_ref().and_then(|b| b.datasec(name)).and_then(|vars| vars.iter().map(|v| v.offset + v.size).max());
                    maps.push(d);
                }
                _ => {}
            }
        }

        // Where each map's `values` array starts, for its initialisers.
        let mut values_at: HashMap<String, u32> = HashMap::new();
        if maps_section.is_some() {
            let btf = btf.as_ref().ok_or_else(|| format!("{path}: .maps needs BTF (compile with -g)"))?;
            let vars = btf.datasec(".maps").ok_or_else(|| format!("{path}: no BTF for .maps"))?;
            for v in vars {
                let var = btf.get(v.ty)?;
                let Kind::Var { target } = var.kind else { return err(path, "a .maps entry is not a variable") };
                let (def, values) = parse_map_def(btf, &var.name, target).map_err(|e| format!("{path}: map {}: {e}", var.name))?;
                if let Some(off) = values {
                    values_at.insert(var.name.clone(), off);
                }
                map_by_symbol.insert(var.name.clone(), maps.len());
                maps.push(def);
            }
        }
        if let Some(ms) = maps_section {
            apply_map_initialisers(path, &file, ms, &values_at, &map_by_symbol, &mut maps)?;
        }

        // Programs: global functions in executable sections other than .text.
        let mut programs = Vec::new();
        let text_insns = match text {
            Some(t) => insns_of(file.section_by_index(t).unwrap().data().unwrap_or(&[])),
            None => Vec::new(),
        };
        for sym in file.symbols() {
            let Some(si) = sym.section_index() else { continue };
            if Some(si) == text || sym.kind() != object::SymbolKind::Text || !sym.is_global() {
                continue;
            }
            let sec = file.section_by_index(si).map_err(|e| e.to_string())?;
            let sec_name = sec.name().unwrap_or("").to_string();
            let all = insns_of(sec.data().map_err(|e| e.to_string())?);
            let start = (sym.address() / 8) as usize;
            let len = if sym.size() > 0 { (sym.size() / 8) as usize } else { all.len() - start };
            let mut insns = all[start..start + len].to_vec();
            let name = sym.name().unwrap_or("").to_string();
            let needs_text = sec_relocs_need_text(&file, &sec, text);
            let text_base = insns.len();
            if needs_text {
                insns.extend_from_slice(&text_insns);
            }
            let ctx = Reloc { path, file: &file, maps: &map_by_symbol, data_map: &data_map, maps_section, text, text_base };
            for (off, r) in sec.relocations() {
                let idx = (off / 8) as usize;
                if idx < start || idx >= start + len {
                    continue;
                }
                ctx.apply(&mut insns, idx - start, &r)?;
            }
            if needs_text {
                let ts = file.section_by_index(text.unwrap()).unwrap();
                for (off, r) in ts.relocations() {
                    ctx.apply(&mut insns, text_base + (off / 8) as usize, &r)?;
                }
            }
            // func_info in instructions of the linked image, program first.
            let mut func_info = Vec::new();
            for &(off, ty) in funcs.get(&sec_name).map(|v| v.as_slice()).unwrap_or(&[]) {
                let i = (off / 8) as usize;
                if i >= start && i < start + len {
                    func_info.push(((i - start) as u32, ty));
                }
            }
            if needs_text {
                let text_finfo = funcs.get(".text").map(|v| v.as_slice()).unwrap_or(&[]);
                let linked = link_reachable(insns, text_base, &text_functions(&file, text.unwrap(), text_insns.len()), text_finfo);
                insns = linked.0;
                func_info.extend(linked.1);
            }
            programs.push(ProgramDef { name, section: sec_name, insns, func_info });
        }
        programs.sort_by(|a, b| a.section.cmp(&b.section).then(a.name.cmp(&b.name)));
        Ok(BpfObject { maps, programs, license, btf: btf_fixed })
    }

    /// Picks a program by name, or by section; the only one if neither.
    pub fn program(&self, name: Option<&str>) -> Result<&ProgramDef, String> {
        match name {
            Some(n) => self.programs.iter().find(|p| p.name == n).or_else(|| {
                let in_sec: Vec<_> = self.programs.iter().filter(|p| p.section == n).collect();
                if in_sec.len() == 1 { Some(in_sec[0]) } else { None }
            }).ok_or_else(|| match self.programs.is_empty() {
                true => format!("no program or section named {n:?}: the object has no programs"),
                false => format!("no program or section named {n:?}: the object has {}", self.program_list()),
            }),
            None if self.programs.len() == 1 => Ok(&self.programs[0]),
            None if self.programs.is_empty() => Err("the object has no programs (no global function in a section other than .text)".into()),
            None => Err(format!("the object has several programs, choose one with --prog: {}", self.program_list())),
        }
    }

    pub fn program_list(&self) -> String {
        self.programs.iter().map(|p| format!("{} (section {})", p.name, p.section)).collect::<Vec<_>>().join(", ")
    }
}

fn is_data_section(name: &str) -> bool {
    [".rodata", ".data", ".bss"].iter().any(|p| name == *p || name.starts_with(&format!("{p}.")))
}

/// The functions of .text as (first instruction, length), in order: every
/// function symbol, global or static, sized by its symbol or by the next.
fn text_functions(file: &object::File, text: SectionIndex, text_len: usize) -> Vec<(usize, usize)> {
    let mut starts: Vec<(usize, usize)> = file
        .symbols()
        .filter(|s| s.section_index() == Some(text) && s.kind() == object::SymbolKind::Text)
        .map(|s| ((s.address() / 8) as usize, (s.size() / 8) as usize))
        .collect();
    starts.sort();
    starts.dedup_by_key(|f| f.0);
    let mut out = Vec::with_capacity(starts.len());
    for (k, &(at, size)) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map(|n| n.0).unwrap_or(text_len);
        out.push((at, if size > 0 { size.min(end - at) } else { end - at }));
    }
    out
}

/// Links of .text only the functions the program reaches, by calls and by
/// function references (callbacks), as libbpf does: the kernel refuses
/// instructions no path reaches, and wants func_info for exactly the
/// subprograms it finds. insns is the program followed by all of .text from
/// text_base, relocated; the result is the program followed by the reached
/// functions in their order, calls and references moved with them, and the
/// func_info of .text (byte offsets in .text) placed in the result. Where a
/// call lands inside no known function the image is kept whole.
fn link_reachable(insns: Vec<Insn>, text_base: usize, funcs: &[(usize, usize)], text_finfo: &[(u32, u32)]) -> (Vec<Insn>, Vec<(u32, u32)>) {
    let whole = |insns: Vec<Insn>| {
        let fi = text_finfo.iter().map(|&(off, ty)| (text_base as u32 + off / 8, ty)).collect();
        (insns, fi)
    };
    // Ranges in the image: 0 is the program, k + 1 is .text's k-th function.
    let range = |f: usize| if f == 0 { (0, text_base) } else { (text_base + funcs[f - 1].0, text_base + funcs[f - 1].0 + funcs[f - 1].1) };
    let target = |i: usize, ins: &Insn| -> Option<i64> {
        let is_ref = (ins.is_call() && ins.src() == PSEUDO_CALL) || (ins.is_ld_imm64() && ins.src() == PSEUDO_FUNC);
        is_ref.then(|| i as i64 + ins.imm as i64 + 1)
    };
    let func_at = |t: i64| funcs.iter().position(|&(at, _)| (text_base + at) as i64 == t).map(|k| k + 1);
    let mut reached = vec![false; funcs.len() + 1];
    reached[0] = true;
    let mut work = vec![0usize];
    while let Some(f) = work.pop() {
        let (a, b) = range(f);
        let mut i = a;
        while i < b.min(insns.len()) {
            if let Some(t) = target(i, &insns[i]) {
                match func_at(t) {
                    Some(g) if !reached[g] => {
                        reached[g] = true;
                        work.push(g);
                    }
                    Some(_) => {}
                    // Into the program itself, or no function starts there.
                    None if t >= 0 && (t as usize) < text_base => {}
                    None => return whole(insns),
                }
            }
            i += if insns[i].is_ld_imm64() { 2 } else { 1 };
        }
    }
    // New places of the reached functions, old image index → new.
    let mut moved: HashMap<usize, usize> = HashMap::new();
    let mut out: Vec<Insn> = insns[..text_base].to_vec();
    let mut from: Vec<usize> = (0..text_base).collect();
    for f in 1..=funcs.len() {
        if reached[f] {
            let (a, b) = range(f);
            moved.insert(a, out.len());
            for i in a..b {
                out.push(insns[i]);
                from.push(i);
            }
        }
    }
    for n in 0..out.len() {
        if let Some(t) = target(from[n], &insns[from[n]]) {
            let nt = if (t as usize) < text_base { t as usize } else { moved[&(t as usize)] };
            out[n].imm = (nt as i64 - n as i64 - 1) as i32;
        }
    }
    let mut fi = Vec::new();
    for &(off, ty) in text_finfo {
        let i = (off / 8) as usize;
        if let Some(f) = funcs.iter().position(|&(at, len)| i >= at && i < at + len) {
            if let Some(&base) = moved.get(&(text_base + funcs[f].0)) {
                fi.push(((base + i - funcs[f].0) as u32, ty));
            }
        }
    }
    (out, fi)
}

fn insns_of(b: &[u8]) -> Vec<Insn> {
    b.chunks_exact(8).map(|c| Insn::from_bytes(c.try_into().unwrap())).collect()
}

fn sec_relocs_need_text(file: &object::File, sec: &object::Section, text: Option<SectionIndex>) -> bool {
    let Some(t) = text else { return false };
    sec.relocations().any(|(_, r)| match r.target() {
        RelocationTarget::Symbol(si) => file.symbol_by_index(si).map(|s| s.section_index() == Some(t)).unwrap_or(false),
        _ => false,
    })
}

struct Reloc<'a> {
    path: &'a str,
    file: &'a object::File<'a>,
    maps: &'a HashMap<String, usize>,
    data_map: &'a HashMap<SectionIndex, usize>,
    maps_section: Option<SectionIndex>,
    text: Option<SectionIndex>,
    text_base: usize,
}

impl Reloc<'_> {
    fn apply(&self, insns: &mut [Insn], i: usize, r: &object::Relocation) -> Result<(), String> {
        let RelocationTarget::Symbol(si) = r.target() else { return err(self.path, "relocation without a symbol") };
        let sym = self.file.symbol_by_index(si).map_err(|e| e.to_string())?;
        let sym_sec = sym.section_index();
        let RelocationFlags::Elf { r_type } = r.flags() else { return err(self.path, "not an ELF relocation") };
        let Some(insn) = insns.get(i).copied() else { return err(self.path, "relocation outside the program") };
        if insn.is_call() {
            // libbpf: a call's target is the symbol's instruction plus imm + 1.
            if sym_sec != self.text || self.text.is_none() {
                return err(self.path, format!("call to {} outside .text (relocation type {r_type})", sym.name().unwrap_or("?")));
            }
            let target = self.text_base as i64 + (sym.address() / 8) as i64 + insn.imm as i64 + 1;
            insns[i].set_src(PSEUDO_CALL);
            insns[i].imm = (target - i as i64 - 1) as i32;
            return Ok(());
        }
        if !insn.is_ld_imm64() || i + 1 >= insns.len() {
            return err(self.path, format!("relocation at instruction {i} is neither a call nor a 64-bit load"));
        }
        if sym_sec.is_some() && sym_sec == self.maps_section {
            let name = sym.name().unwrap_or("");
            let idx = *self.maps.get(name).ok_or_else(|| format!("{}: reference to unknown map {name}", self.path))?;
            insns[i].set_src(PSEUDO_MAP_FD);
            insns[i].imm = idx as i32;
        } else if let Some(&idx) = sym_sec.and_then(|s| self.data_map.get(&s)) {
            // The offset: the variable's, plus the addend a section symbol keeps in imm.
            let off = sym.address() as i64 + insn.imm as i64;
            insns[i].set_src(PSEUDO_MAP_VALUE);
            insns[i].imm = idx as i32;
            insns[i + 1].imm = off as i32;
        } else if sym_sec.is_some() && sym_sec == self.text {
            // A function's address (a bpf_loop callback): imm is a byte offset.
            let target = self.text_base as i64 + (sym.address() as i64 + insn.imm as i64) / 8;
            insns[i].set_src(PSEUDO_FUNC);
            insns[i].imm = (target - i as i64 - 1) as i32;
        } else {
            return err(self.path, format!("64-bit load of {} from a section the runtime does not know", sym.name().unwrap_or("?")));
        }
        Ok(())
    }
}

/// A map definition from its BTF struct, and the byte offset of its
/// `values` member when it has one (where initialisers point from).
fn parse_map_def(btf: &Btf, name: &str, ty: u32) -> Result<(MapDef, Option<u32>), String> {
    let id = btf.resolve(ty)?;
    let Kind::Struct { members, .. } = &btf.get(id)?.kind else { return Err("definition is not a struct".into()) };
    let mut d = MapDef::new(name, 0, 0, 0, 0);
    let mut values_at = None;
    // __uint(x, n) is `int (*x)[n]`: the number is the array's length.
    let uint = |t: u32| -> Result<u32, String> {
        let p = btf.resolve(t)?;
        let Kind::Ptr { target } = btf.get(p)?.kind else { return Err("expected a pointer".into()) };
        let a = btf.resolve(target)?;
        match btf.get(a)?.kind {
            Kind::Array { nelems, .. } => Ok(nelems),
            _ => Err("expected a pointer to an array".into()),
        }
    };
    let pointee_size = |t: u32| -> Result<u32, String> {
        let p = btf.resolve(t)?;
        let Kind::Ptr { target } = btf.get(p)?.kind else { return Err("expected a pointer".into()) };
        btf.size_of(target)
    };
    for m in members {
        match m.name.as_str() {
            "type" => d.map_type = uint(m.ty)?,
            "max_entries" => d.max_entries = uint(m.ty)?,
            "map_flags" => d.flags = uint(m.ty)?,
            "key_size" => d.key_size = uint(m.ty)?,
            "value_size" => d.value_size = uint(m.ty)?,
            "key" => d.key_size = pointee_size(m.ty)?,
            "value" => {
                d.value_size = pointee_size(m.ty)?;
                d.btf_value_size = Some(d.value_size);
            }
            "values" => {
                // __array(values, struct inner): an array of pointers to the inner definition.
                let a = btf.resolve(m.ty)?;
                let Kind::Array { elem, .. } = btf.get(a)?.kind else { return Err("values: expected an array".into()) };
                let p = btf.resolve(elem)?;
                let Kind::Ptr { target } = btf.get(p)?.kind else { return Err("values: expected pointers".into()) };
                // __array(values, int (void *)): a program array's values
                // are programs; otherwise they are inner map definitions.
                if !matches!(btf.get(btf.resolve(target)?)?.kind, Kind::FuncProto) {
                    d.inner = Some(Box::new(parse_map_def(btf, &format!("{name}.inner"), target)?.0));
                } else if d.value_size == 0 {
                    d.value_size = 4;
                }
                values_at = Some(m.offset / 8);
            }
            "pinning" | "numa_node" | "map_extra" => {}
            other => return Err(format!("unknown field {other:?} in the map definition")),
        }
    }
    if d.inner.is_some() && d.value_size == 0 {
        d.value_size = 4;
    }
    if matches!(d.map_type, map_type::ARRAY_OF_MAPS | map_type::HASH_OF_MAPS | map_type::PROG_ARRAY | map_type::DEVMAP | map_type::DEVMAP_HASH | map_type::CPUMAP | map_type::XSKMAP) && d.key_size == 0 {
        d.key_size = 4;
    }
    if d.map_type == 0 {
        return Err("no map type".into());
    }
    Ok((d, values_at))
}

/// libbpf's `.maps` initialisers: each relocation in `.maps` that falls in a
/// map's `values` array names the program (program array) or map (map of
/// maps) for that slot.
fn apply_map_initialisers(
    path: &str,
    file: &object::File,
    maps_section: SectionIndex,
    values_at: &HashMap<String, u32>,
    map_by_symbol: &HashMap<String, usize>,
    maps: &mut [MapDef],
) -> Result<(), String> {
    let sec = file.section_by_index(maps_section).map_err(|e| e.to_string())?;
    let vars: Vec<(String, u64, u64)> = file
        .symbols()
        .filter(|s| s.section_index() == Some(maps_section) && s.kind() == object::SymbolKind::Data)
        .map(|s| (s.name().unwrap_or("").to_string(), s.address(), s.size()))
        .collect();
    for (off, r) in sec.relocations() {
        let Some((var, start, _)) = vars.iter().find(|(_, a, n)| off >= *a && off < a + n) else {
            return err(path, format!(".maps: relocation at byte {off} outside every map"));
        };
        let Some(&values) = values_at.get(var) else {
            return err(path, format!("map {var}: an initialiser, but no `values` member to hold it"));
        };
        let rel = off - start;
        if rel < values as u64 || (rel - values as u64) % 8 != 0 {
            return err(path, format!("map {var}: an initialiser outside its `values` array"));
        }
        let slot = ((rel - values as u64) / 8) as u32;
        let RelocationTarget::Symbol(si) = r.target() else { return err(path, format!("map {var}: initialiser without a symbol")) };
        let target = file.symbol_by_index(si).map_err(|e| e.to_string())?.name().unwrap_or("").to_string();
        let d = &mut maps[map_by_symbol[var]];
        if slot >= d.max_entries {
            return err(path, format!("map {var}: initialiser for slot {slot}, past max_entries {}", d.max_entries));
        }
        match d.map_type {
            map_type::PROG_ARRAY => {}
            map_type::ARRAY_OF_MAPS | map_type::HASH_OF_MAPS if map_by_symbol.contains_key(&target) => {}
            _ => return err(path, format!("map {var}: initialiser {target} is neither a program of a program array nor a map of a map of maps")),
        }
        d.init.push((slot, target));
    }
    Ok(())
}
