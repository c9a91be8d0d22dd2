//! bpf_fib_lookup from userspace: the kernel's routing table and neighbour
//! table of the runtime's network namespace, asked over rtnetlink, answered
//! in struct bpf_fib_lookup as the kernel's helper answers. The route is an
//! output lookup from the source to the destination (an input lookup with a
//! local source address is refused by the kernel as martian).

pub const SUCCESS: u64 = 0;
pub const BLACKHOLE: u64 = 1;
pub const UNREACHABLE: u64 = 2;
pub const PROHIBIT: u64 = 3;
pub const NOT_FWDED: u64 = 4;
pub const FWD_DISABLED: u64 = 5;
pub const NO_NEIGH: u64 = 7;
pub const FRAG_NEEDED: u64 = 8;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
/// REACHABLE, PROBE, STALE, DELAY, NOARP, PERMANENT: the kernel's NUD_VALID.
const NUD_VALID: u16 = 0x02 | 0x10 | 0x04 | 0x08 | 0x40 | 0x80;

/// The fields of struct bpf_fib_lookup the helper reads and writes.
pub struct Params {
    pub family: u8,
    pub tot_len: u16,
    pub ifindex: u32,
    pub src: [u8; 16],
    pub dst: [u8; 16],
}

pub struct Answer {
    pub ifindex: u32,
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    /// The next hop, when the route has a gateway: written to the
    /// destination field, as the kernel does.
    pub gateway: Option<[u8; 16]>,
    pub mtu: u16,
    pub metric: u32,
}

struct Netlink(i32);

impl Drop for Netlink {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

fn attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

/// Attributes after a fixed header of `skip` bytes: (type, data).
fn attrs(msg: &[u8], skip: usize) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut p = skip;
    while p + 4 <= msg.len() {
        let len = u16::from_ne_bytes([msg[p], msg[p + 1]]) as usize;
        let ty = u16::from_ne_bytes([msg[p + 2], msg[p + 3]]) & 0x3fff;
        if len < 4 || p + len > msg.len() {
            break;
        }
        out.push((ty, &msg[p + 4..p + len]));
        p += (len + 3) & !3;
    }
    out
}

impl Netlink {
    fn open() -> Option<Netlink> {
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
        (fd >= 0).then_some(Netlink(fd))
    }

