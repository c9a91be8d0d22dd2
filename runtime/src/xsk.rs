//! AF_XDP I/O: one socket per queue of each device, the sockets of one
//! queue sharing one UMEM of 4 KiB frames (XDP_SHARED_UMEM), so that frames
//! go from one port to another without a copy. A small XDP program in the
//! kernel redirects every frame of the queue to the socket (or passes it when
//! none is bound). The program and its link are the process's: they go when
//! it exits.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::{bpf, put32, put64};
use crate::insn::{Insn, PSEUDO_MAP_FD};

const AF_XDP: i32 = 44;
const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_SHARED_UMEM: u16 = 1 << 0;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const PGOFF_RX: i64 = 0;
const PGOFF_TX: i64 = 0x8000_0000;
const PGOFF_FILL: i64 = 0x1_0000_0000;
const PGOFF_COMP: i64 = 0x1_8000_0000;

pub const FRAME: usize = 4096;
pub const RING: u32 = 2048;

fn errno(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// A single-producer, single-consumer ring shared with the kernel.
struct Ring<T: Copy> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    map: *mut libc::c_void,
    map_len: usize,
}

impl<T: Copy> Ring<T> {
    fn map(fd: i32, off: &RingOffset, pgoff: i64) -> Result<Ring<T>, String> {
        let len = off.desc as usize + RING as usize * std::mem::size_of::<T>();
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_POPULATE, fd, pgoff) };
        if p == libc::MAP_FAILED {
            return Err(errno("mmap an AF_XDP ring"));
        }
        let at = |o: u64| unsafe { (p as *mut u8).add(o as usize) };
        Ok(Ring {
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            descs: at(off.desc) as *mut T,
            mask: RING - 1,
            size: RING,
            map: p,
            map_len: len,
        })
    }

    /// Entries ready to consume.
    fn available(&self) -> (u32, u32) {
        let prod = unsafe { (*self.producer).load(Ordering::Acquire) };
        let cons = unsafe { (*self.consumer).load(Ordering::Relaxed) };
        (cons, prod.wrapping_sub(cons))
    }

    fn get(&self, i: u32) -> T {
        unsafe { *self.descs.add((i & self.mask) as usize) }
    }

    fn release(&self, n: u32) {
        unsafe {
            let c = (*self.consumer).load(Ordering::Relaxed);
            (*self.consumer).store(c.wrapping_add(n), Ordering::Release);
        }
    }

    /// Free slots to produce into.
    fn free(&self) -> (u32, u32) {
        let prod = unsafe { (*self.producer).load(Ordering::Relaxed) };
        let cons = unsafe { (*self.consumer).load(Ordering::Acquire) };
        (prod, self.size - prod.wrapping_sub(cons))
    }

    /// The kernel asks to be woken (XDP_USE_NEED_WAKEUP).
    fn needs_wakeup(&self) -> bool {
        unsafe { (*self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0 }
    }

    fn put(&self, i: u32, v: T) {
        unsafe { *self.descs.add((i & self.mask) as usize) = v }
    }

    fn submit(&self, n: u32) {
        unsafe {
            let p = (*self.producer).load(Ordering::Relaxed);
            (*self.producer).store(p.wrapping_add(n), Ordering::Release);
        }
    }
}

impl<T: Copy> Drop for Ring<T> {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// The frames of one thread's sockets: one UMEM that every socket of the
/// thread shares (XDP_SHARED_UMEM), so a frame received on one port is
/// sent from another without a copy, and one list of the frames that are
/// free.
pub struct Umem {
    mem: *mut u8,
    len: usize,
    free: Vec<u64>,
}

unsafe impl Send for Umem {}

impl Drop for Umem {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.mem as *mut libc::c_void, self.len) };
    }
}

