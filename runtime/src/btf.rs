//! Just enough BTF to read libbpf-style map definitions from `.maps`: the
//! types of the section's variables, their members' sizes and the numbers
//! that `__uint(name, n)` encodes as array lengths.

use std::collections::HashMap;

#[derive(Debug, Clone)]
pub enum Kind {
    Int { size: u32 },
    Ptr { target: u32 },
    Array { elem: u32, nelems: u32 },
    Struct { size: u32, members: Vec<Member> },
    Enum { size: u32 },
    Fwd,
    /// typedef, volatile, const, restrict, type tag: the type they name.
    Alias { target: u32 },
    Func,
    FuncProto,
    Var { target: u32 },
    Datasec { vars: Vec<SecInfo> },
    Float { size: u32 },
    Other,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub ty: u32,
    /// Offset in bits (bitfields aside, which map definitions never use).
    pub offset: u32,
}

#[derive(Debug, Clone)]
pub struct SecInfo {
    pub ty: u32,
    pub offset: u32,
    pub size: u32,
}

#[derive(Debug, Clone)]
pub struct Type {
    pub name: String,
    pub kind: Kind,
}

/// The types of one object's `.BTF` section; ids start at 1.
pub struct Btf {
    types: Vec<Type>,
    by_name: HashMap<String, u32>,
    /// Byte offset of each type's record in the raw section, for fixups.
    offsets: Vec<usize>,
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, String> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("BTF truncated at byte {off}"))
}