    /// Sends one request and returns the payloads of the answers (after
    /// the netlink header), or the negative errno of an error answer.
    fn ask(&self, ty: u16, flags: u16, body: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, i32> {
        let mut msg = Vec::with_capacity(16 + body.len());
        msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(body);
        if unsafe { libc::send(self.0, msg.as_ptr() as *const libc::c_void, msg.len(), 0) } < 0 {
            return Err(-libc::EIO);
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = unsafe { libc::recv(self.0, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
            if n <= 0 {
                return Err(-libc::EIO);
            }
            let mut p = 0;
            let n = n as usize;
            while p + 16 <= n {
                let len = u32::from_ne_bytes(buf[p..p + 4].try_into().unwrap()) as usize;
                let t = u16::from_ne_bytes([buf[p + 4], buf[p + 5]]);
                if len < 16 || p + len > n {
                    return Err(-libc::EIO);
                }
                let payload = &buf[p + 16..p + len];
                match t {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let e = i32::from_ne_bytes(payload[..4].try_into().unwrap());
                        return if e == 0 { Ok(out) } else { Err(e) };
                    }
                    _ => out.push((t, payload.to_vec())),
                }
                p += (len + 3) & !3;
            }
            if flags & NLM_F_DUMP == 0 && !out.is_empty() {
                return Ok(out);
            }
        }
    }
}

fn ifname(ifindex: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; 16];
    let p = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
}

fn ioctl_ifreq(name: &str, req: libc::c_ulong) -> Option<[u8; 40]> {
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let mut ifr = [0u8; 40];
    ifr[..name.len().min(15)].copy_from_slice(&name.as_bytes()[..name.len().min(15)]);
    let r = unsafe { libc::ioctl(fd, req, ifr.as_mut_ptr()) };
    unsafe { libc::close(fd) };
    (r == 0).then_some(ifr)
}

fn forwarding(family: u8, dev: &str) -> bool {
    let fam = if family == AF_INET { "ipv4" } else { "ipv6" };
    std::fs::read_to_string(format!("/proc/sys/net/{fam}/conf/{dev}/forwarding")).map(|s| s.trim() == "1").unwrap_or(false)
}

/// The lookup; Err is the helper's failure code.
pub fn lookup(p: &Params) -> Result<Answer, u64> {
    let alen = match p.family {
        AF_INET => 4,
        AF_INET6 => 16,
        _ => return Err(NOT_FWDED),
    };
    // ifindex 0: an output lookup, with no arrival device to check.
    if p.ifindex != 0 {
        let in_dev = ifname(p.ifindex).ok_or(NOT_FWDED)?;
        if !forwarding(p.family, &in_dev) {
            return Err(FWD_DISABLED);
        }
    }
    let nl = Netlink::open().ok_or(NOT_FWDED)?;
    // struct rtmsg (RTM_F_FIB_MATCH: the FIB entry, not a resolved route),
    // then RTA_DST and RTA_SRC.
    let mut body = vec![p.family, (alen * 8) as u8, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&0x2000u32.to_ne_bytes());
    attr(&mut body, 1, &p.dst[..alen]);
    if p.src[..alen].iter().any(|&b| b != 0) {
        attr(&mut body, 2, &p.src[..alen]);
    }
    // Lookup errors name the route's type, as the kernel's helper maps
    // them: a blackhole is EINVAL, unreachable EHOSTUNREACH, prohibit
    // EACCES; anything else, no route among them, is not forwarded.
    let route = match nl.ask(RTM_GETROUTE, 0, &body) {
        Ok(r) => r,
        Err(e) if e == -libc::EINVAL => return Err(BLACKHOLE),
        Err(e) if e == -libc::EHOSTUNREACH => return Err(UNREACHABLE),
        Err(e) if e == -libc::EACCES => return Err(PROHIBIT),
        Err(_) => return Err(NOT_FWDED),
    };
    let (_, msg) = route.iter().find(|(t, _)| *t == RTM_NEWROUTE).ok_or(NOT_FWDED)?;
    match msg.get(7).copied().unwrap_or(0) {
        1 => {}
        6 => return Err(BLACKHOLE),
        7 => return Err(UNREACHABLE),
        8 => return Err(PROHIBIT),
        _ => return Err(NOT_FWDED),
    }
    let mut oif = 0;
    let mut gateway = None;
    let mut metric = 0;
    for (t, d) in attrs(msg, 12) {
        match t {
            4 if d.len() == 4 => oif = u32::from_ne_bytes(d.try_into().unwrap()),
            5 if d.len() == alen => {
                let mut g = [0u8; 16];
                g[..alen].copy_from_slice(d);
                gateway = Some(g);
            }
            6 if d.len() == 4 => metric = u32::from_ne_bytes(d.try_into().unwrap()),
            _ => {}
        }
    }
    let out_dev = ifname(oif).ok_or(NOT_FWDED)?;
    let mtu = ioctl_ifreq(&out_dev, libc::SIOCGIFMTU).map(|r| u32::from_ne_bytes(r[16..20].try_into().unwrap()) as u16).ok_or(NOT_FWDED)?;
    if p.tot_len > mtu {
        return Err(FRAG_NEEDED);
    }
    let smac: [u8; 6] = ioctl_ifreq(&out_dev, libc::SIOCGIFHWADDR).map(|r| r[18..24].try_into().unwrap()).ok_or(NOT_FWDED)?;
    let next = gateway.unwrap_or(p.dst);
    // struct ndmsg: family, pad, ifindex, state, flags, type.
    let mut nd = vec![p.family, 0, 0, 0];
    nd.extend_from_slice(&(oif as i32).to_ne_bytes());
    nd.extend_from_slice(&[0; 4]);
    let neigh = nl.ask(RTM_GETNEIGH, NLM_F_DUMP, &nd).map_err(|_| NOT_FWDED)?;
    let mut dmac = None;
    for (t, m) in &neigh {
        if *t != RTM_NEWNEIGH || m.len() < 12 {
            continue;
        }
        let ifi = i32::from_ne_bytes(m[4..8].try_into().unwrap()) as u32;
        let state = u16::from_ne_bytes([m[8], m[9]]);
        if ifi != oif || state & NUD_VALID == 0 {
            continue;
        }
        let a = attrs(m, 12);
        let dst = a.iter().find(|(t, _)| *t == 1).map(|(_, d)| *d);
        let ll = a.iter().find(|(t, _)| *t == 2).map(|(_, d)| *d);
        if dst == Some(&next[..alen]) {
            if let Some(l) = ll.filter(|l| l.len() == 6) {
                dmac = Some(l.try_into().unwrap());
            }
        }
    }
    let dmac = dmac.ok_or(NO_NEIGH)?;
    Ok(Answer { ifindex: oif, smac, dmac, gateway, mtu, metric })
}