impl Umem {
    pub fn new(frames: usize) -> Result<Umem, String> {
        let len = frames * FRAME;
        let mem = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0) };
        if mem == libc::MAP_FAILED {
            return Err(errno("allocate the UMEM"));
        }
        Ok(Umem { mem: mem as *mut u8, len, free: (0..frames as u64).rev().map(|i| i * FRAME as u64).collect() })
    }

    /// The chunk a descriptor's address falls in: FRAME bytes.
    pub fn chunk(&mut self, addr: u64) -> *mut u8 {
        unsafe { self.mem.add((addr & !(FRAME as u64 - 1)) as usize) }
    }

    /// The frame a descriptor points to.
    pub fn frame(&mut self, d: &Desc) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.mem.add(d.addr as usize), d.len as usize) }
    }

    pub fn recycle(&mut self, addr: u64) {
        self.free.push(addr & !(FRAME as u64 - 1));
    }

    pub fn free_frames(&self) -> usize {
        self.free.len()
    }
}

/// One AF_XDP socket: its four rings, on the thread's UMEM.
pub struct Socket {
    pub fd: i32,
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    pub zero_copy: bool,
    /// Bound with XDP_USE_NEED_WAKEUP: the kernel says when it must be
    /// woken to send or to receive.
    pub need_wakeup: bool,
    /// Frames given to the kernel (fill ring, TX ring) not yet back.
    pub outstanding: usize,
}

impl Drop for Socket {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}

fn setsockopt<T>(fd: i32, opt: i32, v: &T) -> Result<(), String> {
    let r = unsafe { libc::setsockopt(fd, SOL_XDP, opt, v as *const T as *const libc::c_void, std::mem::size_of::<T>() as u32) };
    if r < 0 {
        return Err(errno(&format!("AF_XDP socket option {opt}")));
    }
    Ok(())
}