impl Btf {
    pub fn parse(data: &[u8]) -> Result<Btf, String> {
        if data.len() < 24 || u16::from_le_bytes([data[0], data[1]]) != 0xeb9f {
            return Err("not BTF (bad magic)".into());
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types_at = hdr_len + type_off;
        let strs_at = hdr_len + str_off;
        let strs = data
            .get(strs_at..strs_at + str_len)
            .ok_or("BTF string section out of bounds")?;
        let name = |off: u32| -> String {
            let s = &strs[(off as usize).min(strs.len())..];
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        };
        let mut types = vec![Type { name: String::new(), kind: Kind::Other }]; // id 0: void
        let mut offsets = vec![0];
        let mut p = types_at;
        let end = types_at + type_len;
        while p < end {
            offsets.push(p);
            let name_off = u32_at(data, p)?;
            let info = u32_at(data, p + 4)?;
            let size_type = u32_at(data, p + 8)?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            p += 12;
            let k = match kind {
                1 => {
                    p += 4;
                    Kind::Int { size: size_type }
                }
                2 => Kind::Ptr { target: size_type },
                3 => {
                    let elem = u32_at(data, p)?;
                    let nelems = u32_at(data, p + 8)?;
                    p += 12;
                    Kind::Array { elem, nelems }
                }
                4 | 5 => {
                    let mut members = Vec::with_capacity(vlen);
                    for i in 0..vlen {
                        let q = p + i * 12;
                        members.push(Member { name: name(u32_at(data, q)?), ty: u32_at(data, q + 4)?, offset: u32_at(data, q + 8)? & if info >> 31 != 0 { 0x00ff_ffff } else { u32::MAX } });
                    }
                    p += vlen * 12;
                    Kind::Struct { size: size_type, members }
                }
                6 => {
                    p += vlen * 8;
                    Kind::Enum { size: size_type }
                }
                7 => Kind::Fwd,
                8 | 9 | 10 | 11 | 18 => Kind::Alias { target: size_type },
                12 => Kind::Func,
                13 => {
                    p += vlen * 8;
                    Kind::FuncProto
                }
                14 => {
                    p += 4;
                    Kind::Var { target: size_type }
                }
                15 => {
                    let mut vars = Vec::with_capacity(vlen);
                    for i in 0..vlen {
                        let q = p + i * 12;
                        vars.push(SecInfo { ty: u32_at(data, q)?, offset: u32_at(data, q + 4)?, size: u32_at(data, q + 8)? });
                    }
                    p += vlen * 12;
                    Kind::Datasec { vars }
                }
                16 => Kind::Float { size: size_type },
                17 => {
                    p += 4;
                    Kind::Other
                }
                19 => {
                    p += vlen * 12;
                    Kind::Enum { size: size_type }
                }
                k => return Err(format!("unknown BTF kind {k}")),
            };
            types.push(Type { name: name(name_off), kind: k });
        }
        let mut by_name = HashMap::new();
        for (i, t) in types.iter().enumerate() {
            if !t.name.is_empty() {
                by_name.entry(t.name.clone()).or_insert(i as u32);
            }
        }
        Ok(Btf { types, by_name, offsets })
    }

    pub fn get(&self, id: u32) -> Result<&Type, String> {
        self.types.get(id as usize).ok_or_else(|| format!("BTF type {id} out of range"))
    }

    /// Follows typedefs and qualifiers.
    pub fn resolve(&self, mut id: u32) -> Result<u32, String> {
        for _ in 0..32 {
            match self.get(id)?.kind {
                Kind::Alias { target } => id = target,
                _ => return Ok(id),
            }
        }
        Err("BTF alias chain too long".into())
    }

    pub fn size_of(&self, id: u32) -> Result<u32, String> {
        let id = self.resolve(id)?;
        match &self.get(id)?.kind {
            Kind::Int { size } | Kind::Enum { size } | Kind::Float { size } | Kind::Struct { size, .. } => Ok(*size),
            Kind::Ptr { .. } => Ok(8),
            Kind::Array { elem, nelems } => Ok(self.size_of(*elem)? * nelems),
            k => Err(format!("BTF type {id} ({k:?}) has no size")),
        }
    }

    pub fn datasec(&self, name: &str) -> Option<&[SecInfo]> {
        let id = *self.by_name.get(name)?;
        match &self.types[id as usize].kind {
            Kind::Datasec { vars } => Some(vars),
            _ => None,
        }
    }
}

/// Fills in what clang leaves for the loader in DATASEC types: the
/// section's size and each variable's offset, which the kernel checks.
pub fn fixup_datasecs(
    raw: &mut [u8],
    btf: &Btf,
    section_size: impl Fn(&str) -> Option<u32>,
    var_offset: impl Fn(&str, &str) -> Option<u32>,
) -> Result<(), String> {
    for (id, t) in btf.types.iter().enumerate() {
        let Kind::Datasec { vars } = &t.kind else { continue };
        let at = btf.offsets[id];
        let size = section_size(&t.name).unwrap_or(0);
        raw[at + 8..at + 12].copy_from_slice(&size.to_le_bytes());
        for (i, v) in vars.iter().enumerate() {
            let var = btf.get(v.ty)?;
            if let Some(off) = var_offset(&t.name, &var.name) {
                let q = at + 12 + i * 12 + 4;
                raw[q..q + 4].copy_from_slice(&off.to_le_bytes());
            }
        }
    }
    Ok(())
}

/// func_info records of `.BTF.ext` by section name: (byte offset, type id).
pub fn func_info(ext: &[u8], btf_strings: impl Fn(u32) -> String) -> Result<HashMap<String, Vec<(u32, u32)>>, String> {
    let mut out = HashMap::new();
    if ext.len() < 16 {
        return Ok(out);
    }
    let hdr_len = u32_at(ext, 4)? as usize;
    let off = u32_at(ext, 8)? as usize;
    let len = u32_at(ext, 12)? as usize;
    if len == 0 {
        return Ok(out);
    }
    let mut p = hdr_len + off;
    let end = p + len;
    let rec = u32_at(ext, p)? as usize;
    p += 4;
    while p < end {
        let sec = btf_strings(u32_at(ext, p)?);
        let n = u32_at(ext, p + 4)? as usize;
        p += 8;
        let mut recs = Vec::with_capacity(n);
        for i in 0..n {
            recs.push((u32_at(ext, p + i * rec)?, u32_at(ext, p + i * rec + 4)?));
        }
        p += n * rec;
        out.insert(sec, recs);
    }
    Ok(out)
}

impl Btf {
    /// A string of the raw section by offset.
    pub fn string_at(raw: &[u8], off: u32) -> String {
        let hdr_len = u32_at(raw, 4).unwrap_or(0) as usize;
        let str_off = u32_at(raw, 16).unwrap_or(0) as usize;
        let s = &raw[(hdr_len + str_off + off as usize).min(raw.len())..];
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        String::from_utf8_lossy(&s[..end]).into_owned()
    }
}
