//! Classic pcap files of Ethernet frames, read and written.

use std::io::{Read, Write};

pub fn read(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut b = Vec::new();
    std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut b)).map_err(|e| format!("{path}: {e}"))?;
    if b.len() < 24 {
        return Err(format!("{path}: not a pcap file (shorter than its header)"));
    }
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    let be = match magic {
        0xa1b2c3d4 | 0xa1b23c4d => false,
        0xd4c3b2a1 | 0x4d3cb2a1 => true,
        _ => return Err(format!("{path}: not a pcap file (magic {magic:#x}); pcapng is not read")),
    };
    let u32_at = |o: usize| -> u32 {
        let w: [u8; 4] = b[o..o + 4].try_into().unwrap();
        if be { u32::from_be_bytes(w) } else { u32::from_le_bytes(w) }
    };
    if u32_at(20) != 1 {
        return Err(format!("{path}: link type {} is not Ethernet", u32_at(20)));
    }
    let mut out = Vec::new();
    let mut p = 24;
    while p + 16 <= b.len() {
        let incl = u32_at(p + 8) as usize;
        p += 16;
        if p + incl > b.len() {
            return Err(format!("{path}: packet {} is cut short", out.len() + 1));
        }
        out.push(b[p..p + incl].to_vec());
        p += incl;
    }
    Ok(out)
}

pub fn write(path: &str, pkts: &[Vec<u8>]) -> Result<(), String> {
    let mut hdr = Vec::new();
    hdr.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    hdr.extend_from_slice(&2u16.to_le_bytes());
    hdr.extend_from_slice(&4u16.to_le_bytes());
    hdr.extend_from_slice(&[0; 8]);
    hdr.extend_from_slice(&65535u32.to_le_bytes());
    hdr.extend_from_slice(&1u32.to_le_bytes());
    for p in pkts {
        hdr.extend_from_slice(&[0; 8]);
        hdr.extend_from_slice(&(p.len() as u32).to_le_bytes());
        hdr.extend_from_slice(&(p.len() as u32).to_le_bytes());
        hdr.extend_from_slice(p);
    }
    std::fs::File::create(path).and_then(|mut f| f.write_all(&hdr)).map_err(|e| format!("{path}: {e}"))
}