impl Socket {
    /// Opens a socket on the interface's queue. The first socket of a UMEM
    /// registers it and binds zero-copy if the driver can, copy mode
    /// otherwise; the others share it (XDP_SHARED_UMEM, same mode) with
    /// fill and completion rings of their own.
    pub fn open(umem: &mut Umem, first: Option<&Socket>, ifindex: u32, queue: u32, need_wakeup: bool) -> Result<Socket, String> {
        let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(errno("open an AF_XDP socket (the kernel needs CONFIG_XDP_SOCKETS)"));
        }
        let close = |e: String| {
            unsafe { libc::close(fd) };
            e
        };
        if first.is_none() {
            #[repr(C)]
            struct UmemReg {
                addr: u64,
                len: u64,
                chunk_size: u32,
                headroom: u32,
                flags: u32,
                pad: u32,
            }
            let reg = UmemReg { addr: umem.mem as u64, len: umem.len as u64, chunk_size: FRAME as u32, headroom: 0, flags: 0, pad: 0 };
            setsockopt(fd, XDP_UMEM_REG, &reg).map_err(close)?;
        }
        for opt in [XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING, XDP_TX_RING] {
            setsockopt(fd, opt, &RING).map_err(close)?;
        }
        let mut off = MmapOffsets::default();
        let mut len = std::mem::size_of::<MmapOffsets>() as u32;
        if unsafe { libc::getsockopt(fd, SOL_XDP, XDP_MMAP_OFFSETS, &mut off as *mut _ as *mut libc::c_void, &mut len) } < 0 {
            return Err(close(errno("read the AF_XDP ring offsets")));
        }
        let rx = Ring::map(fd, &off.rx, PGOFF_RX).map_err(close)?;
        let tx = Ring::map(fd, &off.tx, PGOFF_TX).map_err(close)?;
        let fill = Ring::map(fd, &off.fr, PGOFF_FILL).map_err(close)?;
        let comp = Ring::map(fd, &off.cr, PGOFF_COMP).map_err(close)?;
        #[repr(C)]
        struct SockaddrXdp {
            family: u16,
            flags: u16,
            ifindex: u32,
            queue: u32,
            shared: u32,
        }
        let mut zero_copy = first.map(|f| f.zero_copy).unwrap_or(true);
        let mut bound = false;
        // A socket that shares the UMEM takes need_wakeup from the first.
        let nw = if need_wakeup { XDP_USE_NEED_WAKEUP } else { 0 };
        let tries: &[(u16, u32)] = match first {
            Some(f) => &[(XDP_SHARED_UMEM, f.fd as u32)],
            None => &[(XDP_ZEROCOPY | nw, 0), (XDP_COPY | nw, 0)],
        };
        for &(flags, shared) in tries {
            let sa = SockaddrXdp { family: AF_XDP as u16, flags, ifindex, queue, shared };
            if unsafe { libc::bind(fd, &sa as *const _ as *const libc::sockaddr, std::mem::size_of::<SockaddrXdp>() as u32) } == 0 {
                bound = true;
                break;
            }
            zero_copy = false;
        }
        if !bound {
            let e = errno(&format!("bind an AF_XDP socket to interface {ifindex} queue {queue}{}", if first.is_some() { " sharing the UMEM" } else { "" }));
            drop((rx, tx, fill, comp));
            return Err(close(e));
        }
        let need_wakeup = first.map(|f| f.need_wakeup).unwrap_or(need_wakeup);
        let mut s = Socket { fd, rx, tx, fill, comp, zero_copy, need_wakeup, outstanding: 0 };
        s.refill(umem, RING as usize);
        Ok(s)
    }

    /// Gives the kernel up to `max` free frames to receive into.
    pub fn refill(&mut self, umem: &mut Umem, max: usize) {
        let (prod, room) = self.fill.free();
        let n = (room as usize).min(umem.free.len()).min(max) as u32;
        for i in 0..n {
            let a = umem.free.pop().unwrap();
            self.fill.put(prod.wrapping_add(i), a);
        }
        if n > 0 {
            self.fill.submit(n);
            self.outstanding += n as usize;
        }
    }

    /// Takes back the frames the kernel has sent.
    pub fn reclaim(&mut self, umem: &mut Umem) {
        let (cons, n) = self.comp.available();
        for i in 0..n {
            umem.recycle(self.comp.get(cons.wrapping_add(i)));
        }
        if n > 0 {
            self.comp.release(n);
            self.outstanding -= n as usize;
        }
    }

    /// Receives up to `max` frames, in one pass over the ring; the caller
    /// sends each on (`send`) or gives it back to the UMEM.
    pub fn recv(&mut self, max: u32, out: &mut Vec<Desc>) {
        let (cons, n) = self.rx.available();
        let n = n.min(max);
        for i in 0..n {
            out.push(self.rx.get(cons.wrapping_add(i)));
        }
        if n > 0 {
            self.rx.release(n);
            self.outstanding -= n as usize;
        }
    }

    /// Queues frames for sending, in one pass; frames that do not fit the
    /// ring go back to the UMEM. Returns how many were queued; `kick` makes
    /// the kernel send them.
    pub fn enqueue(&mut self, umem: &mut Umem, descs: &[Desc]) -> usize {
        let (prod, room) = self.tx.free();
        let n = room.min(descs.len() as u32);
        for (i, d) in descs[..n as usize].iter().enumerate() {
            self.tx.put(prod.wrapping_add(i as u32), *d);
        }
        for d in &descs[n as usize..] {
            umem.recycle(d.addr);
        }
        if n > 0 {
            self.tx.submit(n);
            self.outstanding += n as usize;
        }
        n as usize
    }

    /// Queues frames and makes the kernel send them (`enqueue`, `kick`).
    pub fn send(&mut self, umem: &mut Umem, descs: &[Desc]) -> usize {
        let n = self.enqueue(umem, descs);
        if n > 0 {
            self.kick(Kick::Drain);
        }
        n
    }

    /// Makes the kernel send what the TX ring holds, as `how` says.
    /// Returns the sendto calls made.
    pub fn kick(&mut self, how: Kick) -> u32 {
        let once = || unsafe { libc::sendto(self.fd, std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        match how {
            Kick::Drain => {
                for i in 0..8 {
                    once();
                    if self.tx.free().1 == self.tx.size {
                        return i + 1;
                    }
                }
                8
            }
            Kick::Once => {
                once();
                1
            }
            Kick::Needed => {
                if self.need_wakeup && !self.tx.needs_wakeup() {
                    return 0;
                }
                once();
                1
            }
        }
    }

    /// The kernel asks for a wake-up to fill the RX ring (need_wakeup on
    /// the fill ring); always true without need_wakeup.
    pub fn rx_needs_wakeup(&self) -> bool {
        !self.need_wakeup || self.fill.needs_wakeup()
    }

    /// Busy polling: the socket's receive path polls the driver.
    pub fn busy_poll(&self) -> Result<(), String> {
        const SO_BUSY_POLL: i32 = 46;
        const SO_PREFER_BUSY_POLL: i32 = 69;
        const SO_BUSY_POLL_BUDGET: i32 = 70;
        for (opt, v) in [(SO_PREFER_BUSY_POLL, 1i32), (SO_BUSY_POLL, 20), (SO_BUSY_POLL_BUDGET, 64)] {
            let r = unsafe { libc::setsockopt(self.fd, libc::SOL_SOCKET, opt, &v as *const i32 as *const libc::c_void, 4) };
            if r < 0 {
                return Err(errno(&format!("busy-poll socket option {opt}")));
            }
        }
        Ok(())
    }

    /// Lets the kernel run the receive path now (busy polling).
    pub fn poke(&self) {
        unsafe { libc::recvfrom(self.fd, std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut()) };
    }

    pub fn wait(&self, ms: i32) {
        let mut p = libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 };
        unsafe { libc::poll(&mut p, 1, ms) };
    }
}

