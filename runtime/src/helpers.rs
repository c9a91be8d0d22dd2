//! Helper functions, with the kernel's numbers, arguments and return codes.
//! A program that calls any other helper is refused when it is loaded.

use crate::interp::{Exec, Flow, MAX_TAIL_CALLS};
use crate::elf::map_type as mt;
use crate::maps::{handle_index, Store, EINVAL};
use crate::vm::{Fault, Redirect, ETH_HLEN, FRAG_SIZE, FRAME_SIZE, TAILROOM, XDP_ABORTED, XDP_FRAME_STRUCT, XDP_REDIRECT};

const EACCES: i64 = 13;
const EAGAIN: i64 = 11;
const EFAULT: i64 = 14;
const EOPNOTSUPP: i64 = 95;

const HELPERS: &[(i32, &str)] = &[
    (1, "map_lookup_elem"),
    (2, "map_update_elem"),
    (3, "map_delete_elem"),
    (5, "ktime_get_ns"),
    (6, "trace_printk"),
    (7, "get_prandom_u32"),
    (8, "get_smp_processor_id"),
    (12, "tail_call"),
    (23, "redirect"),
    (28, "csum_diff"),
    (44, "xdp_adjust_head"),
    (51, "redirect_map"),
    (54, "xdp_adjust_meta"),
    (65, "xdp_adjust_tail"),
    (69, "fib_lookup"),
    (118, "jiffies64"),
    (125, "ktime_get_boot_ns"),
    (130, "ringbuf_output"),
    (131, "ringbuf_reserve"),
    (132, "ringbuf_submit"),
    (133, "ringbuf_discard"),
    (134, "ringbuf_query"),
    (160, "ktime_get_coarse_ns"),
    (181, "loop"),
    (188, "xdp_get_buff_len"),
    (189, "xdp_load_bytes"),
    (190, "xdp_store_bytes"),
    (195, "map_lookup_percpu_elem"),
    (204, "tcp_raw_gen_syncookie_ipv4"),
    (205, "tcp_raw_gen_syncookie_ipv6"),
    (206, "tcp_raw_check_syncookie_ipv4"),
    (207, "tcp_raw_check_syncookie_ipv6"),
];

/// Names of helpers the runtime lacks, for the refusal message.
const KNOWN_MISSING: &[(i32, &str)] = &[
    (9, "skb_store_bytes"),
    (10, "l3_csum_replace"),
    (11, "l4_csum_replace"),
    (14, "get_current_pid_tgid"),
    (25, "perf_event_output"),
    (40, "csum_update"),
    (163, "check_mtu"),
    (208, "ktime_get_tai_ns"),
];

pub fn supported(id: i32) -> bool {
    HELPERS.iter().any(|&(n, _)| n == id)
}

pub fn name(id: i32) -> String {
    HELPERS
        .iter()
        .chain(KNOWN_MISSING)
        .find(|&&(n, _)| n == id)
        .map(|&(_, s)| format!("bpf_{s}"))
        .unwrap_or_else(|| "an unknown helper".into())
}

