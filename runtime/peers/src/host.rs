//! What the harness gives engines that have no XDP of their own: a context
//! and frame below 4 GiB, and host functions over fastpath-rt's maps with
//! the kernel's semantics for the helpers the benchmark programs call.
//!
//! One engine runs at a time, so the host functions find its maps and frame
//! through `bind`.

use std::ptr;

use fastpath_rt::maps::{handle_index, Map};
use fastpath_rt::vm::{ETH_HLEN, FRAME_SIZE, HEADROOM, TAILROOM};

/// The xdp_md as the program reads it: 32-bit fields, which hold real
/// addresses because the frame lies below 4 GiB.
#[repr(C)]
pub struct Ctx32 {
    pub data: u32,
    pub data_end: u32,
    pub data_meta: u32,
    pub ingress_ifindex: u32,
    pub rx_queue_index: u32,
    pub egress_ifindex: u32,
}

pub const CTX_LEN: usize = std::mem::size_of::<Ctx32>();

/// A context and its frame in two pages mapped below 4 GiB.
pub struct Low {
    base: *mut u8,
}

impl Low {
    pub fn new(frame: &[u8]) -> Result<Low, String> {
        if frame.len() < ETH_HLEN || frame.len() > FRAME_SIZE - HEADROOM - TAILROOM {
            return Err(format!(
                "frame of {} bytes: the harness takes linear frames of {ETH_HLEN} to {} bytes",
                frame.len(),
                FRAME_SIZE - HEADROOM - TAILROOM
            ));
        }
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                2 * FRAME_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "mmap below 4 GiB: {}",
                std::io::Error::last_os_error()
            ));
        }
        let low = Low {
            base: base as *mut u8,
        };
        unsafe { ptr::copy_nonoverlapping(frame.as_ptr(), low.frame().add(HEADROOM), frame.len()) };
        let data = low.frame() as u64 + HEADROOM as u64;
        let ctx = low.ctx();
        unsafe {
            (*ctx).data = data as u32;
            (*ctx).data_meta = data as u32;
            (*ctx).data_end = (data + frame.len() as u64) as u32;
            (*ctx).ingress_ifindex = 1;
        }
        Ok(low)
    }

    pub fn ctx(&self) -> *mut Ctx32 {
        self.base as *mut Ctx32
    }

    pub fn frame(&self) -> *mut u8 {
        unsafe { self.base.add(FRAME_SIZE) }
    }

    /// The context's bytes, for engines that take it as a slice.
    pub fn ctx_slice(&self) -> &'static mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.base, CTX_LEN) }
    }

    /// The frame's page, for engines that bound accesses to a slice.
    pub fn frame_slice(&self) -> &'static mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.frame(), FRAME_SIZE) }
    }

    /// The frame as the program left it.
    pub fn output(&self) -> Vec<u8> {
        let c = unsafe { &*self.ctx() };
        unsafe {
            std::slice::from_raw_parts(c.data as usize as *const u8, (c.data_end - c.data) as usize)
        }
        .to_vec()
    }
}

impl Drop for Low {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base as *mut libc::c_void, 2 * FRAME_SIZE) };
    }
}

static mut MAPS: *const Vec<Map> = ptr::null();
static mut FRAME: *mut u8 = ptr::null_mut();
static mut RNG: u64 = 0x853c_49e6_748f_ea9b;

/// Points the host functions at one engine's maps and frame.
pub fn bind(maps: &Vec<Map>, low: &Low) {
    unsafe {
        MAPS = maps;
        FRAME = low.frame();
    }
}

fn map(h: u64) -> Option<&'static Map> {
    let maps = unsafe { MAPS.as_ref()? };
    maps.get(handle_index(h)?)
}

unsafe fn bytes<'a>(p: u64, n: usize) -> &'a [u8] {
    std::slice::from_raw_parts(p as *const u8, n)
}

const EINVAL: u64 = (-22i64) as u64;
const EAGAIN: u64 = (-11i64) as u64;
const ENOENT: u64 = (-2i64) as u64;

fn map_lookup_elem(m: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    match map(m) {
        Some(m) => m
            .lookup(unsafe { bytes(key, m.def.key_size as usize) }, 0)
            .unwrap_or(0),
        None => 0,
    }
}

fn map_update_elem(m: u64, key: u64, value: u64, flags: u64, _: u64) -> u64 {
    match map(m) {
        Some(m) => m.update(
            unsafe { bytes(key, m.def.key_size as usize) },
            unsafe { bytes(value, m.def.value_size as usize) },
            flags,
            Some(0),
        ) as u64,
        None => EINVAL,
    }
}