/// How the TX ring is kicked after a batch is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kick {
    /// sendto until the ring is empty, at most 8 times: in copy mode each
    /// call sends a bounded batch (32 frames).
    Drain,
    /// One sendto per batch; what it leaves goes with the next.
    Once,
    /// Only when the kernel asks (need_wakeup's flag on the TX ring), one
    /// sendto; without need_wakeup, as Once.
    Needed,
}

impl Kick {
    pub fn parse(s: &str) -> Option<Kick> {
        match s {
            "drain" => Some(Kick::Drain),
            "once" => Some(Kick::Once),
            "needed" => Some(Kick::Needed),
            _ => None,
        }
    }
}

/// The kernel side: an XSKMAP and a program that redirects each queue's
/// frames to its socket, attached through a bpf link.
pub struct Redirector {
    map: i32,
    prog: i32,
    link: i32,
}

impl Drop for Redirector {
    fn drop(&mut self) {
        unsafe {
            libc::close(self.link);
            libc::close(self.prog);
            libc::close(self.map);
        }
    }
}


impl Redirector {
    pub fn attach(ifindex: u32, queues: u32, generic: bool) -> Result<Redirector, String> {
        let mut a = [0u8; 128];
        put32(&mut a, 0, 17); // BPF_MAP_TYPE_XSKMAP
        put32(&mut a, 4, 4);
        put32(&mut a, 8, 4);
        put32(&mut a, 12, queues.max(1));
        let map = bpf(0, &mut a).map_err(|e| format!("create the XSKMAP: {e}"))?;
        // r2 = ctx->rx_queue_index; r1 = xsks; r3 = XDP_PASS; redirect_map; exit
        let mut ld = Insn { code: 0x18, regs: 1, off: 0, imm: map };
        ld.set_src(PSEUDO_MAP_FD);
        let insns = [
            Insn { code: 0x61, regs: 0x12, off: 16, imm: 0 },
            ld,
            Insn { code: 0, regs: 0, off: 0, imm: 0 },
            Insn { code: 0xb7, regs: 3, off: 0, imm: 2 },
            Insn { code: 0x85, regs: 0, off: 0, imm: 51 },
            Insn { code: 0x95, regs: 0, off: 0, imm: 0 },
        ];
        let raw: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
        let license = b"GPL\0";
        let mut a = [0u8; 128];
        put32(&mut a, 0, 6);
        put32(&mut a, 4, insns.len() as u32);
        put64(&mut a, 8, raw.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        put32(&mut a, 68, 37);
        let prog = bpf(5, &mut a).map_err(|e| {
            unsafe { libc::close(map) };
            format!("load the AF_XDP redirect program: {e}")
        })?;
        let mut a = [0u8; 128];
        put32(&mut a, 0, prog as u32);
        put32(&mut a, 4, ifindex);
        put32(&mut a, 8, 37); // BPF_XDP
        put32(&mut a, 12, if generic { 1 << 1 } else { 1 << 2 });
        let link = bpf(28, &mut a).map_err(|e| {
            unsafe {
                libc::close(prog);
                libc::close(map);
            }
            format!("attach XDP to interface {ifindex} ({} mode): {e}", if generic { "generic" } else { "native" })
        })?;
        Ok(Redirector { map, prog, link })
    }

    pub fn map_fd(&self) -> i32 {
        self.map
    }
}

/// Puts a queue's socket into an XSKMAP: from then on the queue's frames go
/// to it.
pub fn bind_xskmap(map: i32, queue: u32, sock: &Socket) -> Result<(), String> {
    let key = queue;
    let val = sock.fd as u32;
    let mut a = [0u8; 128];
    put32(&mut a, 0, map as u32);
    put64(&mut a, 8, &key as *const u32 as u64);
    put64(&mut a, 16, &val as *const u32 as u64);
    bpf(2, &mut a).map(|_| ()).map_err(|e| format!("add the socket of queue {queue} to the XSKMAP: {e}"))
}


/// A TAP device that PASSed frames are written to, so they reach the
/// kernel's stack.
pub struct Tap {
    fd: i32,
}

impl Tap {
    pub fn open(name: &str) -> Result<Tap, String> {
        let fd = unsafe { libc::open(b"/dev/net/tun\0".as_ptr() as *const libc::c_char, libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(errno("open /dev/net/tun"));
        }
        let mut ifr = [0u8; 40];
        let n = name.as_bytes();
        if n.is_empty() || n.len() > 15 {
            unsafe { libc::close(fd) };
            return Err(format!("TAP name {name:?}: 1 to 15 characters"));
        }
        ifr[..n.len()].copy_from_slice(n);
        let flags: u16 = 0x0002 | 0x1000; // IFF_TAP | IFF_NO_PI
        ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
        const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
        if unsafe { libc::ioctl(fd, TUNSETIFF, ifr.as_mut_ptr()) } < 0 {
            unsafe { libc::close(fd) };
            return Err(errno(&format!("create TAP device {name}")));
        }
        // A TAP that is down refuses frames: bring it up.
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        let mut req = [0u8; 40];
        req[..n.len()].copy_from_slice(n);
        let up = unsafe { libc::ioctl(s, libc::SIOCGIFFLAGS, req.as_mut_ptr()) } == 0 && {
            let flags = i16::from_ne_bytes([req[16], req[17]]) | libc::IFF_UP as i16;
            req[16..18].copy_from_slice(&flags.to_ne_bytes());
            let r = unsafe { libc::ioctl(s, libc::SIOCSIFFLAGS, req.as_mut_ptr()) };
            r == 0
        };
        let err = errno(&format!("bring TAP device {name} up"));
        unsafe { libc::close(s) };
        if !up {
            unsafe { libc::close(fd) };
            return Err(err);
        }
        Ok(Tap { fd })
    }

    pub fn write(&self, frame: &[u8]) -> bool {
        unsafe { libc::write(self.fd, frame.as_ptr() as *const libc::c_void, frame.len()) == frame.len() as isize }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}