fn neg(e: i64) -> u64 {
    (-e) as u64
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Program memory as a slice, after checking it: valid until the program
/// or the map it points into changes it, which no caller waits for.
fn read<'m>(x: &Exec, pc: usize, addr: u64, len: usize) -> Result<&'m [u8], Fault> {
    x.check(pc, addr, len as u64, false)?;
    Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
}

fn map_arg(x: &Exec, pc: usize, v: u64) -> Result<usize, Fault> {
    handle_index(v)
        .filter(|&i| i < x.vm.maps.len())
        .ok_or_else(|| Fault::Helper(format!("instruction {pc}: helper called with {v:#x}, which is not a map")))
}

pub fn call(x: &mut Exec, pc: usize, id: i32, a: [u64; 5]) -> Result<Flow, Fault> {
    let v = match id {
        1 | 195 => {
            let m = map_arg(x, pc, a[0])?;
            let key = read(x, pc, a[1], x.vm.maps[m].def.key_size as usize)?;
            let cpu = if id == 195 { a[2] as usize } else { x.vm.cpu };
            if id == 195 && cpu >= x.vm.maps[m].ncpus {
                0
            } else {
                x.vm.maps[m].lookup(key, cpu).unwrap_or(0)
            }
        }
        2 => {
            let m = map_arg(x, pc, a[0])?;
            let (ks, vs) = (x.vm.maps[m].def.key_size as usize, x.vm.maps[m].def.value_size as usize);
            let key = read(x, pc, a[1], ks)?;
            let val = read(x, pc, a[2], vs)?;
            let cpu = x.vm.cpu;
            // A value may point into the same map (an update from one of its
            // own values): copy it first.
            let val = val.to_vec();
            x.vm.maps[m].update(key, &val, a[3], Some(cpu)) as u64
        }
        3 => {
            let m = map_arg(x, pc, a[0])?;
            let key = read(x, pc, a[1], x.vm.maps[m].def.key_size as usize)?;
            x.vm.maps[m].delete(key) as u64
        }
        5 => clock(libc::CLOCK_MONOTONIC),
        6 => 0,
        7 => x.vm.next_random() as u64,
        8 => x.vm.cpu as u64,
        12 => {
            let m = map_arg(x, pc, a[1])?;
            if x.vm.maps[m].def.map_type != mt::PROG_ARRAY {
                return Err(Fault::Helper(format!("instruction {pc}: tail call through a map that is not a program array")));
            }
            let key = (a[2] as u32).to_le_bytes();
            let target = x.vm.maps[m].get(&key).map(|v| u32::from_le_bytes(v[..4].try_into().unwrap()) as usize);
            match target {
                Some(t) if t < x.vm.programs.len() && x.tail_calls < MAX_TAIL_CALLS => {
                    if let Some(why) = &x.vm.programs[t].refused {
                        return Err(Fault::Helper(format!("tail call into a program the runtime cannot run: {why}")));
                    }
                    x.tail_calls += 1;
                    return Ok(Flow::TailCall(t));
                }
                // A missing entry, or too many tail calls: the caller goes on.
                _ => neg(2),
            }
        }
        23 => {
            if a[1] != 0 {
                XDP_ABORTED as u64
            } else {
                x.pkt.redirect = Some(Redirect::Ifindex(a[0] as u32));
                XDP_REDIRECT as u64
            }
        }
        28 => csum_diff(x, pc, a)?,
        44 => adjust_head(x, a[1] as i32 as i64),
        51 => {
            let m = map_arg(x, pc, a[0])?;
            let key = (a[1] as u32).to_le_bytes();
            let map = &x.vm.maps[m];
            // No allocation on this path: it runs for every frame a
            // forwarder sends.
            let target = if matches!(map.def.map_type, mt::DEVMAP | mt::DEVMAP_HASH | mt::CPUMAP | mt::XSKMAP) { map.ref_u32(&key) } else { None };
            if let Some(target) = target {
                x.pkt.redirect = Some(Redirect::Map { map: m, key: a[1] as u32, target });
                XDP_REDIRECT as u64
            } else {
                // The low two bits of flags are the action when the entry is missing.
                a[2] & 3
            }
        }
        54 => adjust_meta(x, a[1] as i32 as i64),
        65 => adjust_tail(x, a[1] as i32 as i64),
        69 => fib_lookup(x, pc, a)?,
        118 => clock(libc::CLOCK_MONOTONIC_COARSE) / 4_000_000,
        125 => clock(libc::CLOCK_BOOTTIME),
        130 => {
            let m = map_arg(x, pc, a[0])?;
            if a[3] & !3 != 0 {
                neg(EINVAL)
            } else {
                let data = read(x, pc, a[1], a[2] as usize)?;
                match x.vm.maps[m].ringbuf() {
                    Some(mut r) => {
                        if r.output(data) { 0 } else { neg(EAGAIN) }
                    }
                    None => return Err(Fault::Helper(format!("instruction {pc}: ringbuf_output to a map that is not a ring buffer"))),
                }
            }
        }
        131 => {
            let m = map_arg(x, pc, a[0])?;
            match x.vm.maps[m].ringbuf() {
                Some(mut r) if a[2] == 0 => r.reserve(a[1] as usize).unwrap_or(0),
                Some(_) => 0,
                None => return Err(Fault::Helper(format!("instruction {pc}: ringbuf_reserve from a map that is not a ring buffer"))),
            }
        }
        132 | 133 => {
            let done = x.vm.maps.iter().any(|m| m.ringbuf().map(|mut r| r.submit(a[0], id == 133)).unwrap_or(false));
            if !done {
                return Err(Fault::Helper(format!("instruction {pc}: ringbuf submit/discard of {:#x}, which is no reserved record", a[0])));
            }
            0
        }
        134 => {
            let m = map_arg(x, pc, a[0])?;
            match &x.vm.maps[m].store {
                Store::Ringbuf(r) => match a[1] {
                    2 => r.lock().unwrap().size as u64,
                    _ => 0,
                },
                _ => 0,
            }
        }
        160 => clock(libc::CLOCK_MONOTONIC_COARSE),
        181 => bpf_loop(x, pc, a)?,
        188 => x.pkt.len() as u64,
        189 | 190 => xdp_bytes(x, pc, a, id == 190)?,
        // SYN cookies need the kernel's secret, which userspace has not:
        // they fail as on a kernel without CONFIG_SYN_COOKIES (the
        // firewall's synproxy then drops what it would answer).
        204..=207 => neg(EOPNOTSUPP),
        _ => return Err(Fault::Helper(format!("instruction {pc}: helper {} ({id}) is not supported", name(id)))),
    };
    Ok(Flow::Value(v))
}

/// bpf_csum_diff(from, from_size, to, to_size, seed), as the kernel the
/// runtime behaves as computes it. Up to 6.12: the sum of `to` and of
/// `from` inverted, added to seed, as x86's csum_partial leaves it (32
/// bits, not folded), -EINVAL unless both sizes are multiples of 4 adding
/// up to 512 at most. From 6.13: csum(to) - csum(from) with seed, folded to
/// 16 bits (from32to16), any sizes.
fn csum_diff(x: &Exec, pc: usize, a: [u64; 5]) -> Result<u64, Fault> {
    let (fs, ts) = (a[1] as u32 as usize, a[3] as u32 as usize);
    let folded = x.vm.sem.csum_diff_folded;
    if !folded && ((fs | ts) & 3 != 0 || fs + ts > 512) {
        return Ok(neg(EINVAL));
    }
    let from: &[u8] = if fs > 0 { read(x, pc, a[0], fs)? } else { &[] };
    let to: &[u8] = if ts > 0 { read(x, pc, a[2], ts)? } else { &[] };
    Ok(csum_diff_of(from, to, a[4] as u32, folded))
}

/// The computation of bpf_csum_diff, either kernel's.
pub fn csum_diff_of(from: &[u8], to: &[u8], seed: u32, folded: bool) -> u64 {
    if !folded {
        // csum_partial over ~from then to, in one buffer.
        let inv: Vec<u8> = from.iter().map(|b| !b).collect();
        return csum_add(csum_partial(&inv, seed), csum_partial(to, 0)) as u64;
    }
    let r = match (from.is_empty(), to.is_empty()) {
        (false, false) => csum_add(csum_partial(to, seed), !csum_partial(from, 0)),
        (true, false) => csum_partial(to, seed),
        (false, true) => !csum_partial(from, !seed),
        (true, true) => seed,
    };
    // from32to16
    let r = (r & 0xffff) + (r >> 16);
    ((r & 0xffff) + (r >> 16)) as u64
}

/// x86's csum_partial: the one's-complement sum of little-endian words
/// (a short tail padded with zeros), folded to 32 bits with the carries.
fn csum_partial(b: &[u8], seed: u32) -> u32 {
    let mut sum = seed as u64;
    let mut words = b.chunks_exact(4);
    for w in &mut words {
        sum += u32::from_le_bytes(w.try_into().unwrap()) as u64;
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        sum += u32::from_le_bytes(w) as u64;
    }
    while sum >> 32 != 0 {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    sum as u32
}

fn csum_add(a: u32, b: u32) -> u32 {
    let (s, c) = a.overflowing_add(b);
    s + c as u32
}

/// bpf_xdp_load_bytes / bpf_xdp_store_bytes(ctx, offset, buf, len): bytes
/// of the frame counted from data, across its pages.
fn xdp_bytes(x: &mut Exec, pc: usize, a: [u64; 5], store: bool) -> Result<u64, Fault> {
    let (off, len) = (a[1] as u32 as usize, a[3] as u32 as usize);
    if off > 0xffff || len > 0xffff {
        return Ok(neg(EFAULT));
    }
    if off + len > x.pkt.len() {
        return Ok(neg(EINVAL));
    }
    x.check(pc, a[2], len as u64, !store)?;
    let buf = unsafe { std::slice::from_raw_parts_mut(a[2] as *mut u8, len) };
    let p = &mut *x.pkt;
    let (data, data_end) = (p.data, p.data_end);
    let mut done = 0;
    let mut pos = off;
    let linear = data_end - data;
    if pos < linear {
        let n = (linear - pos).min(len);
        let f = &mut p.frame()[data + pos..data + pos + n];
        if store { f.copy_from_slice(&buf[..n]) } else { buf[..n].copy_from_slice(f) }
        done = n;
        pos += n;
    }
    let mut start = linear;
    for frag in p.frags.iter_mut() {
        if done == len {
            break;
        }
        let end = start + frag.len();
        if pos < end {
            let n = (end - pos).min(len - done);
            let f = &mut frag[pos - start..pos - start + n];
            if store { f.copy_from_slice(&buf[done..done + n]) } else { buf[done..done + n].copy_from_slice(f) }
            done += n;
            pos += n;
        }
        start = end;
    }
    Ok(0)
}

fn adjust_head(x: &mut Exec, off: i64) -> u64 {
    let p = &mut *x.pkt;
    let metalen = p.data - p.meta;
    let data = p.data as i64 + off;
    if data < (XDP_FRAME_STRUCT + metalen) as i64 || data > p.data_end as i64 - ETH_HLEN as i64 {
        return neg(EINVAL);
    }
    let new_meta = (p.meta as i64 + off) as usize;
    if metalen > 0 {
        let (m, d) = (p.meta, p.data);
        p.frame().copy_within(m..d, new_meta);
    }
    p.meta = new_meta;
    p.data = data as usize;
    0
}

fn adjust_meta(x: &mut Exec, off: i64) -> u64 {
    let p = &mut *x.pkt;
    let meta = p.meta as i64 + off;
    if meta < XDP_FRAME_STRUCT as i64 || meta > p.data as i64 {
        return neg(EINVAL);
    }
    let metalen = p.data as i64 - meta;
    if metalen & 3 != 0 || metalen > 255 {
        return neg(EACCES);
    }
    p.meta = meta as usize;
    0
}

fn adjust_tail(x: &mut Exec, off: i64) -> u64 {
    let p = &mut *x.pkt;
    if !p.frags.is_empty() {
        return adjust_frags_tail(p, off);
    }
    let end = p.data_end as i64 + off;
    if end > (FRAME_SIZE - TAILROOM) as i64 || end < (p.data + ETH_HLEN) as i64 {
        return neg(EINVAL);
    }
    if off > 0 {
        let de = p.data_end;
        p.frame()[de..end as usize].fill(0);
    }
    p.data_end = end as usize;
    0
}

/// bpf_xdp_adjust_tail on a multi-buffer frame: the last page grows up to
/// its end; shrinking takes pages from the end, drops those it empties,
/// and the linear part's tail once none is left.
fn adjust_frags_tail(p: &mut crate::vm::Packet, off: i64) -> u64 {
    if off >= 0 {
        let last = p.frags.last_mut().unwrap();
        if off as usize > FRAG_SIZE - last.len() {
            return neg(EINVAL);
        }
        last.resize(last.len() + off as usize, 0);
        return 0;
    }
    let mut shrink = (-off) as usize;
    if shrink as i64 > p.len() as i64 - ETH_HLEN as i64 {
        return neg(EINVAL);
    }
    while shrink > 0 {
        let Some(last) = p.frags.last_mut() else { break };
        let n = shrink.min(last.len());
        last.truncate(last.len() - n);
        shrink -= n;
        if last.is_empty() {
            p.frags.pop();
        }
    }
    p.data_end -= shrink;
    0
}

/// bpf_fib_lookup(ctx, params, plen, flags): the namespace's FIB and
/// neighbours through rtnetlink; the answer written into params as the
/// kernel writes it. Flags other than DIRECT and OUTPUT are refused.
fn fib_lookup(x: &mut Exec, pc: usize, a: [u64; 5]) -> Result<u64, Fault> {
    const PARAMS: usize = 64;
    if (a[2] as usize) < PARAMS || a[3] & !3 != 0 {
        return Ok(neg(EINVAL));
    }
    x.check(pc, a[1], PARAMS as u64, true)?;
    let b = unsafe { std::slice::from_raw_parts_mut(a[1] as *mut u8, PARAMS) };
    let mut p = crate::fib::Params {
        family: b[0],
        tot_len: u16::from_le_bytes([b[6], b[7]]),
        ifindex: u32::from_le_bytes(b[8..12].try_into().unwrap()),
        src: [0; 16],
        dst: [0; 16],
    };
    p.src.copy_from_slice(&b[16..32]);
    p.dst.copy_from_slice(&b[32..48]);
    if a[3] & 2 != 0 {
        // BPF_FIB_LOOKUP_OUTPUT: no forwarding check on the arrival device.
        p.ifindex = 0;
    }
    match crate::fib::lookup(&p) {
        Ok(ans) => {
            b[8..12].copy_from_slice(&ans.ifindex.to_le_bytes());
            b[12..16].copy_from_slice(&ans.metric.to_le_bytes());
            if let Some(g) = ans.gateway {
                let n = if p.family == 2 { 4 } else { 16 };
                b[32..32 + n].copy_from_slice(&g[..n]);
            }
            b[52..58].copy_from_slice(&ans.smac);
            b[58..64].copy_from_slice(&ans.dmac);
            Ok(crate::fib::SUCCESS)
        }
        Err(code) => Ok(code),
    }
}

/// bpf_loop(nr, callback, ctx, flags): calls callback(i, ctx) until it
/// returns 1 or nr calls are done; returns the number of calls.
fn bpf_loop(x: &mut Exec, _pc: usize, a: [u64; 5]) -> Result<u64, Fault> {
    if let Err(code) = loop_args(a) {
        return Ok(code);
    }
    let target = a[1] as usize;
    // Callbacks belong to the program that names them.
    let prog = x.current.ok_or_else(|| Fault::Bad("bpf_loop outside a program".into()))?;
    for i in 0..a[0] {
        let r = x.call(prog, target, [i, a[2], 0, 0, 0])?;
        if r == 1 {
            return Ok(i + 1);
        }
    }
    Ok(a[0])
}

/// bpf_loop's checks of its flags and count, shared by both engines: the
/// kernel's error code when they fail.
pub fn loop_args(a: [u64; 5]) -> Result<(), u64> {
    const MAX_LOOPS: u64 = 1 << 23;
    if a[3] != 0 {
        return Err(neg(EINVAL));
    }
    if a[0] > MAX_LOOPS {
        // The verifier inlines bpf_loop when its flags are a known zero,
        // and the inlined code sets -E2BIG with a 32-bit move.
        return Err(neg(crate::maps::E2BIG) as u32 as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::csum_diff_of;

    #[test]
    fn csum_diff_by_kernel() {
        let to = [0x78, 0x56, 0x34, 0x12, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0];
        // Up to 6.12: csum_partial's 32 bits, the carry added back.
        assert_eq!(csum_diff_of(&[], &to, 0, false), 0x1234_5679);
        // From 6.13: folded to 16 bits.
        assert_eq!(csum_diff_of(&[], &to, 0, true), 0x68ad);
        // Diffing a value against itself gives the seed back, folded.
        assert_eq!(csum_diff_of(&to[..4], &to[..4], 0x1_0001, true), 0x0002);
        // Pulling data: ~csum(from, ~seed), then folded.
        assert_eq!(csum_diff_of(&[1, 0, 0, 0], &[], 0, true), 0xfffe);
        // Any size from 6.13: a tail of 2 bytes is padded with zeros.
        assert_eq!(csum_diff_of(&[], &[0x34, 0x12], 0, true), 0x1234);
    }
}