fn map_delete_elem(m: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    match map(m) {
        Some(m) => m.delete(unsafe { bytes(key, m.def.key_size as usize) }) as u64,
        None => ENOENT,
    }
}

fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    unsafe {
        RNG ^= RNG >> 12;
        RNG ^= RNG << 25;
        RNG ^= RNG >> 27;
        RNG.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }
}

fn get_smp_processor_id(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    0
}

/// bpf_csum_diff with the semantics of the kernel fastpath-rt behaves as.
fn csum_diff(from: u64, from_size: u64, to: u64, to_size: u64, seed: u64) -> u64 {
    let (fs, ts) = (from_size as u32 as usize, to_size as u32 as usize);
    let folded = fastpath_rt::kernel::semantics().csum_diff_folded;
    if !folded && ((fs | ts) & 3 != 0 || fs + ts > 512) {
        return EINVAL;
    }
    let f = if fs > 0 {
        unsafe { bytes(from, fs) }
    } else {
        &[]
    };
    let t = if ts > 0 {
        unsafe { bytes(to, ts) }
    } else {
        &[]
    };
    fastpath_rt::helpers::csum_diff_of(f, t, seed as u32, folded)
}

/// bpf_xdp_adjust_tail on a linear frame.
fn xdp_adjust_tail(ctx: u64, off: u64, _: u64, _: u64, _: u64) -> u64 {
    let c = unsafe { &mut *(ctx as *mut Ctx32) };
    let base = unsafe { FRAME } as i64;
    let off = off as i32 as i64;
    let (data, end) = (c.data as i64 - base, c.data_end as i64 - base + off);
    if end > (FRAME_SIZE - TAILROOM) as i64 || end < data + ETH_HLEN as i64 {
        return EINVAL;
    }
    if off > 0 {
        unsafe { ptr::write_bytes((c.data_end as usize) as *mut u8, 0, off as usize) };
    }
    c.data_end = (base + end) as u32;
    0
}

fn ringbuf_output(m: u64, data: u64, size: u64, flags: u64, _: u64) -> u64 {
    if flags & !3 != 0 {
        return EINVAL;
    }
    match map(m).and_then(|m| m.ringbuf()) {
        Some(mut r) => {
            if r.output(unsafe { bytes(data, size as usize) }) {
                0
            } else {
                EAGAIN
            }
        }
        None => EINVAL,
    }
}

fn ringbuf_reserve(m: u64, size: u64, flags: u64, _: u64, _: u64) -> u64 {
    match map(m).and_then(|m| m.ringbuf()) {
        Some(mut r) if flags == 0 => r.reserve(size as usize).unwrap_or(0),
        _ => 0,
    }
}

fn finish(p: u64, discard: bool) -> u64 {
    if let Some(maps) = unsafe { MAPS.as_ref() } {
        for m in maps.iter() {
            if let Some(mut r) = m.ringbuf() {
                if r.submit(p, discard) {
                    break;
                }
            }
        }
    }
    0
}

fn ringbuf_submit(p: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    finish(p, false)
}

fn ringbuf_discard(p: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    finish(p, true)
}

/// A host function in both calling conventions: Rust's, for rbpf, and C's,
/// for engines loaded from shared libraries.
pub struct Helper {
    pub id: u32,
    pub name: &'static str,
    pub rust: fn(u64, u64, u64, u64, u64) -> u64,
    pub c: extern "C" fn(u64, u64, u64, u64, u64) -> u64,
}

macro_rules! helpers {
    ($(($id:expr, $f:ident)),* $(,)?) => {
        mod c_abi {
            $(pub extern "C" fn $f(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 { super::$f(a, b, c, d, e) })*
        }
        pub const HELPERS: &[Helper] = &[$(Helper { id: $id, name: stringify!($f), rust: $f, c: c_abi::$f }),*];
    };
}

helpers!(
    (1, map_lookup_elem),
    (2, map_update_elem),
    (3, map_delete_elem),
    (5, ktime_get_ns),
    (7, get_prandom_u32),
    (8, get_smp_processor_id),
    (28, csum_diff),
    (65, xdp_adjust_tail),
    (130, ringbuf_output),
    (131, ringbuf_reserve),
    (132, ringbuf_submit),
    (133, ringbuf_discard),
);

/// One entry point for every helper, for engines that dispatch calls
/// through the host by number.
pub extern "C" fn dispatch(
    a: u64,
    b: u64,
    c: u64,
    d: u64,
    e: u64,
    id: u32,
    _cookie: *mut libc::c_void,
) -> u64 {
    match HELPERS.iter().find(|h| h.id == id) {
        Some(h) => (h.rust)(a, b, c, d, e),
        None => 0,
    }
}
